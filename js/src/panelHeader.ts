/**
 * The Training panel's header: title, cluster selector with the cluster's
 * status and resources, the toolbar (Create Job, status filter, "Mine",
 * refresh, dashboard) and the error bar.  DOM only; `panel.ts` wires it.
 */
import { launchIcon, refreshIcon } from '@jupyterlab/ui-components';

import { NodesView } from './nodesView';
import { CSS_PREFIX, IClusterInfo, IClusterResources, INodeResources, JOB_STATUSES, h } from './shared';

/** The kinds of resource the header shows, in this order (a cluster without one shows none). */
const RESOURCE_KINDS = ['CPU', 'GPU', 'memory'] as const satisfies readonly (keyof IClusterResources)[];

/** Options of {@link PanelHeader}. */
export interface IPanelHeaderOptions {
  /** The user picked a cluster in the selector. */
  onClusterPicked: (name: string | null) => void;
  /** The status filter or "Mine" changed. */
  onFilterChanged: () => void;
  /** The refresh button. */
  onRefresh: () => void;
  /** The Create Job button. */
  onCreateJob?: () => void;
  /** The dashboard button; hidden when omitted. */
  onOpenDashboard?: () => void;
  /** Show the "Mine" filter. */
  showMine: boolean;
  /** Start (`up`) or stop (`down`) the selected managed cluster; no Start/Stop button when omitted. */
  onClusterAction?: (action: ClusterAction) => void;
  /** The URL of a cluster's dashboard through the server's proxy (the link shown once it runs). */
  dashboardUrl?: (cluster: string) => string;
  /** The nodes of a running cluster (the "Nodes" section); no section when omitted. */
  listNodes?: (cluster: string) => Promise<INodeResources[]>;
  /** "Compare" for the jobs marked in the table (Ctrl/Cmd+click), and "Clear"; no bar when omitted. */
  onCompare?: () => void;
  onClearMarks?: () => void;
}

/** What the Start / Stop button does. */
export type ClusterAction = 'up' | 'down';

export class PanelHeader {
  constructor(options: IPanelHeaderOptions) {
    this.clusterSelect = h('select', {
      class: `jp-mod-styled ${CSS_PREFIX}-clusterSelect`,
      'aria-label': 'Cluster',
      title: 'Ray cluster'
    });
    this.clusterSelect.addEventListener('change', () => options.onClusterPicked(this.clusterSelect.value || null));
    this._clusterStatus = h('span', { class: `${CSS_PREFIX}-clusterStatus` });
    this._resources = h('div', { class: `${CSS_PREFIX}-resources` });
    this._dashboardUrl = options.dashboardUrl;
    this._clusterButton = h('button', { type: 'button', class: `${CSS_PREFIX}-button ${CSS_PREFIX}-clusterAction` });
    this._clusterButton.style.display = 'none';
    this._clusterButton.addEventListener('click', () => {
      const action = this._clusterButton.dataset.action;
      if (action === 'up' || action === 'down') {
        options.onClusterAction?.(action);
      }
    });
    this._hasClusterAction = !!options.onClusterAction;
    this._progress = h(
      'div',
      { class: `${CSS_PREFIX}-clusterProgress`, role: 'status', 'aria-live': 'polite' },
      h('progress', { class: `${CSS_PREFIX}-clusterProgressBar`, 'aria-label': 'Cluster start-up' }),
      h('span', { class: `${CSS_PREFIX}-clusterProgressText` })
    );
    this._progress.style.display = 'none';
    this._dashboardLink = h(
      'a',
      { class: `${CSS_PREFIX}-dashboardLink`, target: '_blank', rel: 'noopener', title: 'The Ray dashboard (a new browser tab)' },
      'Ray dashboard'
    );
    this._dashboardLink.style.display = 'none';
    this._nodes = options.listNodes ? new NodesView({ load: options.listNodes }) : null;
    this._error = h('div', { class: `${CSS_PREFIX}-errorBar`, role: 'alert' });
    this._error.style.display = 'none';
    this._marks = Private.marksBar(options.onCompare, options.onClearMarks);

    this.statusFilter = h(
      'select',
      { class: `jp-mod-styled ${CSS_PREFIX}-statusFilter`, title: 'Show jobs with this status', 'aria-label': 'Status filter' },
      ...['', ...JOB_STATUSES].map(v => h('option', { value: v }, v || 'all statuses'))
    );
    this.statusFilter.addEventListener('change', options.onFilterChanged);
    this.mine = h('input', { type: 'checkbox', class: `${CSS_PREFIX}-mineFilter`, 'aria-label': 'Only my jobs' });
    this.mine.addEventListener('change', options.onFilterChanged);
    const mineLabel = h('label', { class: `${CSS_PREFIX}-mine`, title: 'Show only the jobs you own' }, this.mine, 'Mine');
    if (!options.showMine) {
      mineLabel.style.display = 'none';
    }
    const createButton = h(
      'button',
      { type: 'button', class: `${CSS_PREFIX}-button jp-mod-accept ${CSS_PREFIX}-createJob`, title: 'Create a training or fine-tuning job' },
      'Create Job'
    );
    createButton.addEventListener('click', () => options.onCreateJob?.());
    const refreshButton = Private.iconButton(refreshIcon, 'Refresh', options.onRefresh);
    refreshButton.classList.add(`${CSS_PREFIX}-refresh`);
    this._dashboardButton = Private.iconButton(launchIcon, 'Open the Ray dashboard', () => options.onOpenDashboard?.());
    this._dashboardButton.classList.add(`${CSS_PREFIX}-dashboard`);
    if (!options.onOpenDashboard) {
      this._dashboardButton.style.display = 'none';
    }

    this.node = h(
      'div',
      { class: `${CSS_PREFIX}-header` },
      h('h2', { class: `${CSS_PREFIX}-title` }, 'Training'),
      h(
        'div',
        { class: `${CSS_PREFIX}-clusterRow` },
        h('label', { class: `${CSS_PREFIX}-label` }, 'Cluster'),
        this._clusterStatus,
        this.clusterSelect,
        this._clusterButton
      ),
      this._progress,
      h('div', { class: `${CSS_PREFIX}-clusterInfo` }, this._resources, this._dashboardLink),
      ...(this._nodes ? [this._nodes.node] : []),
      h(
        'div',
        { class: `${CSS_PREFIX}-toolbar` },
        createButton,
        this.statusFilter,
        mineLabel,
        h('span', { class: `${CSS_PREFIX}-spacer` }),
        refreshButton,
        this._dashboardButton
      ),
      this._marks,
      this._error
    );
  }

  /** The root element. */
  readonly node: HTMLDivElement;
  /** The cluster selector. */
  readonly clusterSelect: HTMLSelectElement;
  /** The status filter ('' for all). */
  readonly statusFilter: HTMLSelectElement;
  /** The "Mine" checkbox. */
  readonly mine: HTMLInputElement;

  /** Show how many jobs are marked: with one, how to mark another; with two or more, "Compare". */
  setMarked(count: number): void {
    this._marks.style.display = count ? '' : 'none';
    this._marks.querySelector(`.${CSS_PREFIX}-marks-text`)!.textContent =
      count === 1 ? '1 job marked: Ctrl+click another to compare' : `${count} jobs marked`;
    (this._marks.querySelector(`.${CSS_PREFIX}-compare`) as HTMLButtonElement).disabled = count < 2;
  }

  /** List the clusters in the selector ("No clusters" when there are none). */
  setClusters(clusters: readonly IClusterInfo[]): void {
    const options = clusters.map(c => h('option', { value: c.name }, c.status ? `${c.name} (${c.status})` : c.name));
    if (!clusters.length) {
      options.push(h('option', { value: '', disabled: true }, 'No clusters'));
    }
    this.clusterSelect.replaceChildren(...options);
  }

  /**
   * Show the selected cluster's status, address and free resources (`info` absent: unknown), its Start or Stop
   * button when jupyter-cleverthis manages it, and the progress of a start or stop in flight (`busy`).
   */
  showCluster(selected: string | null, info: IClusterInfo | undefined, busy: ClusterAction | null = null): void {
    const status = info?.status ?? 'unknown';
    const running = status === 'running';
    const action: ClusterAction = running || status === 'starting' ? 'down' : 'up';
    this._clusterButton.style.display = this._hasClusterAction && info?.managed ? '' : 'none';
    this._clusterButton.dataset.action = action;
    this._clusterButton.textContent = action === 'up' ? 'Start' : 'Stop';
    this._clusterButton.title =
      action === 'up' ? `Start the cluster \u201c${selected}\u201d on this machine` : `Stop the cluster \u201c${selected}\u201d and its jobs`;
    this._clusterButton.classList.toggle('jp-mod-accept', action === 'up');
    this._clusterButton.disabled = !!busy;
    this._progress.style.display = busy ? '' : 'none';
    const text = this._progress.querySelector(`.${CSS_PREFIX}-clusterProgressText`)!;
    text.textContent = busy
      ? busy === 'up'
        ? `Starting \u201c${selected}\u201d: Ray\u2019s head, its dashboard and job agent (about a minute)\u2026`
        : `Stopping \u201c${selected}\u201d\u2026`
      : '';
    if (selected && running && this._dashboardUrl) {
      this._dashboardLink.href = this._dashboardUrl(selected);
      this._dashboardLink.style.display = '';
    } else {
      this._dashboardLink.style.display = 'none';
    }
    this._clusterStatus.className = `${CSS_PREFIX}-clusterStatus ${CSS_PREFIX}-clusterStatus-${String(status).replace(/[^a-z0-9_-]/gi, '')}`;
    this._clusterStatus.title = `Cluster status: ${status}`;
    this._clusterStatus.dataset.status = String(status);
    this._dashboardButton.disabled = !selected;
    this._nodes?.setCluster(running ? selected : null);
    const resources = info?.resources;
    const parts = RESOURCE_KINDS.flatMap(name => {
      const r = resources?.[name];
      return r ? [`${name} ${Private.compact(r.free)}/${Private.compact(r.total)} free`] : [];
    });
    this._resources.textContent = info ? [info.address, ...parts].filter(Boolean).join(' \u00b7 ') : '';
  }

  /** Reload the "Nodes" section while it is open. */
  refreshNodes(): void {
    void this._nodes?.refresh();
  }

  /** Show (or hide, with null) the error bar. */
  showError(message: string | null): void {
    this._error.textContent = message ?? '';
    this._error.style.display = message ? '' : 'none';
  }

  private readonly _clusterStatus: HTMLSpanElement;
  private readonly _clusterButton: HTMLButtonElement;
  private readonly _hasClusterAction: boolean;
  private readonly _progress: HTMLDivElement;
  private readonly _dashboardLink: HTMLAnchorElement;
  private readonly _dashboardUrl?: (cluster: string) => string;
  private readonly _resources: HTMLDivElement;
  private readonly _error: HTMLDivElement;
  private readonly _marks: HTMLDivElement;
  private readonly _nodes: NodesView | null;
  private readonly _dashboardButton: HTMLButtonElement;
}

namespace Private {
  /** "N jobs marked [Compare] [Clear]", hidden while none is marked (and always without `onCompare`). */
  export function marksBar(onCompare?: () => void, onClear?: () => void): HTMLDivElement {
    const compare = h(
      'button',
      { type: 'button', class: `${CSS_PREFIX}-button jp-mod-accept ${CSS_PREFIX}-compare`, title: 'Overlay the marked jobs\u2019 curves and show where their settings differ' },
      'Compare'
    );
    compare.addEventListener('click', () => onCompare?.());
    const clear = h('button', { type: 'button', class: `${CSS_PREFIX}-button ${CSS_PREFIX}-clearMarks`, title: 'Unmark every job' }, 'Clear');
    clear.addEventListener('click', () => onClear?.());
    const bar = h('div', { class: `${CSS_PREFIX}-marks`, role: 'status' }, h('span', { class: `${CSS_PREFIX}-marks-text` }), compare, clear);
    bar.style.display = 'none';
    return bar;
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
