/**
 * The "Training" side panel: the cluster (selector, status, Start/Stop), Create Job and the job table (polled).
 * A job opens in a main-area tab (`jobTab.ts`) through `onOpenJob`.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { trainingIcon } from './icon';
import { ClusterAction, PanelHeader } from './panelHeader';
import { CSS_PREFIX, IClusterInfo, IJobSummary, ITransport, JobTable, errorMessage, h } from './shared';

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
  /** Opens a job (a row's click): in JupyterLab, a main-area tab. */
  onOpenJob?: (cluster: string, name: string) => void;
  /** Compares the jobs marked in the table (Ctrl/Cmd+click): in JupyterLab, a main-area tab. */
  onCompareJobs?: (cluster: string, names: string[]) => void;
  /** The signed-in user's name (the owner of the jobs they create); hides the "Mine" filter when omitted. */
  currentUser?: () => string | undefined;
  /** The URL of a cluster's dashboard through the server's proxy (the header's link once it runs). */
  dashboardUrl?: (cluster: string) => string;
  /** Asks the user to confirm stopping a cluster; no confirmation when omitted. */
  confirmStop?: (cluster: string) => Promise<boolean>;
}

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
    this._onOpenJob = options.onOpenJob;
    this._onOpenDashboard = options.onOpenDashboard;

    this._currentUser = options.currentUser;
    this._header = new PanelHeader({
      onClusterPicked: name => {
        this._userPicked = true;
        this.cluster = name;
      },
      onFilterChanged: () => this.table.setJobs(this._filtered(this._jobs)),
      onRefresh: () => void this.refresh(),
      onCreateJob: options.onCreateJob,
      onOpenDashboard: options.onOpenDashboard
        ? () => {
            if (this._cluster) {
              this._onOpenDashboard?.(this._cluster);
            }
          }
        : undefined,
      showMine: !!options.currentUser,
      onClusterAction: this.transport.clusterAction ? action => void this.clusterAction(action) : undefined,
      dashboardUrl: options.dashboardUrl,
      listNodes: this.transport.listNodes ? cluster => this.transport.listNodes!(cluster) : undefined,
      onCompare: options.onCompareJobs ? () => this._cluster && options.onCompareJobs!(this._cluster, this.table.marked) : undefined,
      onClearMarks: () => this.table.clearMarks()
    });
    this._confirmStop = options.confirmStop;

    this.table = new JobTable({
      onSelect: job => this.showJob(job.name),
      onMarked: options.onCompareJobs ? names => this._header.setMarked(names.length) : undefined
    });
    this._notRunning = h('div', { class: `${CSS_PREFIX}-clusterEmpty`, role: 'status' });
    this._notRunning.style.display = 'none';
    this._body = h('div', { class: `${CSS_PREFIX}-body` }, this._notRunning, this.table.node);
    this.node.append(this._header.node, this._body);

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
    this._header.clusterSelect.value = name ?? '';
    this._updateClusterInfo();
    this.table.setJobs([]);
    this.table.clearMarks(); // marks name jobs of the cluster they were made on
    void this.refresh();
    this._clusterChanged.emit(name);
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

  /**
   * Start (`up`) or stop (`down`) the selected cluster (one jupyter-cleverthis manages), showing the progress
   * in the header; resolves with whether it is then running.
   */
  async clusterAction(action: ClusterAction, cluster: string | null = this._cluster): Promise<boolean> {
    const transport = this.transport;
    if (!cluster || !transport.clusterAction || this._busy) {
      return this._statusOf(cluster) === 'running';
    }
    if (action === 'down' && this._confirmStop && !(await this._confirmStop(cluster))) {
      return true;
    }
    this._busy = action;
    this._updateClusterInfo();
    let running = false;
    try {
      const state = await transport.clusterAction(cluster, action);
      running = state.status === 'running';
      this._showError(null);
    } catch (err) {
      this._showError(`Cannot ${action === 'up' ? 'start' : 'stop'} the cluster \u201c${cluster}\u201d: ${errorMessage(err)}`);
    } finally {
      this._busy = null;
      this._updateClusterInfo();
    }
    await this.refresh();
    return running;
  }

  /** Open a job of the selected cluster (a row's click): `onOpenJob`, and the row is marked. */
  showJob(name: string): void {
    this.table.selectedName = name;
    if (this._cluster) {
      this._onOpenJob?.(this._cluster, name);
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    this.table.dispose();
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
      if (this._statusOf(cluster) !== 'running') {
        // Nothing to list on a cluster that is not up: the body says so (with Start where it can), no error.
        this._jobs = [];
        this.table.setJobs([]);
        this._showError(null, true);
        return;
      }
      this._header.refreshNodes();
      const jobs = await this.transport.listJobs(cluster);
      if (generation === this._generation) {
        this._jobs = jobs;
        this.table.setJobs(this._filtered(jobs));
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
    this._header.setClusters(clusters);
    let selected = this._cluster;
    if (!selected || !names.includes(selected)) {
      selected = names.includes(this._defaultCluster) ? this._defaultCluster : (names[0] ?? null);
    }
    if (selected !== this._cluster) {
      this.cluster = selected;
    }
    this._header.clusterSelect.value = selected ?? '';
    this._updateClusterInfo();
  }

  private _updateClusterInfo(): void {
    this._header.showCluster(this._cluster, this._clusters.find(c => c.name === this._cluster), this._busy);
    if (this._cluster) {
      this._showNotRunning(this._cluster, this._statusOf(this._cluster));
    }
  }

  private _statusOf(cluster: string | null): string | undefined {
    return this._clusters.find(c => c.name === cluster)?.status;
  }

  /** The body's words for a cluster that is not running (hidden while it runs). */
  private _showNotRunning(cluster: string, status: string | undefined): void {
    const running = status === 'running';
    this._notRunning.style.display = running ? 'none' : '';
    this.node.dataset.clusterStatus = status ?? 'unknown';
    const info = this._clusters.find(c => c.name === cluster);
    // rebuilt only when what it says changes (not on every refresh: a Start button must not vanish under a click)
    const key = `${cluster}\u0000${status}\u0000${this._busy}\u0000${info?.address}\u0000${info?.managed}`;
    if (running || key === this._notRunningKey) {
      return;
    }
    this._notRunningKey = key;
    const name = `\u201c${cluster}\u201d`;
    const says =
      status === 'stopped'
        ? `The cluster ${name} is stopped.`
        : status === 'starting'
          ? `The cluster ${name} is starting\u2026`
          : `The cluster ${name} does not answer${info?.address ? ` at ${info.address}` : ''}.`;
    const canStart = !!info?.managed && !!this.transport.clusterAction && status !== 'starting';
    const next = canStart
      ? 'It runs on this machine: start it to create and watch jobs here.'
      : status === 'starting'
        ? 'Its jobs show here once it runs.'
        : 'Start it where it runs, or pick another cluster.';
    const parts: HTMLElement[] = [h('p', { class: `${CSS_PREFIX}-clusterEmpty-title` }, says), h('p', null, next)];
    if (canStart) {
      const start = h(
        'button',
        { type: 'button', class: `${CSS_PREFIX}-button jp-mod-accept ${CSS_PREFIX}-startCluster` },
        `Start ${cluster}`
      );
      start.disabled = !!this._busy;
      start.addEventListener('click', () => void this.clusterAction('up', cluster));
      parts.push(start);
    }
    this._notRunning.replaceChildren(...parts);
  }

  private _filtered(jobs: IJobSummary[]): IJobSummary[] {
    const status = this._header.statusFilter.value;
    const me = this._header.mine.checked ? this._currentUser?.() : undefined;
    return jobs.filter(j => (!status || j.status === status) && (!me || j.owner === me));
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
    this._header.showError(message);
  }

  private _cluster: string | null = null;
  private _busy: ClusterAction | null = null;
  private readonly _notRunning: HTMLDivElement;
  private _notRunningKey = '';
  private readonly _confirmStop?: (cluster: string) => Promise<boolean>;
  private _jobs: IJobSummary[] = [];
  private _errorFromRefresh = false;
  private readonly _currentUser?: () => string | undefined;
  private _clusters: IClusterInfo[] = [];
  private _defaultCluster: string;
  private _userPicked = false;
  private _generation = 0;
  private _inflight: Promise<void> | null = null;
  private _queued: Promise<void> | null = null;
  private _clusterChanged = new Signal<this, string | null>(this);
  private readonly _poll: Poll;
  private readonly _body: HTMLDivElement;
  private readonly _header: PanelHeader;
  private readonly _onOpenDashboard?: (cluster: string) => void;
  private readonly _onOpenJob?: (cluster: string, name: string) => void;
}

namespace Private {
  export function toMs(seconds: number): number {
    const s = Number.isFinite(seconds) && seconds > 0 ? seconds : DEFAULT_REFRESH_INTERVAL;
    return Math.max(500, Math.round(s * 1000));
  }
}
