import { describe, expect, it, vi } from 'vitest';

import { CurveFollower, ICurves } from '../src/shared';

/** A server of a job with `steps` step losses, answering like GET .../metrics (a stride stands in for MinMaxLTTB). */
function server(steps: { n: number }) {
  return vi.fn(async (maxPoints: number, afterStep: number | null): Promise<ICurves> => {
    const all = Array.from({ length: steps.n }, (_, i) => i + 1).filter(s => afterStep === null || s > afterStep);
    const stride = Math.max(1, Math.ceil(all.length / maxPoints));
    const kept = all.filter((_, i) => i % stride === 0);
    if (kept.length && kept[kept.length - 1] !== all[all.length - 1]) {
      kept[kept.length - 1] = all[all.length - 1]; // like LTTB, the last point is kept
    }
    return {
      count: steps.n,
      after_step: afterStep,
      last_step: steps.n || null,
      step: kept,
      loss: kept.map(s => 10 / s),
      epochs: [],
      validation: all.filter(s => s % 1000 === 0).map(s => ({ epoch: s / 1000, step: s, eval_loss: 5 / s, perplexity: null })),
      latest: null
    };
  });
}

describe('CurveFollower', () => {
  it('draws a 5,000-step curve whole from its first step, then fetches only what follows', async () => {
    const steps = { n: 5_000 };
    const fetch = server(steps);
    const follower = new CurveFollower(fetch, 1000);
    expect(await follower.update()).toBe(true);
    expect(fetch).toHaveBeenLastCalledWith(1000, null);
    const first = follower.series;
    expect(first.count).toBe(5_000);
    expect(first.loss.length).toBeLessThanOrEqual(1000);
    expect(first.loss[0].step).toBe(1);
    expect(first.loss[first.loss.length - 1].step).toBe(5_000);
    expect(first.validation.map(p => p.step)).toEqual([1000, 2000, 3000, 4000, 5000]);

    steps.n = 5_010;
    expect(await follower.update()).toBe(true);
    expect(fetch).toHaveBeenLastCalledWith(1000, 5_000); // only the points after the last drawn step
    expect(follower.series.loss.length).toBe(first.loss.length + 10);
    expect(follower.series.loss[follower.series.loss.length - 1].step).toBe(5_010);
    expect(await follower.update()).toBe(false); // nothing new
  });

  it('downsamples anew once the appended points have doubled the curve', async () => {
    const steps = { n: 100 };
    const fetch = server(steps);
    const follower = new CurveFollower(fetch, 50);
    await follower.update();
    for (let n = 200; n <= 400; n += 100) {
      steps.n = n;
      await follower.update();
    }
    // 100 + 3 x 100 appended would be 400 points; the whole curve was fetched again on the way
    expect(fetch.mock.calls.filter(c => c[1] === null).length).toBeGreaterThan(1);
    expect(follower.series.loss.length).toBeLessThanOrEqual(2 * 50 + 100);
    expect(follower.series.loss[0].step).toBe(1);
  });
});
