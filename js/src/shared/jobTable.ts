/**
 * A virtualised, sortable table of jobs in plain DOM.
 *
 * Only the rows in (and slightly around) the viewport exist in the DOM; row
 * elements are pooled and updated in place, so polling a list of thousands of
 * jobs every few seconds stays cheap.
 */
import {
  CSS_PREFIX,
  formatElapsed,
  h,
  jobElapsed,
  updateStatusBadge
} from './format';
import {
  JOB_COLUMNS,
  JOB_COLUMN_HEADERS,
  JobColumn,
  SortDirection,
  jobCellText,
  jobRowKey,
  jobSortValue
} from './jobColumns';
import { IJobSummary } from './model';

export type { JobColumn, SortDirection } from './jobColumns';

/** Options of {@link JobTable}. */
export interface IJobTableOptions {
  /** Called when a row is clicked or activated with Enter/Space. */
  onSelect?: (job: IJobSummary) => void;
  /**
   * Called when the marked rows change: Ctrl/Cmd+click or Ctrl+Space marks a row (or unmarks it) without
   * opening it, as the file browser selects several files (the sidebar compares the marked jobs).
   */
  onMarked?: (names: string[]) => void;
  /** Row height in px; must match the CSS (default 28). */
  rowHeight?: number;
  /** Rows rendered above and below the viewport (default 10). */
  overscan?: number;
  /** Viewport height used while the table is not laid out (hidden, jsdom); default 480. */
  fallbackHeight?: number;
  /** Columns, in order (default: all). */
  columns?: JobColumn[];
  /** Current time in unix seconds (tests); default `Date.now() / 1000`. */
  now?: () => number;
  /** Text shown when there are no jobs. */
  emptyText?: string;
}

const TABLE_CLASS = `${CSS_PREFIX}-JobTable`;
const ROW_CLASS = `${CSS_PREFIX}-JobTable-row`;
const CELL_CLASS = `${CSS_PREFIX}-JobTable-cell`;
const SELECTED_CLASS = 'jp-mod-selected';
const MARKED_CLASS = 'jp-mod-marked';

export class JobTable {
  constructor(options: IJobTableOptions = {}) {
    this._onSelect = options.onSelect;
    this._onMarked = options.onMarked;
    this.rowHeight = options.rowHeight ?? 28;
    this._overscan = options.overscan ?? 10;
    this._fallbackHeight = options.fallbackHeight ?? 480;
    this.columns = options.columns ?? [...JOB_COLUMNS];
    this._now = options.now ?? (() => Date.now() / 1000);

    this._header = h('div', { class: `${TABLE_CLASS}-header`, role: 'row' });
    for (const column of this.columns) {
      const cell = h(
        'div',
        {
          class: `${CELL_CLASS} ${TABLE_CLASS}-headerCell ${CELL_CLASS}-${column}`,
          role: 'columnheader',
          tabindex: 0,
          'data-column': column,
          title: `Sort by ${JOB_COLUMN_HEADERS[column].toLowerCase()}`
        },
        JOB_COLUMN_HEADERS[column]
      );
      this._header.appendChild(cell);
    }
    this._spacer = h('div', { class: `${TABLE_CLASS}-spacer` });
    this._viewport = h(
      'div',
      { class: `${TABLE_CLASS}-viewport`, role: 'rowgroup' },
      this._spacer
    );
    this._empty = h(
      'div',
      { class: `${TABLE_CLASS}-empty` },
      options.emptyText ?? 'No jobs on this cluster yet.'
    );
    this.node = h(
      'div',
      { class: TABLE_CLASS, role: 'grid', 'aria-rowcount': 0 },
      this._header,
      this._viewport,
      this._empty
    );
    this.node.style.setProperty('--jp-CleverThis-row-height', `${this.rowHeight}px`);

    this._viewport.addEventListener('scroll', this._onScroll);
    this._viewport.addEventListener('click', this._onClick);
    this._viewport.addEventListener('keydown', this._onKeyDown);
    this._header.addEventListener('click', this._onHeaderClick);
    this._header.addEventListener('keydown', this._onHeaderKey);
    if (typeof ResizeObserver !== 'undefined') {
      this._resizeObserver = new ResizeObserver(() => this.render());
      this._resizeObserver.observe(this._viewport);
    }
    this._updateHeader();
    this.render();
  }

  /** The root element; insert it anywhere. */
  readonly node: HTMLDivElement;
  /** Row height in px. */
  readonly rowHeight: number;
  /** Columns shown, in order. */
  readonly columns: readonly JobColumn[];

  /** The jobs, in display (sorted) order. */
  get jobs(): readonly IJobSummary[] {
    return this._sorted;
  }

  /** Current sort column and direction. */
  get sort(): { column: JobColumn; direction: SortDirection } {
    return { column: this._sortColumn, direction: this._sortDirection };
  }

  /** Name of the highlighted job, if any. */
  get selectedName(): string | null {
    return this._selected;
  }
  set selectedName(name: string | null) {
    this._selected = name;
    this.render();
  }

  /** The marked jobs' names, in the order they were marked. */
  get marked(): string[] {
    return [...this._marked];
  }

  /** Unmark every row. */
  clearMarks(): void {
    this._marked.clear();
    this.render();
    this._onMarked?.([]);
  }

  /** Replace the jobs shown. */
  setJobs(jobs: readonly IJobSummary[]): void {
    this._jobs = [...jobs];
    this._resort();
    this.render();
  }

  /** Sort by a column; toggles direction when called again with the same column. */
  sortBy(column: JobColumn, direction?: SortDirection): void {
    if (direction) {
      this._sortDirection = direction;
    } else if (column === this._sortColumn) {
      this._sortDirection = this._sortDirection === 'asc' ? 'desc' : 'asc';
    } else {
      this._sortDirection = column === 'created_at' || column === 'elapsed' ? 'desc' : 'asc';
    }
    this._sortColumn = column;
    this._updateHeader();
    this._resort();
    this.render();
  }

  /** The rendered row elements (visible window only), in index order. */
  renderedRows(): HTMLElement[] {
    return this._pool
      .filter(row => row.parentNode === this._spacer && row.style.display !== 'none')
      .sort((a, b) => Number(a.dataset.index) - Number(b.dataset.index));
  }

  /** Render the rows of the current scroll window (also refreshes elapsed times). */
  render(): void {
    if (this._disposed) {
      return;
    }
    const count = this._sorted.length;
    this.node.setAttribute('aria-rowcount', String(count));
    this._empty.style.display = count ? 'none' : '';
    this._spacer.style.height = `${count * this.rowHeight}px`;

    const height = this._viewport.clientHeight || this._fallbackHeight;
    const top = this._viewport.scrollTop;
    const first = Math.max(0, Math.floor(top / this.rowHeight) - this._overscan);
    const last = Math.min(count, Math.ceil((top + height) / this.rowHeight) + this._overscan);
    const needed = Math.max(0, last - first);

    while (this._pool.length < needed) {
      const row = this._createRow();
      this._pool.push(row);
      this._spacer.appendChild(row);
    }
    const now = this._now();
    for (let i = 0; i < this._pool.length; i++) {
      const row = this._pool[i];
      if (i < needed) {
        const index = first + i;
        row.style.display = '';
        this._fillRow(row, index, this._sorted[index], now);
      } else if (row.style.display !== 'none') {
        row.style.display = 'none';
        row.dataset.index = '-1';
        row.dataset.key = '';
      }
    }
  }

  /** Scroll so the given row index is visible. */
  scrollToIndex(index: number): void {
    this._viewport.scrollTop = Math.max(0, index * this.rowHeight);
    this.render();
  }

  /** Remove listeners; the node can then be discarded. */
  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._viewport.removeEventListener('scroll', this._onScroll);
    this._viewport.removeEventListener('click', this._onClick);
    this._viewport.removeEventListener('keydown', this._onKeyDown);
    this._header.removeEventListener('click', this._onHeaderClick);
    this._header.removeEventListener('keydown', this._onHeaderKey);
    this._resizeObserver?.disconnect();
    this.node.remove();
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  private _createRow(): HTMLDivElement {
    const row = h('div', { class: ROW_CLASS, role: 'row', tabindex: 0 });
    for (const column of this.columns) {
      const cell = h('div', { class: `${CELL_CLASS} ${CELL_CLASS}-${column}`, role: 'gridcell' });
      if (column === 'status') {
        cell.appendChild(h('span'));
      }
      row.appendChild(cell);
    }
    return row;
  }

  private _fillRow(row: HTMLElement, index: number, job: IJobSummary, now: number): void {
    row.style.transform = `translateY(${index * this.rowHeight}px)`;
    row.dataset.index = String(index);
    row.setAttribute('aria-rowindex', String(index + 1));
    row.classList.toggle(SELECTED_CLASS, job.name === this._selected);
    row.classList.toggle(MARKED_CLASS, this._marked.has(job.name));
    row.setAttribute('aria-selected', String(this._marked.has(job.name)));
    const elapsed = formatElapsed(jobElapsed(job, now));
    // Skip DOM writes when nothing shown in the row changed.
    const key = jobRowKey(job, elapsed);
    if (row.dataset.key === key) {
      return;
    }
    row.dataset.key = key;
    row.dataset.name = job.name;
    row.title = job.message ? `${job.name}: ${job.message}` : job.name;
    const cells = row.children;
    this.columns.forEach((column, i) => {
      const cell = cells[i] as HTMLElement;
      switch (column) {
        case 'status':
          updateStatusBadge(cell.firstElementChild as HTMLElement, job.status);
          break;
        case 'elapsed':
          cell.textContent = elapsed;
          break;
        default:
          cell.textContent = jobCellText(job, column);
      }
    });
  }

  private _resort(): void {
    const column = this._sortColumn;
    const sign = this._sortDirection === 'asc' ? 1 : -1;
    const now = this._now();
    this._sorted = [...this._jobs].sort((a, b) => {
      const va = jobSortValue(a, column, now);
      const vb = jobSortValue(b, column, now);
      let cmp: number;
      if (typeof va === 'number' && typeof vb === 'number') {
        cmp = va - vb;
      } else {
        cmp = String(va).localeCompare(String(vb));
      }
      return cmp * sign || a.name.localeCompare(b.name);
    });
  }

  private _updateHeader(): void {
    for (const cell of Array.from(this._header.children) as HTMLElement[]) {
      const column = cell.dataset.column;
      const active = column === this._sortColumn;
      cell.setAttribute(
        'aria-sort',
        active ? (this._sortDirection === 'asc' ? 'ascending' : 'descending') : 'none'
      );
      cell.classList.toggle('jp-mod-sorted', active);
    }
  }

  private _rowJob(target: EventTarget | null): IJobSummary | null {
    const row = (target as HTMLElement | null)?.closest?.(`.${ROW_CLASS}`) as HTMLElement | null;
    if (!row) {
      return null;
    }
    const index = Number(row.dataset.index);
    return Number.isInteger(index) && index >= 0 ? (this._sorted[index] ?? null) : null;
  }

  private _onScroll = (): void => {
    this.render();
  };

  private _toggleMark(job: IJobSummary): void {
    if (!this._marked.delete(job.name)) {
      this._marked.add(job.name);
    }
    this.render();
    this._onMarked?.(this.marked);
  }

  private _onClick = (event: MouseEvent): void => {
    const job = this._rowJob(event.target);
    if (job && this._onMarked && (event.ctrlKey || event.metaKey)) {
      this._toggleMark(job);
    } else if (job) {
      this._selected = job.name;
      this.render();
      this._onSelect?.(job);
    }
  };

  private _onKeyDown = (event: KeyboardEvent): void => {
    if (event.key !== 'Enter' && event.key !== ' ') {
      return;
    }
    const job = this._rowJob(event.target);
    if (job && this._onMarked && event.key === ' ' && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      this._toggleMark(job);
    } else if (job) {
      event.preventDefault();
      this._selected = job.name;
      this.render();
      this._onSelect?.(job);
    }
  };

  private _onHeaderClick = (event: MouseEvent): void => {
    const cell = (event.target as HTMLElement).closest('[data-column]') as HTMLElement | null;
    if (cell?.dataset.column) {
      this.sortBy(cell.dataset.column as JobColumn);
    }
  };

  private _onHeaderKey = (event: KeyboardEvent): void => {
    if (event.key === 'Enter' || event.key === ' ') {
      event.preventDefault();
      this._onHeaderClick(event as unknown as MouseEvent);
    }
  };

  private _jobs: IJobSummary[] = [];
  private _sorted: IJobSummary[] = [];
  private _pool: HTMLDivElement[] = [];
  private _selected: string | null = null;
  private readonly _marked = new Set<string>();
  private _sortColumn: JobColumn = 'created_at';
  private _sortDirection: SortDirection = 'desc';
  private _disposed = false;
  private _resizeObserver: ResizeObserver | null = null;
  private readonly _header: HTMLDivElement;
  private readonly _viewport: HTMLDivElement;
  private readonly _spacer: HTMLDivElement;
  private readonly _empty: HTMLDivElement;
  private readonly _onSelect?: (job: IJobSummary) => void;
  private readonly _onMarked?: (names: string[]) => void;
  private readonly _overscan: number;
  private readonly _fallbackHeight: number;
  private readonly _now: () => number;
}
