import { describe, expect, it, vi } from 'vitest';

import { IPlotly, JobDetailView, LogView } from '../src/shared';
import { makeCheckpoint, makeDetail, makePlan, makeQueuedReason, makeServing, makeTracking } from './fixtures';

function fakePlotly(): IPlotly & { react: ReturnType<typeof vi.fn> } {
  return { react: vi.fn().mockResolvedValue(undefined), purge: vi.fn(), Plots: { resize: vi.fn() } };
}

function cell(view: JobDetailView, key: string): string {
  return view.node.querySelector(`tr[data-key="${key}"] td`)!.textContent!;
}

describe('JobDetailView', () => {
  it('shows status, configuration, elapsed, metrics, checkpoints', () => {
    const plotly = fakePlotly();
    const view = new JobDetailView({ now: () => 1_700_000_090, lossCurve: { loadPlotly: async () => plotly } });
    view.setJob(makeDetail());
    expect(view.node.querySelector('.jp-CleverThis-JobDetail-name')!.textContent).toBe('tiny-ft');
    expect(view.node.querySelector('.jp-CleverThis-badge-running')).not.toBeNull();
    expect(cell(view, 'Elapsed')).toBe('1m 30s');
    expect(cell(view, 'Base model')).toBe('sshleifer/tiny-gpt2');
    expect(cell(view, 'Last loss')).toBe('2.346');
    expect(cell(view, 'Tokens / s')).toBe('1234.5');
    expect(cell(view, 'ETA')).toBe('2m 05s');
    expect(cell(view, 'Epoch')).toBe('1 / 2');
    expect(cell(view, 'epochs')).toBe('2');
    expect(cell(view, 'training_config')).toBe('{"learning_rate":0.001}');
    expect(view.node.querySelector('.jp-CleverThis-JobDetail-checkpointDir code')!.textContent).toBe('/ckpt/tiny-ft');
    expect(view.node.querySelector('.jp-CleverThis-JobDetail-checkpointList')!.textContent).toContain('epoch-1');
    expect((view.node.querySelector('.jp-CleverThis-JobDetail-error') as HTMLElement).style.display).toBe('none');
  });

  it("shows each worker's latest utilisation, GPU figures only where a GPU reported them", () => {
    const view = new JobDetailView();
    const section = view.node.querySelector('section[data-section="utilisation"]') as HTMLElement;
    view.setJob(makeDetail());
    expect(section.style.display).toBe('none'); // nothing reported yet
    const base = { src: null, seq: 1, t: 1, trial: null, type: 'utilisation' as const, pid: 1, epoch: 1, gpu_index: null,
      gpu_util_percent: null, gpu_memory_allocated_bytes: null, gpu_memory_used_bytes: null,
      gpu_memory_total_bytes: null, gpu_error: null };
    view.setJob(makeDetail({ utilisation: [
      { ...base, rank: 1, hostname: 'node-b', step: 12, cpu_percent: 97.4, rss_bytes: 2 * 1024 ** 3, gpu_index: 0,
        gpu_util_percent: 81, gpu_memory_used_bytes: 6 * 1024 ** 3, gpu_memory_total_bytes: 80 * 1024 ** 3 },
      { ...base, rank: 0, hostname: 'node-a', step: 12, cpu_percent: 99.6, rss_bytes: 1.5 * 1024 ** 3 }
    ] }));
    expect(section.style.display).toBe('');
    const rows = [...section.querySelectorAll('tr')].map(r => r.textContent);
    expect(rows).toEqual([
      'rank 0 (node-a)CPU 100 % \u00b7 memory 1.5 GB \u00b7 at step 12',
      'rank 1 (node-b)CPU 97 % \u00b7 memory 2.0 GB \u00b7 GPU 81 % \u00b7 GPU memory 6.0 GB of 80.0 GB \u00b7 at step 12'
    ]);
  });

  it('offers "Create from this job" and "Export" only where the host handles them', () => {
    const onClone = vi.fn();
    const onExport = vi.fn();
    const onSaveTemplate = vi.fn();
    const view = new JobDetailView({ onClone, onExport, onSaveTemplate });
    const clone = view.node.querySelector('.jp-CleverThis-JobDetail-clone') as HTMLButtonElement;
    const exportButton = view.node.querySelector('.jp-CleverThis-JobDetail-export') as HTMLButtonElement;
    expect(clone.disabled).toBe(true); // nothing shown yet
    view.setJob(makeDetail({ status: 'running' }));
    expect(clone.textContent).toBe('Create from this job');
    clone.click();
    exportButton.click();
    expect(onClone).toHaveBeenCalledWith(expect.objectContaining({ name: 'tiny-ft' }));
    expect(onExport).toHaveBeenCalledWith(expect.objectContaining({ name: 'tiny-ft' }));
    (view.node.querySelector('.jp-CleverThis-JobDetail-template') as HTMLButtonElement).click();
    expect(onSaveTemplate).toHaveBeenCalledWith(expect.objectContaining({ name: 'tiny-ft' }));
    const bare = new JobDetailView();
    expect((bare.node.querySelector('.jp-CleverThis-JobDetail-clone') as HTMLElement).style.display).toBe('none');
    expect((bare.node.querySelector('.jp-CleverThis-JobDetail-export') as HTMLElement).style.display).toBe('none');
  });

  it('shows the error message of a failed job and disables Cancel', () => {
    const view = new JobDetailView({ onCancel: vi.fn() });
    view.setJob(makeDetail({ status: 'failed', error: 'CUDA out of memory', ended_at: 1_700_000_100 }));
    const error = view.node.querySelector('.jp-CleverThis-JobDetail-error') as HTMLElement;
    expect(error.style.display).toBe('');
    expect(error.textContent).toBe('CUDA out of memory');
    const cancel = view.node.querySelector('.jp-CleverThis-JobDetail-cancel') as HTMLButtonElement;
    expect(cancel.disabled).toBe(true);
    expect(cell(view, 'ETA')).toBe('\u2014');
  });

  it('cancels an active job via onCancel', async () => {
    let finish!: () => void;
    const onCancel = vi.fn(() => new Promise<void>(resolve => (finish = resolve)));
    const view = new JobDetailView({ onCancel });
    view.setJob(makeDetail());
    const cancel = view.node.querySelector('.jp-CleverThis-JobDetail-cancel') as HTMLButtonElement;
    expect(cancel.disabled).toBe(false);
    cancel.click();
    expect(onCancel).toHaveBeenCalledWith(expect.objectContaining({ name: 'tiny-ft' }));
    expect(cancel.disabled).toBe(true);
    expect(cancel.textContent).toBe('Cancelling\u2026');
    finish();
    await new Promise(r => setTimeout(r, 0));
    expect(cancel.textContent).toBe('Cancel');
  });

  it('says why a job is queued, and shows advice and the traceback of a failure', () => {
    const view = new JobDetailView();
    const reason = makeQueuedReason('needs 3 workers \u00d7 1 CPU with PACK; node A has 2 free CPUs', [
      'fewer workers: 2 would start now',
      'wait for job other to end: its workers hold what this job needs'
    ]);
    view.setJob(makeDetail({ status: 'queued', queued_reason: reason }));
    const queued = view.node.querySelector('.jp-CleverThis-JobDetail-queued')!;
    expect(queued.querySelector('.jp-CleverThis-JobDetail-queuedMessage')?.textContent).toBe(
      'Why queued: needs 3 workers \u00d7 1 CPU with PACK; node A has 2 free CPUs'
    );
    expect([...queued.querySelectorAll('li')].map(li => li.textContent)).toEqual(reason.suggestions);
    view.setJob(makeDetail({ status: 'failed', error: 'boom', error_kind: 'out_of_memory',
      advice: 'Try: 1. QLoRA', traceback: 'Traceback (most recent call last): ...' }));
    expect(view.node.querySelector('.jp-CleverThis-JobDetail-advice')?.textContent).toContain('[out_of_memory] Try: 1. QLoRA');
    expect(view.node.querySelector('.jp-CleverThis-JobDetail-tracebackText')?.textContent).toContain('most recent call');
    expect((view.node.querySelector('.jp-CleverThis-JobDetail-queued') as HTMLElement).style.display).toBe('none');
  });

  it("shows the service's loss-curve diagnosis under the curve, hidden while too early", () => {
    const view = new JobDetailView();
    view.setJob(makeDetail());
    const hint = view.node.querySelector('section[data-section="loss"] .jp-CleverThis-JobDetail-curveHint') as HTMLElement;
    expect(hint.style.display).toBe('none');
    const advice = 'Loss oscillating without decrease: learning rate too high; reduce it by 10x.';
    view.setJob(makeDetail({ curve: { pattern: 'oscillating', advice, points: 40 } }));
    expect(hint.style.display).toBe('');
    expect(hint.textContent).toBe(advice);
    expect(hint.dataset.pattern).toBe('oscillating');
    // the slow and stuck hints of the service join it, one line each
    const slow = 'Data loading takes 40% of each step (0.40 s of 1.00 s): the dataset may be on slow storage.';
    view.setJob(makeDetail({ curve: null, hints: [{ kind: 'data_loading', message: slow }] }));
    expect(hint.style.display).toBe('');
    expect([...hint.querySelectorAll('.jp-CleverThis-JobDetail-hint')].map(x => x.textContent)).toEqual([slow]);
    expect(hint.querySelector('.jp-CleverThis-JobDetail-curveAdvice')).toBeNull();
  });

  it('resumes from the latest or from a chosen checkpoint, and copies paths', async () => {
    const onResume = vi.fn(async () => undefined);
    const view = new JobDetailView({ onResume });
    const ckpts = [
      makeCheckpoint('epoch-1', '/d/checkpoints/epoch-1', { epoch: 1 }),
      makeCheckpoint('epoch-2', '/d/checkpoints/epoch-2', { epoch: 2 })
    ];
    view.setJob(makeDetail({ status: 'running', checkpoints: ckpts }));
    const resume = view.node.querySelector('.jp-CleverThis-JobDetail-resume') as HTMLButtonElement;
    expect(resume.disabled).toBe(true); // still running
    view.setJob(makeDetail({ status: 'cancelled', checkpoints: ckpts,
      serving: makeServing({ model_path: '/d/checkpoints/epoch-2', lora_adapter_path: '/d/checkpoints/epoch-2/adapter_model' }) }));
    expect(resume.disabled).toBe(false);
    resume.click();
    await vi.waitFor(() => expect(onResume).toHaveBeenCalledTimes(1));
    expect(onResume.mock.calls[0]).toHaveLength(2);
    const here = view.node.querySelectorAll<HTMLButtonElement>('.jp-CleverThis-JobDetail-resumeHere');
    expect(here).toHaveLength(2);
    here[0].click();
    await vi.waitFor(() => expect(onResume).toHaveBeenCalledTimes(2));
    expect((onResume.mock.calls[1] as unknown[])[1]).toMatchObject({ name: 'epoch-1' });
    expect(view.node.querySelector('[data-section="serving"]')?.textContent).toContain('epoch-2/adapter_model');
    expect(view.node.querySelectorAll('.jp-CleverThis-copy').length).toBe(2); // one per path (load code: from the service)
  });

  it('offers "Pre-fetch model" for a Hub model only', () => {
    const onPrefetch = vi.fn();
    const view = new JobDetailView({ onPrefetch });
    const button = view.node.querySelector('.jp-CleverThis-JobDetail-prefetch') as HTMLButtonElement;
    view.setJob(makeDetail({ base_model: 'meta-llama/Llama-2-7b-hf' }));
    expect(button.style.display).toBe('');
    button.click();
    expect(onPrefetch).toHaveBeenCalledWith(view.job);
    for (const local of ['/models/tiny', './tiny', '~/m', 'tiny-local']) {
      view.setJob(makeDetail({ base_model: local }));
      expect(button.style.display).toBe('none');
    }
  });

  it("offers a failure's fixes from the service as buttons that open the create form with the fixed spec", () => {
    const onRetryWith = vi.fn();
    const view = new JobDetailView({ onRetryWith });
    const qlora = { label: 'Retry with QLoRA', patch: { training_config: { method: 'qlora' } }, why: '4-bit base weights',
      spec: { name: 'j', training_config: { method: 'qlora' as const } } };
    const half = { label: 'Retry with half the batch size', patch: { batch_size: 4 }, why: null, spec: { name: 'j', batch_size: 4 } };
    view.setJob(makeDetail({ status: 'failed', error: 'CUDA out of memory', error_kind: 'out_of_memory', fixes: [qlora, half] }));
    const buttons = [...view.node.querySelectorAll<HTMLButtonElement>('.jp-CleverThis-JobDetail-fix')];
    expect(buttons.map(b => b.textContent)).toEqual(['Retry with QLoRA', 'Retry with half the batch size']);
    expect(buttons[0].title).toBe('4-bit base weights');
    buttons[1].click();
    expect(onRetryWith).toHaveBeenCalledWith(view.job, half);
    view.setJob(makeDetail({ status: 'running', fixes: [] }));
    expect((view.node.querySelector('.jp-CleverThis-JobDetail-fixes') as HTMLElement).style.display).toBe('none');
  });

  it('exports a LoRA checkpoint merged, in the chosen precision, and says where it went or why not', async () => {
    const onExportMerged = vi.fn(async (_job: unknown, ckpt: { name: string }, dtype: string) => ({
      job: 'j', checkpoint: ckpt.name, source: `/d/${ckpt.name}`, path: `/d/exports/${ckpt.name}-merged-${dtype}`, dtype, size_bytes: 10
    }));
    const view = new JobDetailView({ onExportMerged });
    view.setJob(makeDetail({ status: 'succeeded', checkpoints: [
      makeCheckpoint('epoch-1', '/d/epoch-1', { adapter_path: '/d/epoch-1/adapter_model' }),
      makeCheckpoint('full', '/d/full')
    ] }));
    const buttons = view.node.querySelectorAll<HTMLButtonElement>('.jp-CleverThis-JobDetail-exportMerged-button');
    expect(buttons).toHaveLength(1); // only the checkpoint with an adapter
    (view.node.querySelector('.jp-CleverThis-JobDetail-exportMerged-dtype') as HTMLSelectElement).value = 'fp16';
    buttons[0].click();
    const status = view.node.querySelector('.jp-CleverThis-JobDetail-exportMerged-status') as HTMLElement;
    expect(status.textContent).toContain('Exporting epoch-1 as fp16');
    await vi.waitFor(() => expect(status.dataset.state).toBe('done'));
    expect(status.textContent).toBe('Exported epoch-1 as fp16: /d/exports/epoch-1-merged-fp16');
    expect(onExportMerged.mock.calls[0][2]).toBe('fp16');
    onExportMerged.mockRejectedValueOnce(new Error("job 'j' has no checkpoint 'epoch-1'"));
    view.setJob(view.job!); // a refresh re-renders the list: the control keeps its state
    (view.node.querySelector('.jp-CleverThis-JobDetail-exportMerged-button') as HTMLButtonElement).click();
    await vi.waitFor(() => expect(status.dataset.state).toBe('error'));
    expect(status.textContent).toContain("failed: job 'j' has no checkpoint 'epoch-1'");
  });

  it("lists each checkpoint with its numbers and links, and the service's code to load it", () => {
    const view = new JobDetailView();
    const load = (p: string) => `model = AutoModelForCausalLM.from_pretrained('${p}')`;
    view.setJob(makeDetail({ status: 'succeeded', checkpoints: [
      makeCheckpoint('epoch-1', '/d/epoch-1', { epoch: 1, step: 10, train_loss: 2.5, eval_loss: 2.25, size_bytes: 4_100_000,
        marks: ['best'], snippet: load('/d/epoch-1') }),
      makeCheckpoint('epoch-2', '/d/epoch-2', { epoch: 2, step: 20, train_loss: 2.125, size_bytes: 999,
        marks: ['latest', 'epoch-final'], snippet: load('/d/epoch-2') })
    ] }));
    const items = [...view.node.querySelectorAll('.jp-CleverThis-JobDetail-checkpointList li')];
    expect(items.map(li => li.querySelector('.jp-CleverThis-JobDetail-checkpointNumbers')?.textContent)).toEqual([
      'epoch 1 \u00b7 step 10 \u00b7 train loss 2.5 \u00b7 validation loss 2.25 \u00b7 4.1 MB',
      'epoch 2 \u00b7 step 20 \u00b7 train loss 2.125 \u00b7 999 B'
    ]);
    expect(items.map(li => [...li.querySelectorAll('.jp-CleverThis-JobDetail-checkpointMark')].map(m => m.textContent))).toEqual([
      ['best'], ['latest', 'epoch-final']
    ]);
    expect(items[0].querySelector('.jp-CleverThis-JobDetail-copySnippet')?.textContent).toBe('Copy load code');
    // the snippet shown under the list loads the job's final checkpoint
    expect(view.node.querySelector('.jp-CleverThis-JobDetail-snippet pre')?.textContent).toBe(load('/d/epoch-2'));
  });

  it('says where the run was tracked, and the LoRA targets of the plan', () => {
    const view = new JobDetailView({ lossCurve: { loadPlotly: async () => fakePlotly() } });
    view.setJob(
      makeDetail({
        tracking: makeTracking({
          tensorboard: { log_dir: '/d/checkpoints/runs/tiny-ft' },
          mlflow: { run_id: 'abc', url: 'http://127.0.0.1:5000/#/experiments/1/runs/abc' },
          wandb: { run_id: 'w1', dir: '/w/offline-run/files', url: null, mode: 'offline' }
        }),
        plan: makePlan({
          method: 'lora',
          batching: 'grouped',
          reasons: {
            method: 'lora: asked',
            lora_target_modules: "c_attn: peft's default for gpt2",
            batching: 'grouped (automatic): batches of examples of similar length'
          }
        })
      })
    );
    expect(cell(view, 'batching')).toBe('grouped (automatic): batches of examples of similar length');
    expect(cell(view, 'TensorBoard')).toBe('/d/checkpoints/runs/tiny-ft');
    expect(cell(view, 'MLflow')).toBe('http://127.0.0.1:5000/#/experiments/1/runs/abc');
    expect(cell(view, 'W&B')).toBe('offline run in /w/offline-run/files');
    expect(cell(view, 'lora_target_modules')).toBe("c_attn: peft's default for gpt2");
  });

  it("says the plan's memory per worker beside the highest peak a worker measured", () => {
    const view = new JobDetailView({ lossCurve: { loadPlotly: async () => fakePlotly() } });
    const plan = makePlan({
      method: 'full',
      optim: 'adamw_torch',
      memory_per_worker_gb: { weights: 0.1, activations: 0.5, process: 0.5, total: 1.93 },
      reasons: { optim: 'adamw_torch: the Trainer\'s AdamW (two fp32 moments per trained parameter)' }
    });
    view.setJob(makeDetail({ plan }));
    expect(cell(view, 'memory')).toBe('planned 1.9 GB');
    expect(cell(view, 'optim')).toBe("adamw_torch: the Trainer's AdamW (two fp32 moments per trained parameter)");
    view.setJob(makeDetail({ plan, memory: { planned_gb: 1.93, peak_bytes: 2_100_000_000, rank: 1, text: '' } }));
    expect(cell(view, 'memory')).toBe('planned 1.9 GB, peak 2.1 GB');
  });

  it('has a Back link calling onBack', () => {
    const onBack = vi.fn();
    const view = new JobDetailView({ onBack });
    (view.node.querySelector('.jp-CleverThis-back') as HTMLElement).click();
    expect(onBack).toHaveBeenCalled();
  });

  it('shows logs', () => {
    const view = new JobDetailView();
    view.setJob(makeDetail());
    view.setLogs('line 1\nline 2');
    expect(view.node.querySelector('.jp-CleverThis-LogView-text')!.textContent).toBe('line 1\nline 2');
    expect(view.logView!.text).toBe('line 1\nline 2');
  });

  it('adds only the new lines of a growing log to the page, and cuts a long one back to its end', () => {
    const logs = new LogView({ maxChars: 100 });
    const pre = logs.node.querySelector('.jp-CleverThis-LogView-text')!;
    logs.setText('line 1\n');
    const first = pre.firstChild;
    logs.setText('line 1\nline 2\n');
    expect(pre.firstChild).toBe(first); // kept, not set again
    expect(pre.childNodes.length).toBe(2);
    expect(pre.textContent).toBe('line 1\nline 2\n');
    expect(logs.text).toBe('line 1\nline 2\n');
    const long = Array.from({ length: 30 }, (_, i) => `line ${i + 1}`).join('\n') + '\n';
    logs.setText(long); // past 1.5 x maxChars: the end only, with the note
    expect(logs.text.length).toBeLessThanOrEqual(100);
    expect(long.endsWith(logs.text)).toBe(true);
    expect(pre.textContent!.startsWith('\u2026 (earlier output truncated)\n')).toBe(true);
    logs.setText('another log\n'); // not a continuation: replaced
    expect(pre.textContent).toBe('another log\n');
  });
});

describe('LossCurve (in the detail view)', () => {
  it('draws the step-loss series with plotly', async () => {
    const plotly = fakePlotly();
    const view = new JobDetailView({ lossCurve: { loadPlotly: async () => plotly } });
    view.setJob(makeDetail());
    await view.setEvents([
      { seq: 0, type: 'step', step: 1, loss: 3 },
      { seq: 1, type: 'step', step: 2, loss: 2.5 }
    ]);
    expect(plotly.react).toHaveBeenCalledTimes(1);
    const [el, data] = plotly.react.mock.calls[0];
    expect(el).toBeInstanceOf(HTMLElement);
    expect(data[0].x).toEqual([1, 2]);
    expect(data[0].y).toEqual([3, 2.5]);
    await view.addEvents([{ seq: 2, type: 'step', step: 3, loss: 2.1 }]);
    const last = plotly.react.mock.calls[plotly.react.mock.calls.length - 1];
    expect(last[1][0].x).toEqual([1, 2, 3]);
    expect(view.lossCurve!.points).toHaveLength(3);
  });

  it('draws the validation losses at the step they were measured (epoch ends and eval_steps)', async () => {
    const plotly = fakePlotly();
    const view = new JobDetailView({ lossCurve: { loadPlotly: async () => plotly } });
    await view.setEvents([
      { seq: 0, type: 'step', step: 1, loss: 3 },
      { seq: 1, type: 'step', step: 2, loss: 2.5 },
      { seq: 2, type: 'validation', step: 2, epoch: 0.5, eval_loss: 2.7 }
    ]);
    let data = plotly.react.mock.calls[plotly.react.mock.calls.length - 1][1];
    expect(data[1].name).toBe('validation loss');
    expect(data[1].x).toEqual([2]);
    expect(data[1].y).toEqual([2.7]);
    await view.addEvents([
      { seq: 3, type: 'step', step: 4, loss: 2.0 },
      { seq: 4, type: 'validation', step: 4, epoch: 1, eval_loss: 2.4 }
    ]);
    data = plotly.react.mock.calls[plotly.react.mock.calls.length - 1][1];
    expect(data[1].x).toEqual([2, 4]);
    expect(data[1].y).toEqual([2.7, 2.4]);
    expect(view.lossCurve!.validation).toHaveLength(2);
  });

  it('shows a placeholder and does not load plotly without data', async () => {
    const load = vi.fn();
    const view = new JobDetailView({ lossCurve: { loadPlotly: load } });
    await view.setEvents([{ seq: 0, type: 'phase', phase: 'running' }]);
    expect(load).not.toHaveBeenCalled();
    expect(view.node.querySelector('.jp-CleverThis-LossCurve-empty')!.textContent).toMatch(/No loss/);
  });

  it('redraws a curve drawn while hidden (a background tab) once it is shown, then only resizes', async () => {
    const plotly = fakePlotly();
    const view = new JobDetailView({ lossCurve: { loadPlotly: async () => plotly } });
    document.body.appendChild(view.node);
    await view.setEvents([{ i: 1, type: 'step', step: 1, loss: 3 }]); // jsdom lays nothing out: drawn hidden
    expect(plotly.react).toHaveBeenCalledTimes(1);
    const plot = view.node.querySelector('.jp-CleverThis-LossCurve-plot') as HTMLElement;
    plot.getClientRects = () => [new DOMRect(0, 0, 600, 220)] as unknown as DOMRectList; // now displayed
    view.lossCurve!.resize();
    await new Promise(r => setTimeout(r, 0));
    expect(plotly.react).toHaveBeenCalledTimes(2); // redrawn with the colours of now, not only resized
    expect(plotly.Plots!.resize).not.toHaveBeenCalled();
    view.lossCurve!.resize();
    expect(plotly.Plots!.resize).toHaveBeenCalledTimes(1);
    expect(plotly.react).toHaveBeenCalledTimes(2);
    view.dispose();
  });

  it('redraws with the new colours when JupyterLab switches theme', async () => {
    const plotly = fakePlotly();
    const view = new JobDetailView({ lossCurve: { loadPlotly: async () => plotly } });
    document.body.appendChild(view.node);
    await view.setEvents([{ i: 1, type: 'step', step: 1, loss: 3 }]);
    expect(plotly.react).toHaveBeenCalledTimes(1);
    const frames = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 0))));
    // JupyterLab hides the main area as it sets the attribute and shows it a frame later: the redraw waits.
    document.body.dataset.jpThemeName = 'JupyterLab Dark';
    await new Promise(r => setTimeout(r, 0));
    expect(plotly.react).toHaveBeenCalledTimes(1);
    await frames();
    expect(plotly.react).toHaveBeenCalledTimes(2);
    view.dispose();
    document.body.dataset.jpThemeName = 'JupyterLab Light';
    await frames();
    expect(plotly.react).toHaveBeenCalledTimes(2);
  });
});
