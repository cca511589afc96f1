import { describe, expect, it } from 'vitest';

import {
  formatElapsed,
  formatNumber,
  isActive,
  jobElapsed,
  lossSeries,
  renderStatusBadge,
  updateStatusBadge
} from '../src/shared';
import { makeJob } from './fixtures';

describe('formatElapsed', () => {
  it.each([
    [0, '0s'],
    [9.9, '9s'],
    [59, '59s'],
    [60, '1m 00s'],
    [187, '3m 07s'],
    [3599, '59m 59s'],
    [3600, '1h 00m'],
    [7500, '2h 05m'],
    [86_400, '1d 00h'],
    [273_600, '3d 04h']
  ])('%s s -> %s', (seconds, text) => {
    expect(formatElapsed(seconds)).toBe(text);
  });

  it('dashes missing and invalid values', () => {
    for (const v of [null, undefined, NaN, -1, Infinity]) {
      expect(formatElapsed(v as number)).toBe('\u2014');
    }
  });
});

describe('jobElapsed', () => {
  it('counts running jobs from started_at to now', () => {
    const job = makeJob(1, { status: 'running', started_at: 1000, ended_at: null, elapsed_s: 5 });
    expect(jobElapsed(job, 1100)).toBe(100);
  });

  it('uses elapsed_s for finished jobs', () => {
    expect(jobElapsed(makeJob(1, { elapsed_s: 42 }), 1e10)).toBe(42);
  });

  it('falls back to ended_at - started_at, then null', () => {
    expect(jobElapsed(makeJob(1, { elapsed_s: null, started_at: 10, ended_at: 25 }))).toBe(15);
    expect(jobElapsed(makeJob(1, { status: 'queued', elapsed_s: null, started_at: null, ended_at: null }))).toBe(null);
  });
});

describe('formatNumber', () => {
  it('formats integers, floats, tiny and missing values', () => {
    expect(formatNumber(40)).toBe('40');
    expect(formatNumber(2.345678)).toBe('2.346');
    expect(formatNumber(0.00002)).toBe('2.000e-5');
    expect(formatNumber(null)).toBe('\u2014');
  });
});

describe('status badges', () => {
  it('renders a badge with a status class and text', () => {
    const badge = renderStatusBadge('running');
    expect(badge.tagName).toBe('SPAN');
    expect(badge.classList.contains('jp-CleverThis-badge')).toBe(true);
    expect(badge.classList.contains('jp-CleverThis-badge-running')).toBe(true);
    expect(badge.textContent).toBe('running');
    expect(badge.dataset.status).toBe('running');
  });

  it('updates in place and sanitises the class', () => {
    const badge = renderStatusBadge('queued');
    updateStatusBadge(badge, 'failed');
    expect(badge.className).toBe('jp-CleverThis-badge jp-CleverThis-badge-failed');
    updateStatusBadge(badge, 'we"ird st<atus');
    expect(badge.className).toBe('jp-CleverThis-badge jp-CleverThis-badge-weirdstatus');
    updateStatusBadge(badge, null);
    expect(badge.textContent).toBe('unknown');
  });

  it('knows the active statuses', () => {
    expect(['queued', 'initializing', 'running'].every(isActive)).toBe(true);
    expect(['succeeded', 'failed', 'cancelled'].some(isActive)).toBe(false);
  });
});

describe('lossSeries', () => {
  it('keeps step events with a loss, sorted, last one per step wins', () => {
    const series = lossSeries([
      { seq: 0, type: 'phase', phase: 'running' },
      { seq: 1, type: 'step', step: 2, loss: 1.5 },
      { seq: 2, type: 'step', step: 1, loss: 2.0 },
      { seq: 3, type: 'step', step: 2, loss: 1.4 },
      { seq: 4, type: 'step', step: 3, loss: null },
      { seq: 5, type: 'epoch', epoch: 1 }
    ]);
    expect(series).toEqual([
      { step: 1, loss: 2.0 },
      { step: 2, loss: 1.4 }
    ]);
  });
});
