/**
 * The "Training" side panel: cluster selector, Create Job button, the job
 * table (polled) and the job detail view.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';
import { launchIcon, refreshIcon } from '@jupyterlab/ui-components';

import { trainingIcon } from './icon';
import {
  CSS_PREFIX,
  IClusterInfo,
  ICheckpoint,
  IJobDetail,
  IJobSummary,
  ITransport,
  JobDetailView,
  JobTable,
  errorMessage,
  summaryAsDetail,
  h
} from './shared';

/** Default poll interval in seconds (the `refreshInterval` setting's default). */
export const DEFAULT_REFRESH_INTERVAL = 3;

/** Longest interval the poll backs off to after errors, in ms. */
const MAX_BACKOFF_MS = 60_000;

/** Options of {@link TrainingPanel}. */
export interface ITrainingPanelOptions {
  transport: ITransport;
  /** Seconds between refreshes (default {@link DEFAULT_REFRESH_INTERVAL}). */
  refreshInterval?: number;
  /** Cluster selected initially when the server lists it. */
  defaultCluster?: string;
  /** Called by the Create Job button. */
  onCreateJob?: () => void;
  /** Called by the dashboard button with the selected cluster. */
  onOpenDashboard?: (cluster: string) => void;
  /** Asks the user to confirm a cancellation; no confirmation when omitted. */
  confirmCancel?: (job: IJobDetail) => Promise<boolean>;
  /** The signed-in user's name (the owner of the jobs they create); hides the "Mine" filter when omitted. */
  currentUser?: () => string | undefined;
}

/** What the panel body shows. */
export type PanelView = 'list' | 'detail';

export class TrainingPanel extends Widget {
  constructor(options: ITrainingPanelOptions) {
    super();
    this.id = 'jp-CleverThis-training';
    this.addClass(`${CSS_PREFIX}-TrainingPanel`);
    this.title.icon = trainingIcon;
    this.title.caption = 'Training';
    this.title.label = '';
    this.transport = options.transport;
    this._defaultCluster = options.defaultCluster ?? '';
    this._confirmCancel = options.confirmCancel;
    this._onOpenDashboard = options.onOpenDashboard;

    // Header: title, cluster selector, actions.
    this._clusterSelect = h('select', {
      class: `jp-mod-styled ${CSS_PREFIX}-clusterSelect`,
      'aria-label': 'Cluster',
      title: 'Ray cluster'
    });
    this._clusterSelect.addEventListener('change', () => {
      this._userPicked = true;
      this.cluster = this._clusterSelect.value || null;
    });
    this._clusterStatus = h('span', { class: `${CSS_PREFIX}-clusterStatus` });
    this._resources = h('div', { class: `${CSS_PREFIX}-resources` });
    this._error = h('div', { class: `${CSS_PREFIX}-errorBar`, role: 'alert' });
    this._error.style.display = 'none';

    this._statusFilter = h(
      'select',
      { class: `jp-mod-styled ${CSS_PREFIX}-statusFilter`, title: 'Show jobs with this status', 'aria-label': 'Status filter' },
      ...['', 'queued', 'initializing', 'running', 'succeeded', 'failed', 'cancelled'].map(v =>
        h('option', { value: v }, v || 'all statuses')
      )
    );
    this._statusFilter.addEventListener('change', () => this.table.setJobs(this._filtered(this._jobs)));
    this._currentUser = options.currentUser;
    this._mine = h('input', { type: 'checkbox', class: `${CSS_PREFIX}-mineFilter`, 'aria-label': 'Only my jobs' });
    this._mine.addEventListener('change', () => this.table.setJobs(this._filtered(this._jobs)));
    const mineLabel = h('label', { class: `${CSS_PREFIX}-mine`, title: 'Show only the jobs you own' }, this._mine, 'Mine');
    if (!options.currentUser) {
      mineLabel.style.display = 'none';
    }
    const createButton = h(
      'button',
      { type: 'button', class: `${CSS_PREFIX}-button jp-mod-accept ${CSS_PREFIX}-createJob`, title: 'Create a training or fine-tuning job' },
      'Create Job'
    );
    createButton.addEventListener('click', () => options.onCreateJob?.());
    const refreshButton = Private.iconButton(refreshIcon, 'Refresh', () => void this.refresh());
    refreshButton.classList.add(`${CSS_PREFIX}-refresh`);
    this._dashboardButton = Private.iconButton(launchIcon, 'Open the Ray dashboard', () => {
      if (this._cluster) {
        this._onOpenDashboard?.(this._cluster);
      }
    });
    this._dashboardButton.classList.add(`${CSS_PREFIX}-dashboard`);
    if (!options.onOpenDashboard) {
      this._dashboardButton.style.display = 'none';
    }

    const header = h(
      'div',
      { class: `${CSS_PREFIX}-header` },
      h('h2', { class: `${CSS_PREFIX}-title` }, 'Training'),
      h(
        'div',
        { class: `${CSS_PREFIX}-clusterRow` },
        h('label', { class: `${CSS_PREFIX}-label` }, 'Cluster'),
        this._clusterStatus,
        this._clusterSelect
      ),
      this._resources,
      h(
        'div',
        { class: `${CSS_PREFIX}-toolbar` },
        createButton,
        this._statusFilter,
        mineLabel,
        h('span', { class: `${CSS_PREFIX}-spacer` }),
        refreshButton,
        this._dashboardButton
      ),
      this._error
    );

    this.table = new JobTable({ onSelect: job => this.showJob(job.name) });
    this.detail = new JobDetailView({
      onBack: () => this.showList(),
      onCancel: job => this._cancel(job),
      onResume: (job, checkpoint) => this._resume(job, checkpoint),
      onOpenTensorBoard: this.transport.openTensorBoard ? job => this._openTensorBoard(job) : undefined
    });
    this._body = h('div', { class: `${CSS_PREFIX}-body` }, this.table.node, this.detail.node);
    this.node.append(header, this._body);
    this._applyView();

    this._poll = new Poll({
      auto: false,
      factory: () => this._tick(),
      frequency: {
        interval: Private.toMs(options.refreshInterval ?? DEFAULT_REFRESH_INTERVAL),
        backoff: true,
        max: MAX_BACKOFF_MS
      },
      name: 'jupyter-cleverthis:training',
      standby: () => (this.isVisible ? 'when-hidden' : true)
    });
  }

  /** The data source. */
  readonly transport: ITransport;
  /** The job list. */
  readonly table: JobTable;
  /** The job detail view. */
  readonly detail: JobDetailView;

  /** Emitted when the selected cluster changes. */
  get clusterChanged(): ISignal<this, string | null> {
    return this._clusterChanged;
  }

  /** Clusters from the last refresh. */
  get clusters(): readonly IClusterInfo[] {
    return this._clusters;
  }

  /** The selected cluster's name. */
  get cluster(): string | null {
    return this._cluster;
  }
  set cluster(name: string | null) {
    if (name === this._cluster) {
      return;
    }
    this._cluster = name;
    this._generation++;
    this._clusterSelect.value = name ?? '';
    this._updateClusterInfo();
    this.table.setJobs([]);
    this.showList();
    this._clusterChanged.emit(name);
  }

  /** What the body shows. */
  get view(): PanelView {
    return this._view;
  }

  /** Name of the job shown in the detail view. */
  get jobName(): string | null {
    return this._jobName;
  }

  /** Poll interval in seconds. */
  get refreshInterval(): number {
    return this._poll.frequency.interval / 1000;
  }
  set refreshInterval(seconds: number) {
    this._poll.frequency = { ...this._poll.frequency, interval: Private.toMs(seconds) };
  }

  /** Cluster preferred when the panel has none selected. */
  get defaultCluster(): string {
    return this._defaultCluster;
  }
  set defaultCluster(name: string) {
    this._defaultCluster = name;
    if (name && this._clusters.some(c => c.name === name) && !this._userPicked) {
      this.cluster = name;
    }
  }

  /** Refresh now; resolves once the refresh has run. */
  async refresh(): Promise<void> {
    if (this._poll.isDisposed) {
      return;
    }
    try {
      await this._tick();
    } catch {
      // Shown in the error bar.
    }
  }

  /** Show a job's details. */
  showJob(name: string): void {
    this._generation++;
    this._view = 'detail';
    this._jobName = name;
    this._eventsNext = 0;
    this.table.selectedName = name;
    const known = this.table.jobs.find(j => j.name === name);
    this.detail.setJob(known ? summaryAsDetail(known) : null);
    void this.detail.setEvents([]);
    this.detail.setLogs('');
    this._applyView();
    void this.refresh();
  }

  /** Back to the job list. */
  showList(): void {
    if (this._view === 'list') {
      return;
    }
    this._generation++;
    this._view = 'list';
    this._jobName = null;
    this._applyView();
    void this.refresh();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    this.table.dispose();
    this.detail.dispose();
    Signal.clearData(this);
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    void this._poll.start();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this._poll.refresh();
    this.table.render();
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this.table.render();
    this.detail.lossCurve?.resize();
  }

  /**
   * Run a refresh; while one is in flight, calls coalesce into a single
   * follow-up run (so `events?since=` is never asked twice for the same N).
   */
  private _tick(): Promise<void> {
    if (this._inflight) {
      if (!this._queued) {
        this._queued = this._inflight
          .catch(() => undefined)
          .then(() => {
            this._queued = null;
            return this._tick();
          });
      }
      return this._queued;
    }
    this._inflight = this._refreshOnce().finally(() => {
      this._inflight = null;
    });
    return this._inflight;
  }

  /** One refresh: clusters, then the job list or the shown job. */
  private async _refreshOnce(): Promise<void> {
    try {
      const clusters = await this.transport.listClusters();
      this._setClusters(clusters);
      // Taken after the cluster list may have changed the selection; a
      // selection or view change while the requests below run discards them.
      const generation = this._generation;
      const cluster = this._cluster;
      if (!cluster) {
        this.table.setJobs([]);
        this._showError(null, true);
        return;
      }
      if (this._view === 'list') {
        const jobs = await this.transport.listJobs(cluster);
        if (generation === this._generation) {
          this._jobs = jobs;
          this.table.setJobs(this._filtered(jobs));
        }
      } else if (this._jobName) {
        const name = this._jobName;
        const [job, events, logs] = await Promise.all([
          this.transport.getJob(cluster, name),
          this.transport.getEvents(cluster, name, this._eventsNext),
          this.transport.getLogs(cluster, name).catch(() => null)
        ]);
        if (generation === this._generation) {
          this.detail.setJob(job);
          this._eventsNext = events.next;
          void this.detail.addEvents(events.events);
          if (logs !== null) {
            this.detail.setLogs(logs);
          }
        }
      }
      this._showError(null, true);
    } catch (err) {
      this._showError(errorMessage(err), true);
      throw err; // lets the poll back off; refresh() swallows it
    }
  }

  private _setClusters(clusters: IClusterInfo[]): void {
    this._clusters = clusters;
    const names = clusters.map(c => c.name);
    const options = clusters.map(c =>
      h('option', { value: c.name }, c.status ? `${c.name} (${c.status})` : c.name)
    );
    if (!clusters.length) {
      options.push(h('option', { value: '', disabled: true }, 'No clusters'));
    }
    this._clusterSelect.replaceChildren(...options);
    let selected = this._cluster;
    if (!selected || !names.includes(selected)) {
      selected = names.includes(this._defaultCluster) ? this._defaultCluster : (names[0] ?? null);
    }
    if (selected !== this._cluster) {
      this.cluster = selected;
    }
    this._clusterSelect.value = selected ?? '';
    this._updateClusterInfo();
  }

  private _updateClusterInfo(): void {
    const info = this._clusters.find(c => c.name === this._cluster);
    const status = info?.status ?? 'unknown';
    this._clusterStatus.className = `${CSS_PREFIX}-clusterStatus ${CSS_PREFIX}-clusterStatus-${String(status).replace(/[^a-z0-9_-]/gi, '')}`;
    this._clusterStatus.title = `Cluster status: ${status}`;
    this._clusterStatus.dataset.status = String(status);
    this._dashboardButton.disabled = !this._cluster;
    const resources = info?.resources ?? {};
    const parts = Object.entries(resources)
      .filter(([, r]) => r && typeof r.total === 'number')
      .map(([name, r]) => `${name} ${Private.compact(r.free)}/${Private.compact(r.total)} free`);
    this._resources.textContent = info ? [info.address, ...parts].filter(Boolean).join(' \u00b7 ') : '';
  }

  private async _resume(job: IJobDetail, checkpoint?: ICheckpoint): Promise<void> {
    try {
      const created = await this.transport.resumeJob(
        job.cluster || this._cluster || '',
        job.name,
        checkpoint ? { checkpoint: checkpoint.name } : {}
      );
      this._showError(null);
      this.showJob(created.name);
    } catch (err) {
      this._showError(`Cannot resume ${job.name}: ${errorMessage(err)}`);
    }
  }

  /** A new tab at once (still the user's click, so no popup blocker), sent to the TensorBoard once it runs. */
  private async _openTensorBoard(job: IJobDetail): Promise<void> {
    const tab = window.open('', '_blank');
    try {
      const tb = await this.transport.openTensorBoard!(job.cluster || this._cluster || '', job.name);
      if (tab) {
        tab.opener = null;
        tab.location.href = tb.url;
      } else {
        window.open(tb.url, '_blank', 'noopener');
      }
      this._showError(null);
    } catch (err) {
      tab?.close();
      this._showError(`Cannot open TensorBoard for ${job.name}: ${errorMessage(err)}`);
    }
  }

  private _filtered(jobs: IJobSummary[]): IJobSummary[] {
    const status = this._statusFilter.value;
    const me = this._mine.checked ? this._currentUser?.() : undefined;
    return jobs.filter(j => (!status || j.status === status) && (!me || j.owner === me));
  }

  private async _cancel(job: IJobDetail): Promise<void> {
    if (this._confirmCancel && !(await this._confirmCancel(job))) {
      return;
    }
    try {
      const updated = await this.transport.cancelJob(job.cluster || this._cluster || '', job.name);
      if (this._jobName === updated.name) {
        this.detail.setJob(updated);
      }
      this._showError(null);
    } catch (err) {
      this._showError(`Cannot cancel ${job.name}: ${errorMessage(err)}`);
    }
    void this.refresh();
  }

  /**
   * Show (or clear) the error bar. A refresh clears only what a refresh showed: the error of a user's action
   * (a refused cancel, say) stays until their next action.
   */
  private _showError(message: string | null, fromRefresh = false): void {
    if (fromRefresh && message === null && !this._errorFromRefresh) {
      return;
    }
    this._errorFromRefresh = fromRefresh;
    this._error.textContent = message ?? '';
    this._error.style.display = message ? '' : 'none';
  }

  private _applyView(): void {
    const list = this._view === 'list';
    this.table.node.style.display = list ? '' : 'none';
    this.detail.node.style.display = list ? 'none' : '';
    this.node.dataset.view = this._view;
    if (list) {
      this.table.render();
    }
  }

  private _cluster: string | null = null;
  private _jobs: IJobSummary[] = [];
  private readonly _statusFilter: HTMLSelectElement;
  private readonly _mine: HTMLInputElement;
  private _errorFromRefresh = false;
  private readonly _currentUser?: () => string | undefined;
  private _clusters: IClusterInfo[] = [];
  private _defaultCluster: string;
  private _userPicked = false;
  private _view: PanelView = 'list';
  private _jobName: string | null = null;
  private _eventsNext = 0;
  private _generation = 0;
  private _inflight: Promise<void> | null = null;
  private _queued: Promise<void> | null = null;
  private _clusterChanged = new Signal<this, string | null>(this);
  private readonly _poll: Poll;
  private readonly _body: HTMLDivElement;
  private readonly _clusterSelect: HTMLSelectElement;
  private readonly _clusterStatus: HTMLSpanElement;
  private readonly _resources: HTMLDivElement;
  private readonly _error: HTMLDivElement;
  private readonly _dashboardButton: HTMLButtonElement;
  private readonly _confirmCancel?: (job: IJobDetail) => Promise<boolean>;
  private readonly _onOpenDashboard?: (cluster: string) => void;
}

namespace Private {
  export function toMs(seconds: number): number {
    const s = Number.isFinite(seconds) && seconds > 0 ? seconds : DEFAULT_REFRESH_INTERVAL;
    return Math.max(500, Math.round(s * 1000));
  }

  export function compact(n: number): string {
    if (!Number.isFinite(n)) {
      return '?';
    }
    if (Math.abs(n) >= 1024 ** 3) {
      return `${(n / 1024 ** 3).toFixed(1)}G`;
    }
    return Number.isInteger(n) ? String(n) : n.toFixed(1);
  }

  export function iconButton(
    icon: { element(props: { tag: 'span'; className?: string }): HTMLElement },
    title: string,
    onClick: () => void
  ): HTMLButtonElement {
    const button = h('button', {
      type: 'button',
      class: `${CSS_PREFIX}-iconButton jp-ToolbarButtonComponent`,
      title,
      'aria-label': title
    });
    button.appendChild(icon.element({ tag: 'span', className: `${CSS_PREFIX}-icon` }));
    button.addEventListener('click', onClick);
    return button;
  }

}
