/**
 * The sidebar's "Nodes" section: the selected cluster's alive nodes with their free and total CPUs, GPUs and
 * memory, and which jobs' workers hold them (`GET /clusters/{cluster}/nodes`). Closed by default; while open it
 * reloads on each panel refresh. The same figures a queued job's "why queued" names, node by node.
 */
import { CSS_PREFIX, INodeResources, errorMessage, h } from './shared';

const CLASS = `${CSS_PREFIX}-nodes`;

/** Options of {@link NodesView}. */
export interface INodesViewOptions {
  /** Fetch the nodes of a cluster. */
  load: (cluster: string) => Promise<INodeResources[]>;
}

export class NodesView {
  constructor(options: INodesViewOptions) {
    this._load = options.load;
    this._summary = h('summary', { class: `${CLASS}-summary`, title: 'The cluster\u2019s nodes and what each job holds' }, 'Nodes');
    this._table = h('table', { class: `${CLASS}-table` });
    this._status = h('div', { class: `${CLASS}-status`, role: 'status' });
    this.node = h('details', { class: CLASS }, this._summary, this._status, this._table);
    this.node.addEventListener('toggle', () => void this.refresh());
    this.node.style.display = 'none';
  }

  /** The root element (a `<details>`). */
  readonly node: HTMLDetailsElement;

  /** Show the section for a running cluster (null: hide it). */
  setCluster(cluster: string | null): void {
    const changed = cluster !== this._cluster;
    this._cluster = cluster;
    this.node.style.display = cluster ? '' : 'none';
    if (changed) {
      this._table.replaceChildren();
      this._summary.textContent = 'Nodes';
      void this.refresh();
    }
  }

  /** Reload while open (the panel calls this on each refresh). */
  async refresh(): Promise<void> {
    const cluster = this._cluster;
    if (!cluster || !this.node.open || this._loading) {
      return;
    }
    this._loading = true;
    try {
      const nodes = await this._load(cluster);
      if (cluster === this._cluster) {
        this._status.textContent = nodes.length ? '' : 'The cluster lists no alive node.';
        this._summary.textContent = `Nodes (${nodes.length})`;
        this._render(nodes);
      }
    } catch (err) {
      this._status.textContent = `Could not list the nodes: ${errorMessage(err)}`;
    } finally {
      this._loading = false;
    }
  }

  private _render(nodes: INodeResources[]): void {
    const head = h('tr', null, ...['Node', 'CPU free', 'GPU free', 'Memory free', 'Held by'].map(t => h('th', null, t)));
    const cell = (text: string, cls?: string) => h('td', { title: text, class: cls }, text);
    const rows = nodes.map(n =>
      h(
        'tr',
        { class: `${CLASS}-row`, 'data-node': n.node_id },
        cell(`${n.name ?? n.node_id.slice(0, 8)}${n.head ? ' (head)' : ''}`),
        cell(Private.usage(n.CPU)),
        cell(Private.usage(n.GPU)),
        cell(Private.usage(n.memory, true)),
        cell(Private.heldBy(n), `${CLASS}-heldBy`)
      )
    );
    this._table.replaceChildren(h('thead', null, head), h('tbody', null, ...rows));
  }

  private readonly _load: (cluster: string) => Promise<INodeResources[]>;
  private readonly _summary: HTMLElement;
  private readonly _table: HTMLTableElement;
  private readonly _status: HTMLDivElement;
  private _cluster: string | null = null;
  private _loading = false;
}

namespace Private {
  export function usage(r: { free: number; total: number } | null | undefined, bytes = false): string {
    if (!r) {
      return '\u2014';
    }
    const f = (n: number) => (bytes ? `${(n / 1024 ** 3).toFixed(1)} GB` : Number.isInteger(n) ? String(n) : n.toFixed(2));
    return `${f(r.free)} of ${f(r.total)}`;
  }

  export function heldBy(n: INodeResources): string {
    const uses = n.used_by ?? [];
    if (!uses.length) {
      return '\u2014';
    }
    return uses
      .map(u => {
        const amounts = [u.CPU ? `${u.CPU} CPU` : '', u.GPU ? `${u.GPU} GPU` : ''].filter(Boolean).join(', ');
        return `${u.job}${amounts ? ` (${amounts})` : ''}`;
      })
      .join('; ');
  }
}
