/**
 * One job in a main-area tab (the way jupyter-scheduler opens its job pages): the status header with its actions,
 * the curve at a readable size, the live log, checkpoints, plan and utilisation. Its own poll follows the job
 * until it has ended; the log comes over the server's websocket tail where the transport has one (the whole log
 * once, then each new line), else from one fetch per refresh.
 */
import { Poll } from '@lumino/polling';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { trainingIcon } from './icon';
import { PanelActions } from './panelActions';
import {
  CSS_PREFIX,
  CurveFollower,
  IDataLineOpener,
  IFix,
  IJobDetail,
  ITransport,
  JobDetailView,
  SweepView,
  errorMessage,
  h,
  isActive
} from './shared';

/** Characters of log a tab keeps (the log view shows the last 200,000). */
const MAX_LOG_CHARS = 400_000;
/** How long log lines from the tail gather before the page shows them (at most 4 layouts a second). */
const LOG_FLUSH_MS = 250;

/** Options of {@link JobTab}. */
export interface IJobTabOptions {
  transport: ITransport;
  cluster: string;
  name: string;
  /** Seconds between refreshes while the job runs (default 3). */
  refreshInterval?: number;
  /** Asks the user to confirm a cancellation; no confirmation when omitted. */
  confirmCancel?: (job: IJobDetail) => Promise<boolean>;
  /** Open another job (a resume's new job) in its own tab. */
  openJob?: (cluster: string, name: string) => void;
  /** "Create from this job"; hidden when omitted. */
  onClone?: (job: IJobDetail) => void;
  /** "Export"; hidden when omitted. */
  onExport?: (job: IJobDetail) => void;
  /** "Pre-fetch model" for a Hub base model; hidden when omitted. */
  onPrefetch?: (job: IJobDetail) => void;
  /** A failure's fix ("Retry with QLoRA"): the create form with the fixed spec; no fix buttons when omitted. */
  onRetryWith?: (job: IJobDetail, fix: IFix) => void;
  /** "Open at line N" for a dataset error's line. */
  dataLines?: IDataLineOpener;
  /** "Save as template"; hidden when omitted. */
  onSaveTemplate?: (job: IJobDetail) => void;
  /** A sweep's "Compare curves": its trials' curves overlaid; hidden when omitted. */
  onCompareTrials?: (cluster: string, names: string[]) => void;
  /** A sweep's "Create from best": the create form with this spec; hidden when omitted. */
  onCreateFromBest?: (cluster: string, sweep: string, spec: Record<string, unknown>) => void;
}

export class JobTab extends Widget {
  constructor(options: IJobTabOptions) {
    super();
    this.cluster = options.cluster;
    this.name = options.name;
    this.transport = options.transport;
    this.id = JobTab.idOf(options.cluster, options.name);
    this.addClass(`${CSS_PREFIX}-JobTab`);
    this.title.label = options.name;
    this.title.caption = `Training job ${options.name} on ${options.cluster}`;
    this.title.icon = trainingIcon;
    this.title.closable = true;

    this._error = h('div', { class: `${CSS_PREFIX}-errorBar`, role: 'alert' });
    this._error.style.display = 'none';
    this._actions = new PanelActions({
      transport: this.transport,
      cluster: () => this.cluster,
      jobName: () => this.name,
      confirmCancel: options.confirmCancel,
      showActionError: message => this._showError(message),
      showJob: name => options.openJob?.(this.cluster, name),
      setDetail: job => this.detail.setJob(job),
      refresh: () => this.refresh()
    });
    this.detail = new JobDetailView({
      onCancel: job => this._actions.cancel(job),
      onResume: (job, checkpoint) => this._actions.resume(job, checkpoint),
      onChat: this.transport.chat
        ? (job, request, onText) => this.transport.chat!(job.cluster, job.name, request, onText)
        : undefined,
      onExportMerged: this.transport.exportCheckpoint
        ? (job, checkpoint, dtype) => this.transport.exportCheckpoint!(job.cluster, job.name, checkpoint.name, dtype)
        : undefined,
      onOpenTensorBoard: this.transport.openTensorBoard ? job => this._actions.openTensorBoard(job) : undefined,
      onClone: options.onClone,
      onPrefetch: options.onPrefetch,
      onRetryWith: options.onRetryWith,
      dataLines: options.dataLines,
      onExport: options.onExport,
      onSaveTemplate: options.onSaveTemplate,
      lossCurve: { height: 360 } // the main area's width: a curve one can read
    });
    const bestSpec = this.transport.getBestSpec?.bind(this.transport);
    const onBest = options.onCreateFromBest;
    this.sweep = new SweepView({
      onCompare: options.onCompareTrials,
      onOpenTrial: options.openJob,
      onCreateFromBest: bestSpec && onBest
        ? sweep => void bestSpec(sweep.cluster, sweep.name).then(
          b => onBest(sweep.cluster, sweep.name, b.spec as Record<string, unknown>),
          err => this._showError(`Cannot open the best trial's settings: ${errorMessage(err)}`, false))
        : undefined
    });
    this.node.append(this._error, this.sweep.node, this.detail.node);
    const getMetrics = this.transport.getMetrics?.bind(this.transport);
    this._curve = getMetrics
      ? new CurveFollower((maxPoints, afterStep) => getMetrics(this.cluster, this.name, { maxPoints, afterStep }))
      : null;
    this._poll = new Poll({
      auto: false,
      factory: () => this._refreshOnce(),
      frequency: { interval: Math.max(500, (options.refreshInterval ?? 3) * 1000), backoff: true, max: 60_000 },
      name: `jupyter-cleverthis:job:${options.name}`,
      // an ended job whose last events have been read changes no more
      standby: () => (this._ended ? true : 'when-hidden')
    });
  }

  /** The tab id of a job (one tab per job). */
  static idOf(cluster: string, name: string): string {
    // URI-encode, then "_" starts every escape ("_" itself is _5F), and the cluster's "-" is escaped too: the first
    // "-" after the prefix separates the two, so no two (cluster, name) pairs share an id; plain names read as is
    const enc = (s: string) => encodeURIComponent(s).replace(/_/g, '%5F').replace(/%/g, '_');
    return `jp-CleverThis-job-${enc(cluster).replace(/-/g, '_2D')}-${enc(name)}`;
  }

  readonly cluster: string;
  readonly name: string;
  readonly transport: ITransport;
  readonly detail: JobDetailView;
  /** A sweep's trials compared (hidden for a job that is not a sweep). */
  readonly sweep: SweepView;

  /** Cancel the job (after the confirmation), as its Cancel button does. */
  cancel(): Promise<void> {
    return this.detail.job ? this._actions.cancel(this.detail.job) : Promise.resolve();
  }

  /** Resume the job from its latest checkpoint, as its Resume button does. */
  resume(): Promise<void> {
    return this.detail.job ? this._actions.resume(this.detail.job) : Promise.resolve();
  }

  /** Refresh now (also after the job ended); resolves once done. */
  async refresh(): Promise<void> {
    this._ended = false;
    try {
      await this._refreshOnce();
    } catch {
      // shown in the error bar
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    this._closeTail();
    this.detail.dispose();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    void this._poll.start();
    this._openTail();
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this.detail.lossCurve?.resize();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.detail.lossCurve?.resize();
  }

  private async _refreshOnce(): Promise<void> {
    try {
      const job = await this.transport.getJob(this.cluster, this.name);
      this.detail.setJob(job);
      if (job.trials && this.transport.getSweep) {
        this.sweep.set(await this.transport.getSweep(this.cluster, this.name));
      }
      // the curve: the server's downsampled series and what follows it; else the raw events since the last
      let more: boolean;
      if (this._curve) {
        more = await this._curve.update();
        await this.detail.setCurve(this._curve.series);
      } else {
        const events = await this.transport.getEvents(this.cluster, this.name, this._eventsNext);
        this._eventsNext = events.next;
        await this.detail.addEvents(events.events);
        more = events.events.length > 0;
      }
      if (!this._tail) {
        this.detail.setLogs(await this.transport.getLogs(this.cluster, this.name).catch(() => ''));
      } else {
        this._flushLog();
      }
      // ended, and this round (read after it ended) brought nothing new: nothing more will come
      this._ended = !isActive(job.status) && !more;
      this._showError(null, true);
    } catch (err) {
      this._showError(errorMessage(err), true);
      throw err;
    }
  }

  /** Follow the log over the websocket tail, where the transport has one. */
  private _openTail(): void {
    if (this._tail || !this.transport.tailLogs) {
      return;
    }
    this._tailText = '';
    this._tail = this.transport.tailLogs(this.cluster, this.name, {
      onText: chunk => {
        this._tailText += chunk;
        if (this._tailText.length > MAX_LOG_CHARS * 2) {
          // the view shows the end; keep memory bounded
          this._tailText = this._tailText.slice(this._tailText.length - MAX_LOG_CHARS);
        }
        // a training job prints a line per step: the page takes them LOG_FLUSH_MS at a time, not each one
        this._logFlush ??= setTimeout(() => this._flushLog(), LOG_FLUSH_MS);
      },
      onClose: () => {
        if (!this._tailText) {
          this._tail = null; // no tail here: the refresh fetches the log instead
        }
      }
    });
  }

  /** Show what the tail brought since the last flush. */
  private _flushLog(): void {
    if (this._logFlush !== null) {
      clearTimeout(this._logFlush);
      this._logFlush = null;
    }
    if (this._tail && !this.isDisposed) {
      this.detail.setLogs(this._tailText);
    }
  }

  private _closeTail(): void {
    this._flushLog();
    this._tail?.close();
    this._tail = null;
  }

  private _showError(message: string | null, fromRefresh = false): void {
    if (fromRefresh && message === null && !this._errorFromRefresh) {
      return;
    }
    this._errorFromRefresh = fromRefresh;
    this._error.textContent = message ?? '';
    this._error.style.display = message ? '' : 'none';
  }

  private readonly _poll: Poll;
  private readonly _actions: PanelActions;
  private readonly _error: HTMLDivElement;
  private _errorFromRefresh = false;
  private _eventsNext = 0;
  private _ended = false;
  private _tail: { close(): void } | null = null;
  private _tailText = '';
  private _logFlush: ReturnType<typeof setTimeout> | null = null;
  private readonly _curve: CurveFollower | null;
}
