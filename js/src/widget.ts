/**
 * anywidget ESM entry of the notebook widgets (bundled by esbuild into
 * `jupyter_cleverthis/widgets/static/widget.js`, with `widget.css`).
 *
 * Traitlets read: `jobs` (list of JobSummary), `detail` (JobDetail or null),
 * `curve` (the detail's loss curves as `GET .../metrics` serves them), `view` ("list" | "detail" | "curve" |
 * "logs" | "create"), `logs` (string); optional `schema` (the `GET /schema`
 * answer, needed by "create"), `cluster` (string) and `error` (string, shown
 * in the error bar).
 * The front-end writes `view` and sends actions with `model.send(...)`
 * (`modelTransport.ts` lists them).
 */
import '../style/base.css';

import { IAnyModel, ModelTransport } from './modelTransport';
import {
  CSS_PREFIX,
  ICheckpoint,
  IJobDetail,
  IJobSummary,
  JobDetailView,
  JobTable,
  LogView,
  LossCurve,
  downloadSummary,
  errorMessage,
  h,
  seriesOf,
  summaryAsDetail
} from './shared';
import { WidgetCreatePane } from './widgetCreatePane';

export type { IAnyModel } from './modelTransport';
export { ModelTransport } from './modelTransport';

/** Views selectable with the `view` traitlet. */
export type WidgetView = 'list' | 'detail' | 'curve' | 'logs' | 'create';

const VIEWS: readonly WidgetView[] = ['list', 'detail', 'curve', 'logs', 'create'];

/** The widget's views over one model, following its traitlets. */
class WidgetRenderer {
  constructor(
    readonly model: IAnyModel,
    el: HTMLElement
  ) {
    this.transport = new ModelTransport(model);
    this._status.style.display = 'none';
    this.table = new JobTable({ fallbackHeight: 320, onSelect: job => this._select(job) });
    this.detail = new JobDetailView({
      onBack: () => this._setView('list'),
      onCancel: job => this._cancel(job),
      onResume: (job, checkpoint) => this._resume(job, checkpoint),
      onPrefetch: job => void this._prefetch(job),
      onExportMerged: (job, checkpoint, dtype) => this.transport.exportCheckpoint(job.cluster, job.name, checkpoint.name, dtype)
    });
    this.create = new WidgetCreatePane(this.transport, created => {
      this.detail.setJob(created);
      this._setView('detail');
    });
    this._panes = {
      list: this.table.node,
      detail: this.detail.node,
      curve: this.curve.node,
      logs: this.logs.node,
      create: this.create.node
    };
    this._notice.style.display = 'none';
    this._root.append(this._status, this._notice, this.table.node, this.detail.node, this.curve.node, this.logs.node, this.create.node);
    el.appendChild(this._root);
    this._listeners = [
      ['change:jobs', () => this._onJobs()],
      ['change:detail', () => this._onDetail()],
      ['change:curve', () => this._onCurve()],
      ['change:logs', () => this._onLogs()],
      ['change:view', () => this._apply()],
      ['change:schema', () => this.create.onSchema()],
      ['change:cluster', () => this.create.onCluster()],
      ['change:error', () => this._showError(this._localError)]
    ];
    for (const [event, callback] of this._listeners) {
      model.on(event, callback);
    }
    this._onJobs();
    this._onDetail();
    this._onCurve();
    this._onLogs();
    this.create.onSchema();
    this._showError(null);
    this._apply();
    // Keep the elapsed times moving between kernel updates.
    this._timer = setInterval(() => this._tick(), 1000);
  }

  readonly transport: ModelTransport;
  readonly table: JobTable;
  readonly detail: JobDetailView;
  readonly curve = new LossCurve({ height: 280 });
  readonly logs = new LogView();
  readonly create: WidgetCreatePane;

  dispose(): void {
    clearInterval(this._timer);
    for (const [event, callback] of this._listeners) {
      this.model.off(event, callback);
    }
    this.transport.dispose();
    this.table.dispose();
    this.detail.dispose();
    this.curve.dispose();
    this.logs.dispose();
    this._root.remove();
  }

  private _showError(message: string | null): void {
    this._localError = message;
    const kernelError = this.model.get('error');
    const text = [this._localError, typeof kernelError === 'string' ? kernelError : '']
      .filter(Boolean)
      .join('\n');
    this._status.textContent = text;
    this._status.style.display = text ? '' : 'none';
  }

  private _setView(view: WidgetView): void {
    this.model.set('view', view);
    this.model.save_changes();
    this._apply();
  }

  private _currentView(): WidgetView {
    const view = this.model.get('view');
    return (VIEWS as readonly string[]).includes(view) ? (view as WidgetView) : 'list';
  }

  private _apply(): void {
    const view = this._currentView();
    this._root.dataset.view = view;
    for (const key of VIEWS) {
      this._panes[key].style.display = key === view ? '' : 'none';
    }
    if (view === 'list') {
      this.table.render();
    }
  }

  private _tick(): void {
    const view = this._currentView();
    if (view === 'list') {
      this.table.render();
    } else if (view === 'detail' && this.detail.job) {
      this.detail.setJob(this.detail.job);
    }
  }

  private _select(job: IJobSummary): void {
    this.transport.send({ action: 'select', name: job.name, cluster: job.cluster });
    const known = this.transport.detail();
    if (!known || known.name !== job.name) {
      this.detail.setJob(summaryAsDetail(job));
    }
    this._setView('detail');
  }

  private async _cancel(job: IJobDetail): Promise<void> {
    try {
      await this.transport.cancelJob(job.cluster, job.name);
      this._showError(null);
    } catch (err) {
      this._showError(`Cannot cancel ${job.name}: ${errorMessage(err)}`);
    }
  }

  private async _resume(job: IJobDetail, checkpoint?: ICheckpoint): Promise<void> {
    try {
      await this.transport.resumeJob(job.cluster, job.name, checkpoint ? { checkpoint: checkpoint.name } : {});
      this._showError(null);
    } catch (err) {
      this._showError(`Cannot resume ${job.name}: ${errorMessage(err)}`);
    }
  }

  /** "Pre-fetch model": the kernel downloads it on every node; the notice line says how far it got. */
  private async _prefetch(job: IJobDetail): Promise<void> {
    const model = job.base_model;
    if (!model) {
      return;
    }
    this._setNotice(`Pre-fetching ${model} on every node of \u201c${job.cluster}\u201d\u2026`);
    try {
      const result = await this.transport.downloadModel(job.cluster, model);
      this._setNotice(downloadSummary(result));
    } catch (err) {
      this._setNotice(null);
      this._showError(`Could not pre-fetch ${model}: ${errorMessage(err)}`);
    }
  }

  private _setNotice(text: string | null): void {
    this._notice.textContent = text ?? '';
    this._notice.style.display = text ? '' : 'none';
  }

  private _onJobs(): void {
    this.table.setJobs(this.transport.jobs());
  }

  private _onDetail(): void {
    const value = this.transport.detail();
    if (value) {
      this.detail.setJob(value);
      this.table.selectedName = value.name;
    } else {
      this.detail.setJob(null);
    }
  }

  /** The server's downsampled curve: the same series as the lab's job tab and `%train` draw. */
  private _onCurve(): void {
    const curve = this.transport.curve();
    const series = curve ? seriesOf(curve) : { loss: [], validation: [], count: 0 };
    void this.detail.setCurve(series);
    void this.curve.setSeries(series.loss, series.validation);
  }

  private _onLogs(): void {
    const text = this.model.get('logs');
    const value = typeof text === 'string' ? text : '';
    this.detail.setLogs(value);
    this.logs.setText(value);
  }

  private _localError: string | null = null;
  private readonly _root = h('div', { class: `${CSS_PREFIX}-widget` });
  private readonly _status = h('div', { class: `${CSS_PREFIX}-errorBar`, role: 'alert' });
  private readonly _notice = h('div', { class: `${CSS_PREFIX}-notice`, role: 'status' });
  private readonly _panes: Record<WidgetView, HTMLElement>;
  private readonly _listeners: [string, () => void][];
  private readonly _timer: ReturnType<typeof setInterval>;
}

/** Render the widget into `el`; returns the cleanup function. */
export function renderWidget(model: IAnyModel, el: HTMLElement): () => void {
  const renderer = new WidgetRenderer(model, el);
  return () => renderer.dispose();
}

export default {
  render({ model, el }: { model: IAnyModel; el: HTMLElement }): () => void {
    return renderWidget(model, el);
  }
};
