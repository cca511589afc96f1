import { describe, expect, it, vi } from 'vitest';

import { JobTable } from '../src/shared';
import { makeJob } from './fixtures';

const THOUSAND = Array.from({ length: 1000 }, (_, i) => makeJob(i));

function scroll(table: JobTable, top: number) {
  const viewport = table.node.querySelector('.jp-CleverThis-JobTable-viewport') as HTMLElement;
  viewport.scrollTop = top;
  viewport.dispatchEvent(new Event('scroll'));
}

describe('JobTable', () => {
  it('shows an empty message without jobs', () => {
    const table = new JobTable();
    expect(table.renderedRows()).toHaveLength(0);
    expect((table.node.querySelector('.jp-CleverThis-JobTable-empty') as HTMLElement).style.display).toBe('');
  });

  it('renders status badges, owner, type and elapsed time', () => {
    const table = new JobTable({ now: () => 1_700_000_070 });
    table.setJobs([
      makeJob(1, { status: 'running', started_at: 1_700_000_010, ended_at: null, owner: 'alice' }),
      makeJob(2, { status: 'failed', elapsed_s: 3725 })
    ]);
    const rows = table.renderedRows();
    expect(rows).toHaveLength(2);
    // Newest first.
    expect(rows.map(r => r.dataset.name)).toEqual(['job-0002', 'job-0001']);
    const running = rows[1];
    expect(running.querySelector('.jp-CleverThis-badge-running')!.textContent).toBe('running');
    expect(running.querySelector('.jp-CleverThis-JobTable-cell-owner')!.textContent).toBe('alice');
    expect(running.querySelector('.jp-CleverThis-JobTable-cell-job_type')!.textContent).toBe('Fine-tuning');
    expect(running.querySelector('.jp-CleverThis-JobTable-cell-elapsed')!.textContent).toBe('1m 00s');
    expect(rows[0].querySelector('.jp-CleverThis-badge-failed')).not.toBeNull();
    expect(rows[0].querySelector('.jp-CleverThis-JobTable-cell-elapsed')!.textContent).toBe('1h 02m');
  });

  it('virtualises 1,000 rows: only the visible window is in the DOM', () => {
    const table = new JobTable({ rowHeight: 28, fallbackHeight: 560, overscan: 10 });
    document.body.appendChild(table.node);
    table.setJobs(THOUSAND);
    expect(table.jobs).toHaveLength(1000);
    expect(table.node.getAttribute('aria-rowcount')).toBe('1000');
    const spacer = table.node.querySelector('.jp-CleverThis-JobTable-spacer') as HTMLElement;
    expect(spacer.style.height).toBe(`${1000 * 28}px`);
    const rows = table.renderedRows();
    expect(rows.length).toBe(30); // 560 / 28 = 20 visible + 10 overscan below
    expect(table.node.querySelectorAll('.jp-CleverThis-JobTable-row').length).toBeLessThan(60);
    expect(rows[0].dataset.name).toBe('job-0999');

    scroll(table, 500 * 28);
    const after = table.renderedRows();
    expect(after[0].dataset.index).toBe('490');
    expect(after[after.length - 1].dataset.index).toBe('529');
    expect(after.find(r => r.dataset.index === '500')!.dataset.name).toBe('job-0499');
    expect(after.find(r => r.dataset.index === '500')!.style.transform).toBe(`translateY(${500 * 28}px)`);
    expect(table.node.querySelectorAll('.jp-CleverThis-JobTable-row').length).toBeLessThan(60);
    table.dispose();
  });

  it('re-polling 1,000 jobs reuses row elements and stays fast', () => {
    const table = new JobTable();
    table.setJobs(THOUSAND);
    const before = table.renderedRows();
    const start = performance.now();
    for (let i = 0; i < 50; i++) {
      table.setJobs(THOUSAND.map(j => ({ ...j })));
    }
    const perPoll = (performance.now() - start) / 50;
    const after = table.renderedRows();
    expect(after).toHaveLength(before.length);
    after.forEach((row, i) => expect(row).toBe(before[i]));
    expect(perPoll).toBeLessThan(50);
  });

  it('updates a row when a job changes status', () => {
    const table = new JobTable();
    table.setJobs([makeJob(1, { status: 'running', started_at: null })]);
    table.setJobs([makeJob(1, { status: 'succeeded' })]);
    const [row] = table.renderedRows();
    expect(row.querySelector('.jp-CleverThis-badge')!.textContent).toBe('succeeded');
  });

  it('calls onSelect with the clicked job and highlights it', () => {
    const onSelect = vi.fn();
    const table = new JobTable({ onSelect });
    document.body.appendChild(table.node);
    table.setJobs(THOUSAND.slice(0, 5));
    const row = table.renderedRows()[2];
    (row.querySelector('.jp-CleverThis-JobTable-cell-name') as HTMLElement).click();
    expect(onSelect).toHaveBeenCalledWith(expect.objectContaining({ name: 'job-0002' }));
    expect(row.classList.contains('jp-mod-selected')).toBe(true);
    row.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    expect(onSelect).toHaveBeenCalledTimes(2);
    table.dispose();
  });

  it('sorts by clicking a column header', () => {
    const table = new JobTable();
    table.setJobs([makeJob(1, { name: 'b' }), makeJob(2, { name: 'c' }), makeJob(3, { name: 'a' })]);
    const header = table.node.querySelector('[data-column="name"]') as HTMLElement;
    header.click();
    expect(table.jobs.map(j => j.name)).toEqual(['a', 'b', 'c']);
    expect(header.getAttribute('aria-sort')).toBe('ascending');
    header.click();
    expect(table.jobs.map(j => j.name)).toEqual(['c', 'b', 'a']);
    expect(table.renderedRows().map(r => r.dataset.name)).toEqual(['c', 'b', 'a']);
  });
});
