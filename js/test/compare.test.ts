import { describe, expect, it, vi } from 'vitest';

vi.mock('@jupyterlab/ui-components', () => import('./uiComponentsMock'));

import { Widget } from '@lumino/widgets';

import { CompareTab, diffCell } from '../src/compareTab';
import { TrainingPanel } from '../src/panel';
import { IPlotly, ITransport, LossCurve } from '../src/shared';
import { makeJob } from './fixtures';

function fakePlotly(): IPlotly & { react: ReturnType<typeof vi.fn> } {
  return { react: vi.fn().mockResolvedValue(undefined), purge: vi.fn(), Plots: { resize: vi.fn() } };
}

const curves = (base: number) => ({
  count: 3, after_step: null, last_step: 3, step: [1, 2, 3], loss: [base, base - 0.5, base - 1],
  epochs: [], validation: [{ epoch: 1, step: 3, eval_loss: base - 0.8 }], latest: null
});

function clickRow(panel: TrainingPanel, name: string, init: MouseEventInit = {}) {
  const row = panel.node.querySelector(`.jp-CleverThis-JobTable-row[data-name="${name}"]`) as HTMLElement;
  row.dispatchEvent(new MouseEvent('click', { bubbles: true, ...init }));
  return row;
}

describe('comparing jobs from the sidebar', () => {
  it('Ctrl/Cmd+click marks rows without opening them; two marked offer Compare; Clear unmarks', async () => {
    const transport = {
      listClusters: vi.fn().mockResolvedValue([{ name: 'local', address: '', status: 'running', managed: false, resources: null }]),
      listJobs: vi.fn(async () => [makeJob(1), makeJob(2), makeJob(3)])
    } as unknown as ITransport;
    const onOpenJob = vi.fn();
    const onCompareJobs = vi.fn();
    const panel = new TrainingPanel({ transport, defaultCluster: 'local', onOpenJob, onCompareJobs });
    Widget.attach(panel, document.body);
    await panel.refresh();
    const bar = panel.node.querySelector('.jp-CleverThis-marks') as HTMLElement;
    expect(bar.style.display).toBe('none');
    const first = clickRow(panel, 'job-0003', { ctrlKey: true });
    expect(first.classList.contains('jp-mod-marked')).toBe(true);
    expect(first.getAttribute('aria-selected')).toBe('true');
    expect(onOpenJob).not.toHaveBeenCalled();
    expect(bar.textContent).toContain('1 job marked: Ctrl+click another to compare');
    const compare = bar.querySelector('.jp-CleverThis-compare') as HTMLButtonElement;
    expect(compare.disabled).toBe(true);
    clickRow(panel, 'job-0001', { metaKey: true });
    expect(bar.textContent).toContain('2 jobs marked');
    compare.click();
    expect(onCompareJobs).toHaveBeenCalledWith('local', ['job-0003', 'job-0001']);
    clickRow(panel, 'job-0002'); // a plain click still opens the job
    expect(onOpenJob).toHaveBeenCalledWith('local', 'job-0002');
    (bar.querySelector('.jp-CleverThis-clearMarks') as HTMLButtonElement).click();
    expect(panel.table.marked).toEqual([]);
    expect(bar.style.display).toBe('none');
    expect(panel.node.querySelectorAll('.jp-mod-marked')).toHaveLength(0);
    panel.dispose();
  });

  it('overlays every job in its own colour, validation dotted', async () => {
    const plotly = fakePlotly();
    const curve = new LossCurve({ loadPlotly: async () => plotly });
    await curve.setRuns([
      { name: 'a', points: [{ step: 1, loss: 2 }, { step: 2, loss: 1.5 }], validation: [{ step: 2, loss: 1.7 }] },
      { name: 'b', points: [{ step: 1, loss: 3 }, { step: 2, loss: 2.5 }], validation: [] }
    ]);
    const [, traces, layout] = plotly.react.mock.calls[0];
    expect(traces.map((t: any) => t.name)).toEqual(['a', 'a (validation)', 'b']);
    expect(traces[0].line.color).toBe(traces[1].line.color);
    expect(traces[1].line.dash).toBe('dot');
    expect(traces[2].line.color).not.toBe(traces[0].line.color);
    expect(layout.showlegend).toBe(true);
    await curve.setSeries([{ step: 1, loss: 1 }], []); // back to one job's curve
    expect(plotly.react.mock.calls[1][1].map((t: any) => t.name)).toEqual(['loss', 'validation loss']);
  });

  it("the compare tab draws each job's curve and the service's diff", async () => {
    const plotly = fakePlotly();
    const transport = {
      compareJobs: vi.fn().mockResolvedValue({
        jobs: ['a', 'b'],
        diff: [
          { key: 'epochs', values: { a: 2, b: 50 } },
          { key: 'training_config.lora_target_modules', values: { a: ['q_proj', 'v_proj'], b: null } }
        ]
      }),
      getMetrics: vi.fn(async (_c: string, name: string) => curves(name === 'a' ? 3 : 4))
    } as unknown as ITransport;
    const tab = new CompareTab(transport, 'local', ['a', 'b']);
    (tab.curve as any)._loadPlotly = async () => plotly;
    await tab.load();
    expect(transport.compareJobs).toHaveBeenCalledWith('local', ['a', 'b']);
    expect(plotly.react.mock.calls[0][1].map((t: any) => t.name)).toEqual(['a', 'a (validation)', 'b', 'b (validation)']);
    const rows = [...tab.node.querySelectorAll('.jp-CleverThis-compare-diff tbody tr')].map(r =>
      [...r.children].map(c => c.textContent)
    );
    expect(rows).toEqual([
      ['epochs', '2', '50'],
      ['training_config.lora_target_modules', '["q_proj","v_proj"]', '\u2014']
    ]);
    (transport.compareJobs as any).mockRejectedValueOnce(new Error("no job named 'b'"));
    await tab.load();
    expect(tab.node.querySelector('.jp-CleverThis-errorBar')!.textContent).toBe("Cannot compare a, b: no job named 'b'");
    expect(diffCell(undefined)).toBe('\u2014');
    tab.dispose();
  });
});
