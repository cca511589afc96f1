import { describe, expect, it, vi } from 'vitest';

import { ISweepDetail, SweepView } from '../src/shared';

const trial = (i: number, lr: number, loss: number | null, status = 'succeeded') => ({
  name: `sw-t${i}`, index: i, values: { learning_rate: lr }, status, epochs_done: 2, final_eval_loss: loss,
  best_eval_loss: loss, final_loss: 5.5, tokens_per_s: 1234.4, objective: loss, checkpoint_dir: `/c/sw/sw-t${i}`,
  message: null
}) as ISweepDetail['trials'][number];

const DETAIL: ISweepDetail = {
  name: 'sw', cluster: 'local', status: 'running', parameters: ['learning_rate'], metric: 'eval_loss',
  metric_label: 'validation loss', best: 'sw-t2', scheduler: 'asha', concurrent: 2, checkpoint_dir: '/c/sw',
  trials: [trial(1, 1e-4, 6.1), trial(2, 1e-3, 5.6), trial(3, 3e-3, null, 'queued')]
};

describe('SweepView', () => {
  it('lists the trials with the best one marked, and acts on them', () => {
    const onCompare = vi.fn();
    const onCreateFromBest = vi.fn();
    const onOpenTrial = vi.fn();
    const view = new SweepView({ onCompare, onCreateFromBest, onOpenTrial });
    expect(view.node.style.display).toBe('none');
    view.set(DETAIL);
    expect(view.node.style.display).toBe('');
    expect(view.node.querySelector('.jp-CleverThis-SweepView-header')!.textContent).toBe(
      '3 trials, 2 at once, ASHA early stopping \u00b7 best by validation loss: sw-t2');
    const rows = [...view.node.querySelectorAll('tr[data-trial]')].map(r => [...r.children].map(c => c.textContent));
    expect(rows[1]).toEqual(['\u2605 sw-t2', '0.001', 'succeeded', '5.6', '5.6', '5.5', '1234']);
    expect(rows[2].slice(2, 4)).toEqual(['queued', '\u2014']);
    expect(view.node.querySelectorAll('tr.jp-mod-best')).toHaveLength(1);
    view.node.querySelector<HTMLButtonElement>('.jp-CleverThis-SweepView-compare')!.click();
    expect(onCompare).toHaveBeenCalledWith('local', ['sw-t1', 'sw-t2', 'sw-t3']);
    view.node.querySelector<HTMLButtonElement>('.jp-CleverThis-SweepView-best')!.click();
    expect(onCreateFromBest).toHaveBeenCalledWith(DETAIL);
    view.node.querySelector<HTMLElement>('tr[data-trial="sw-t3"]')!.click();
    expect(onOpenTrial).toHaveBeenCalledWith('local', 'sw-t3');
    view.set({ ...DETAIL, best: null });
    expect(view.node.querySelector<HTMLButtonElement>('.jp-CleverThis-SweepView-best')!.disabled).toBe(true);
  });
});
