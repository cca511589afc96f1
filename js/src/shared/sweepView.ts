/**
 * A sweep's trials compared, in its job tab (`GET .../jobs/{name}/sweep`): a row per trial with its parameters,
 * status, final and best validation loss, last training loss and tokens/s, the best trial marked; "Compare curves"
 * overlays the trials' loss curves (the Compare tab) and "Create from best" opens the form with the best trial's
 * spec (`GET .../sweep/best`). Each trial is a job: a click on its row opens it.
 */
import { CSS_PREFIX, formatNumber, h } from './format';
import { ISweepDetail } from './model';

const CLASS = `${CSS_PREFIX}-SweepView`;

/** Options of {@link SweepView}. */
export interface ISweepViewOptions {
  /** Overlay the trials' curves; the button is hidden when omitted. */
  onCompare?: (cluster: string, names: string[]) => void;
  /** The form with the best trial's spec; the button is hidden when omitted. */
  onCreateFromBest?: (sweep: ISweepDetail) => void;
  /** Open a trial (a click on its row). */
  onOpenTrial?: (cluster: string, name: string) => void;
}

export class SweepView {
  constructor(options: ISweepViewOptions = {}) {
    this._options = options;
    this._header = h('div', { class: `${CLASS}-header` });
    this._table = h('table', { class: `${CLASS}-table` });
    this._compare = h('button', { type: 'button', class: `${CSS_PREFIX}-button ${CLASS}-compare` }, 'Compare curves');
    this._compare.addEventListener('click', () => {
      const d = this._detail;
      if (d) {
        this._options.onCompare?.(d.cluster, d.trials.map(t => t.name));
      }
    });
    this._best = h('button', { type: 'button', class: `${CSS_PREFIX}-button ${CLASS}-best` }, 'Create from best');
    this._best.addEventListener('click', () => this._detail && this._options.onCreateFromBest?.(this._detail));
    this._compare.style.display = options.onCompare ? '' : 'none';
    this._best.style.display = options.onCreateFromBest ? '' : 'none';
    this.node = h(
      'section',
      { class: CLASS, 'data-section': 'sweep' },
      h('h3', null, 'Sweep'),
      this._header,
      this._table,
      h('div', { class: `${CSS_PREFIX}-toolbar` }, this._compare, this._best)
    );
    this.node.style.display = 'none';
  }

  readonly node: HTMLElement;

  /** Show `detail` (null hides the section: the job is not a sweep). */
  set(detail: ISweepDetail | null): void {
    this._detail = detail;
    this.node.style.display = detail ? '' : 'none';
    if (!detail) {
      return;
    }
    const metric = detail.metric_label ?? 'the metric';
    this._header.textContent =
      `${detail.trials.length} trials, ${detail.concurrent} at once` +
      (detail.scheduler !== 'none' ? `, ${detail.scheduler.toUpperCase()} early stopping` : '') +
      ` \u00b7 best by ${metric}: ${detail.best ?? 'none yet'}`;
    const head = h(
      'tr',
      null,
      ...['trial', ...detail.parameters, 'status', 'final val loss', 'best val loss', 'last train loss', 'tokens/s'].map(
        t => h('th', null, t)
      )
    );
    const num = (x: number | null | undefined) => (x == null ? '\u2014' : formatNumber(x));
    const rows = detail.trials.map(t => {
      const best = t.name === detail.best;
      const row = h(
        'tr',
        { 'data-trial': t.name, class: best ? 'jp-mod-best' : null, title: `Open ${t.name}` },
        h('td', null, (best ? '\u2605 ' : '') + t.name),
        ...detail.parameters.map(p => h('td', null, t.values[p] != null ? String(t.values[p]) : '\u2014')),
        h('td', null, t.status),
        h('td', null, num(t.final_eval_loss)),
        h('td', null, num(t.best_eval_loss)),
        h('td', null, num(t.final_loss)),
        h('td', null, t.tokens_per_s != null ? String(Math.round(t.tokens_per_s)) : '\u2014')
      );
      row.addEventListener('click', () => this._options.onOpenTrial?.(detail.cluster, t.name));
      return row;
    });
    this._table.replaceChildren(head, ...rows);
    this._best.disabled = !detail.best;
  }

  private readonly _options: ISweepViewOptions;
  private readonly _header: HTMLDivElement;
  private readonly _table: HTMLTableElement;
  private readonly _compare: HTMLButtonElement;
  private readonly _best: HTMLButtonElement;
  private _detail: ISweepDetail | null = null;
}
