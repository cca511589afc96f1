/**
 * The sidebar's compare: the jobs marked in the job list, their loss curves overlaid in one plot
 * and, beside them, where their specs differ (`GET .../compare`, the service's `spec_diff`, the same table as
 * the notebook's `LossCurve([a, b])`). A main-area tab; "Refresh" reads the curves again.
 */
import { Widget } from '@lumino/widgets';

import { trainingIcon } from './icon';
import { CSS_PREFIX, ITransport, LossCurve, errorMessage, h, seriesOf } from './shared';

/** The most points of each job's curve (the server downsamples). */
const MAX_POINTS = 1000;

/** How a spec value reads in the diff: unset as a dash, lists and objects as JSON. */
export function diffCell(value: unknown): string {
  if (value === null || value === undefined) {
    return '\u2014';
  }
  return typeof value === 'object' ? JSON.stringify(value) : String(value);
}

export class CompareTab extends Widget {
  constructor(
    readonly transport: ITransport,
    readonly cluster: string,
    readonly names: readonly string[]
  ) {
    super();
    this.addClass(`${CSS_PREFIX}-CompareTab`);
    this.id = `cleverthis-compare-${Math.random().toString(36).slice(2, 10)}`;
    this.title.label = `Compare ${names.join(', ')}`;
    this.title.caption = `The loss curves and settings of ${names.join(', ')} on \u201c${cluster}\u201d`;
    this.title.icon = trainingIcon;
    this.title.closable = true;
    const refresh = h('button', { type: 'button', class: `${CSS_PREFIX}-button ${CSS_PREFIX}-compare-refresh` }, 'Refresh');
    refresh.addEventListener('click', () => void this.load());
    this.node.append(
      h('h2', { class: `${CSS_PREFIX}-compare-title` }, `Compare ${names.join(', ')}`, ' ', refresh),
      this._error,
      this.curve.node,
      h('h3', null, 'Where the settings differ'),
      this._diff
    );
    this._error.style.display = 'none';
  }

  readonly curve = new LossCurve({ height: 360 });

  /** Fetch the diff and every job's curves, and draw them. */
  async load(): Promise<void> {
    if (!this.transport.compareJobs || !this.transport.getMetrics) {
      this._showError('This server cannot compare jobs.');
      return;
    }
    try {
      const [comparison, ...curves] = await Promise.all([
        this.transport.compareJobs(this.cluster, this.names),
        ...this.names.map(n => this.transport.getMetrics!(this.cluster, n, { maxPoints: MAX_POINTS }))
      ]);
      this._showError(null);
      await this.curve.setRuns(
        this.names.map((name, i) => {
          const s = seriesOf(curves[i]);
          return { name, points: s.loss, validation: s.validation };
        })
      );
      this._renderDiff(comparison.jobs, comparison.diff);
    } catch (err) {
      this._showError(`Cannot compare ${this.names.join(', ')}: ${errorMessage(err)}`);
    }
  }

  dispose(): void {
    this.curve.dispose();
    super.dispose();
  }

  protected onResize(): void {
    this.curve.resize();
  }

  private _renderDiff(jobs: readonly string[], diff: readonly { key: string; values: Record<string, unknown> }[]): void {
    if (!diff.length) {
      this._diff.replaceChildren(h('p', null, 'The specs are the same, apart from the job names.'));
      return;
    }
    this._diff.replaceChildren(
      h(
        'table',
        { class: `${CSS_PREFIX}-compare-diff` },
        h('thead', null, h('tr', null, h('th', null, 'setting'), ...jobs.map(j => h('th', null, j)))),
        h(
          'tbody',
          null,
          ...diff.map(d => h('tr', { 'data-key': d.key }, h('td', null, d.key), ...jobs.map(j => h('td', null, diffCell(d.values[j])))))
        )
      )
    );
  }

  private _showError(message: string | null): void {
    this._error.textContent = message ?? '';
    this._error.style.display = message ? '' : 'none';
  }

  private readonly _error = h('div', { class: `${CSS_PREFIX}-errorBar`, role: 'alert' });
  private readonly _diff = h('div', { class: `${CSS_PREFIX}-compare-diffHolder` });
}
