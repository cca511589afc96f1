import { afterEach, describe, expect, it, vi } from 'vitest';

import widget, { IAnyModel, ModelTransport } from '../src/widget';
import { SCHEMA_BUNDLE, makeCheckpoint, makeDetail, makeJob } from './fixtures';

/** A minimal stand-in for the anywidget model. */
class FakeModel implements IAnyModel {
  constructor(state: Record<string, unknown>) {
    this.state = { jobs: [], detail: null, curve: null, view: 'list', logs: '', ...state };
  }
  state: Record<string, unknown>;
  sent: any[] = [];
  saves = 0;
  private handlers = new Map<string, Set<(...args: any[]) => void>>();
  get(name: string) {
    return this.state[name];
  }
  set(name: string, value: unknown) {
    this.state[name] = value;
    this.emit(`change:${name}`);
  }
  save_changes() {
    this.saves++;
  }
  on(event: string, cb: (...args: any[]) => void) {
    if (!this.handlers.has(event)) {
      this.handlers.set(event, new Set());
    }
    this.handlers.get(event)!.add(cb);
  }
  off(event?: string | null, cb?: ((...args: any[]) => void) | null) {
    if (event && cb) {
      this.handlers.get(event)?.delete(cb);
    }
  }
  send(content: unknown) {
    this.sent.push(content);
  }
  emit(event: string, ...args: unknown[]) {
    for (const cb of [...(this.handlers.get(event) ?? [])]) {
      cb(...args);
    }
  }
  listenerCount() {
    return [...this.handlers.values()].reduce((n, s) => n + s.size, 0);
  }
}

let cleanups: (() => void)[] = [];
afterEach(() => {
  cleanups.forEach(c => c());
  cleanups = [];
});

function render(model: FakeModel) {
  const el = document.createElement('div');
  document.body.appendChild(el);
  const cleanup = widget.render({ model, el });
  cleanups.push(cleanup);
  return { el, cleanup };
}

describe('anywidget entry', () => {
  it('renders the jobs traitlet and follows changes', () => {
    const model = new FakeModel({ jobs: [makeJob(1), makeJob(2, { status: 'running', started_at: null })] });
    const { el } = render(model);
    expect(el.querySelectorAll('.jp-CleverThis-JobTable-row').length).toBe(2);
    model.set('jobs', [makeJob(1), makeJob(2), makeJob(3)]);
    const rows = [...el.querySelectorAll<HTMLElement>('.jp-CleverThis-JobTable-row')].filter(
      r => r.style.display !== 'none'
    );
    expect(rows.length).toBe(3);
    expect(el.querySelector('.jp-CleverThis-badge-running')).toBeNull();
  });

  it('switches views with the view traitlet', () => {
    const model = new FakeModel({ jobs: [makeJob(1)], detail: makeDetail(), logs: 'hello log' });
    const { el } = render(model);
    const root = el.querySelector('.jp-CleverThis-widget') as HTMLElement;
    expect(root.dataset.view).toBe('list');
    model.set('view', 'detail');
    expect((el.querySelector('.jp-CleverThis-JobDetail') as HTMLElement).style.display).toBe('');
    expect((el.querySelector('.jp-CleverThis-JobTable') as HTMLElement).style.display).toBe('none');
    expect(el.querySelector('.jp-CleverThis-JobDetail-name')!.textContent).toBe('tiny-ft');
    model.set('view', 'logs');
    const logPanes = el.querySelectorAll('.jp-CleverThis-widget > .jp-CleverThis-LogView');
    expect(logPanes[0].textContent).toBe('hello log');
  });

  it('selecting a row sends select and shows the detail view', () => {
    const model = new FakeModel({ jobs: [makeJob(7)] });
    const { el } = render(model);
    (el.querySelector('.jp-CleverThis-JobTable-row') as HTMLElement).click();
    expect(model.sent[0]).toMatchObject({ action: 'select', name: 'job-0007' });
    expect(model.get('view')).toBe('detail');
    expect(model.saves).toBe(1);
    expect(el.querySelector('.jp-CleverThis-JobDetail-name')!.textContent).toBe('job-0007');
  });

  it('Cancel sends {action: "cancel", name}', async () => {
    const model = new FakeModel({ detail: makeDetail(), view: 'detail' });
    const { el } = render(model);
    const cancel = el.querySelector('.jp-CleverThis-JobDetail-cancel') as HTMLButtonElement;
    cancel.click();
    expect(model.sent[0]).toMatchObject({ action: 'cancel', name: 'tiny-ft' });
    expect(typeof model.sent[0].request_id).toBe('string');
    expect(cancel.disabled).toBe(true);
    // The kernel updates the detail traitlet: the request settles.
    model.set('detail', makeDetail({ status: 'cancelled' }));
    await new Promise(r => setTimeout(r, 0));
    expect(el.querySelector('.jp-CleverThis-badge-cancelled')).not.toBeNull();
    expect(cancel.textContent).toBe('Cancel');
  });

  it('Pre-fetch model and Export merged run in the kernel: the actions, the notice, the answers', async () => {
    const model = new FakeModel({
      view: 'detail',
      detail: makeDetail({ status: 'succeeded', checkpoints: [makeCheckpoint('epoch-1', '/d/epoch-1', { adapter_path: '/d/epoch-1/adapter_model' })] })
    });
    const { el } = render(model);
    const prefetch = el.querySelector('.jp-CleverThis-JobDetail-prefetch') as HTMLButtonElement;
    expect(prefetch.style.display).toBe(''); // a Hub id (sshleifer/tiny-gpt2)
    prefetch.click();
    const request = model.sent[model.sent.length - 1];
    expect(request).toMatchObject({ action: 'download', model: 'sshleifer/tiny-gpt2', cluster: 'local' });
    const notice = el.querySelector('.jp-CleverThis-notice') as HTMLElement;
    expect(notice.textContent).toContain('Pre-fetching sshleifer/tiny-gpt2 on every node');
    model.emit('msg:custom', {
      reply_to: request.request_id,
      ok: true,
      result: { model: 'sshleifer/tiny-gpt2', ok: true, nodes: [{ node_ip: '10.0.0.1', hostname: 'a', status: 'downloaded' }] }
    });
    await vi.waitFor(() => expect(notice.textContent).toBe('sshleifer/tiny-gpt2 is in the model cache of every node (a: downloaded).'));

    (el.querySelector('.jp-CleverThis-JobDetail-exportMerged-button') as HTMLButtonElement).click();
    const exp = model.sent[model.sent.length - 1];
    expect(exp).toMatchObject({ action: 'export', name: 'tiny-ft', checkpoint: 'epoch-1', dtype: 'bf16' });
    model.emit('msg:custom', {
      reply_to: exp.request_id,
      ok: false,
      error: { status: 403, code: 'forbidden', message: "only the job's owner may export", details: {} }
    });
    const status = el.querySelector('.jp-CleverThis-JobDetail-exportMerged-status') as HTMLElement;
    await vi.waitFor(() => expect(status.dataset.state).toBe('error'));
    expect(status.textContent).toContain("only the job's owner may export");
  });

  it('draws the curve traitlet (the server\'s downsampled series) on the curve view', async () => {
    const model = new FakeModel({ view: 'curve' });
    const { el } = render(model);
    expect(el.querySelector('.jp-CleverThis-widget > .jp-CleverThis-LossCurve .jp-CleverThis-LossCurve-empty')).not.toBeNull();
  });

  it('create view: form from the schema traitlet, create action, 422 errors under fields', async () => {
    const model = new FakeModel({ view: 'create', schema: SCHEMA_BUNDLE, cluster: 'gpu' });
    const { el } = render(model);
    const pane = el.querySelector('.jp-CleverThis-widgetCreate') as HTMLElement;
    expect(pane.style.display).toBe('');
    const name = pane.querySelector('[data-field="name"] input') as HTMLInputElement;
    name.value = 'nb-job';
    (pane.querySelector('[data-field="base_model"] input') as HTMLInputElement).value = 'm';
    (pane.querySelector('[data-field="dataset_path"] input') as HTMLInputElement).value = '/d';
    const button = pane.querySelector('.jp-CleverThis-createSubmit') as HTMLButtonElement;

    button.click();
    await new Promise(r => setTimeout(r, 0));
    const first = model.sent[model.sent.length - 1];
    expect(first).toMatchObject({ action: 'create', spec: { name: 'nb-job', cluster: 'gpu', job_type: 'train' } });
    model.emit('msg:custom', {
      reply_to: first.request_id,
      ok: false,
      error: { status: 422, code: 'invalid_spec', message: 'bad', details: { errors: [{ field: 'epochs', message: 'too many' }] } }
    });
    await new Promise(r => setTimeout(r, 0));
    expect(pane.querySelector('[data-field="epochs"] .jp-CleverThis-fieldError')!.textContent).toBe('too many');

    button.click();
    await new Promise(r => setTimeout(r, 0));
    const second = model.sent[model.sent.length - 1];
    model.emit('msg:custom', { reply_to: second.request_id, ok: true, result: makeDetail({ name: 'nb-job' }) });
    await new Promise(r => setTimeout(r, 0));
    expect(model.get('view')).toBe('detail');
    expect(el.querySelector('.jp-CleverThis-JobDetail-name')!.textContent).toBe('nb-job');
  });

  it('shows the error traitlet', () => {
    const model = new FakeModel({});
    const { el } = render(model);
    const bar = el.querySelector('.jp-CleverThis-errorBar') as HTMLElement;
    expect(bar.style.display).toBe('none');
    model.set('error', 'cluster unreachable');
    expect(bar.style.display).toBe('');
    expect(bar.textContent).toBe('cluster unreachable');
    model.set('error', '');
    expect(bar.style.display).toBe('none');
  });

  it('cleans up its listeners', () => {
    const model = new FakeModel({});
    const before = model.listenerCount();
    const { cleanup, el } = render(model);
    expect(model.listenerCount()).toBeGreaterThan(before);
    cleanup();
    cleanups = [];
    expect(model.listenerCount()).toBe(before);
    expect(el.children.length).toBe(0);
  });
});

describe('ModelTransport', () => {
  it('answers from the traitlets', async () => {
    const curve = {
      count: 2, after_step: null, last_step: 2, step: [1, 2], loss: [2, 1], epochs: [],
      validation: [{ epoch: 1, step: 2, eval_loss: 1.5, perplexity: 4.5 }], latest: null
    };
    const model = new FakeModel({ jobs: [makeJob(1), makeJob(2, { cluster: 'gpu' })], curve });
    const t = new ModelTransport(model);
    expect((await t.listClusters()).map(c => c.name).sort()).toEqual(['gpu', 'local']);
    expect((await t.listJobs('gpu')).map(j => j.name)).toEqual(['job-0002']);
    // the server's curve, whole (the kernel cannot filter by step: after_step null)
    expect(await t.getMetrics()).toEqual(curve);
    expect(await t.getEvents('local', 'x', 2)).toEqual({ events: [], next: 2 });
    await expect(t.getSchema()).rejects.toMatchObject({ code: 'unsupported' });
    t.dispose();
  });

  it('settles a request on the kernel reply message', async () => {
    const model = new FakeModel({});
    const t = new ModelTransport(model, 1000);
    const pending = t.getJob('local', 'tiny-ft');
    const request = model.sent[0];
    expect(request).toMatchObject({ action: 'select', name: 'tiny-ft' });
    model.emit('msg:custom', { reply_to: request.request_id, ok: true, result: makeDetail() });
    await expect(pending).resolves.toMatchObject({ name: 'tiny-ft' });

    const failing = t.createJob('local', { name: 'bad' });
    model.emit('msg:custom', {
      reply_to: model.sent[1].request_id,
      ok: false,
      error: { status: 422, code: 'invalid_spec', message: 'bad', details: { errors: [{ field: 'epochs', message: 'no' }] } }
    });
    const err = await failing.catch(e => e);
    expect(err.code).toBe('invalid_spec');
    expect(err.fieldErrors).toEqual([{ field: 'epochs', message: 'no' }]);
    t.dispose();
  });

  it('waits longer for a create (the kernel runs the pre-flight first) than for other actions', async () => {
    vi.useFakeTimers();
    try {
      const model = new FakeModel({});
      const t = new ModelTransport(model, 1000, 5000);
      const created = t.createJob('local', { name: 'tiny-ft' });
      let settled = false;
      void created.then(() => (settled = true), () => (settled = true));
      await vi.advanceTimersByTimeAsync(3000);
      expect(settled).toBe(false);
      model.emit('msg:custom', { reply_to: model.sent[0].request_id, ok: true, result: makeDetail() });
      await expect(created).resolves.toMatchObject({ name: 'tiny-ft' });

      const late = t.createJob('local', { name: 'slow' });
      const failed = late.catch(e => e);
      await vi.advanceTimersByTimeAsync(5001);
      expect((await failed).code).toBe('timeout');
      t.dispose();
    } finally {
      vi.useRealTimers();
    }
  });
});
