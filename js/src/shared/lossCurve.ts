/**
 * Step-loss curve drawn with plotly.js (basic bundle), loaded lazily so the
 * ~1 MB library is only fetched when a curve is shown.
 */
import { CSS_PREFIX, h } from './format';
import { IJobEvent, ILossPoint, lossSeries, mergeSeries, validationSeries } from './model';

/** The part of the Plotly API the curve uses. */
export interface IPlotly {
  react(
    root: HTMLElement,
    data: Record<string, unknown>[],
    layout?: Record<string, unknown>,
    config?: Record<string, unknown>
  ): Promise<unknown> | unknown;
  purge(root: HTMLElement): void;
  Plots?: { resize(root: HTMLElement): unknown };
}

/** One job's curves in a comparison ({@link LossCurve.setRuns}). */
export interface ILossRun {
  name: string;
  points: readonly ILossPoint[];
  validation: readonly ILossPoint[];
}

/** Options of {@link LossCurve}. */
export interface ILossCurveOptions {
  /** Loads Plotly; defaults to a dynamic import of `plotly.js-basic-dist-min`. */
  loadPlotly?: () => Promise<IPlotly>;
  /** Plot height in px (default 220). */
  height?: number;
  /** Text shown while there is no data. */
  emptyText?: string;
}

export class LossCurve {
  constructor(options: ILossCurveOptions = {}) {
    this._loadPlotly = options.loadPlotly ?? Private.loadPlotly;
    this._height = options.height ?? 220;
    this._plot = h('div', { class: `${CSS_PREFIX}-LossCurve-plot` });
    this._plot.style.height = `${this._height}px`;
    this._empty = h(
      'div',
      { class: `${CSS_PREFIX}-LossCurve-empty` },
      options.emptyText ?? 'No loss reported yet.'
    );
    this.node = h('div', { class: `${CSS_PREFIX}-LossCurve` }, this._empty, this._plot);
    this._plot.style.display = 'none';
    // Plotly needs concrete colours: redraw with the new theme's variables
    // when JupyterLab switches themes (it sets these attributes once the
    // theme's CSS has loaded, then hides the main area and shows it again on
    // the next frame: a plot redrawn while hidden keeps the old colours, so
    // the redraw waits until the area is back).
    if (typeof MutationObserver !== 'undefined' && typeof document !== 'undefined') {
      this._themeObserver = new MutationObserver(() => {
        if (this._drawn) {
          afterNextFrame(() => void this.draw());
        }
      });
      this._themeObserver.observe(document.body, {
        attributes: true,
        attributeFilter: ['data-jp-theme-name', 'data-jp-theme-light']
      });
    }
  }

  /** The root element. */
  readonly node: HTMLDivElement;

  /** The points currently drawn (sorted by step). */
  get points(): readonly ILossPoint[] {
    return this._points;
  }

  /** The validation-loss points currently drawn (sorted by step). */
  get validation(): readonly ILossPoint[] {
    return this._validation;
  }

  /** Replace the series with the step-loss and validation points of these events. */
  setEvents(events: readonly IJobEvent[]): Promise<void> {
    this._validation = validationSeries(events);
    return this.setPoints(lossSeries(events));
  }

  /** Append the points of new events (e.g. the result of `events?since=N`). */
  addEvents(events: readonly IJobEvent[]): Promise<void> {
    const added = lossSeries(events);
    const validated = validationSeries(events);
    if (!added.length && !validated.length) {
      return this._drawing ?? Promise.resolve();
    }
    this._validation = mergeSeries(this._validation, validated);
    return this.setPoints(mergeSeries(this._points, added));
  }

  /** Replace both series (the server's downsampled curve, `curveFollower.ts`). Resolves once drawn. */
  setSeries(points: readonly ILossPoint[], validation: readonly ILossPoint[]): Promise<void> {
    this._validation = [...validation];
    return this.setPoints(points);
  }

  /** Replace the step-loss series. Resolves once drawn. */
  setPoints(points: readonly ILossPoint[]): Promise<void> {
    this._points = [...points];
    this._runs = null;
    return this.draw();
  }

  /** Overlay several jobs' curves (a comparison): one colour per job, its validation dotted. Resolves once drawn. */
  setRuns(runs: readonly ILossRun[]): Promise<void> {
    this._runs = runs.map(r => ({ name: r.name, points: [...r.points], validation: [...r.validation] }));
    this._points = this._runs.flatMap(r => r.points);
    this._validation = this._runs.flatMap(r => r.validation);
    return this.draw();
  }

  /** Redraw (coalesces concurrent calls). */
  draw(): Promise<void> {
    if (this._disposed) {
      return Promise.resolve();
    }
    if (this._drawing) {
      this._dirty = true;
      return this._drawing;
    }
    this._drawing = this._draw().finally(() => {
      this._drawing = null;
      if (this._dirty && !this._disposed) {
        this._dirty = false;
        void this.draw();
      }
    });
    return this._drawing;
  }

  /** Resize the plot to its container (call after the container changes size). */
  resize(): void {
    if (this._drawnHidden && this._displayed()) {
      void this.draw(); // drawn while hidden (a theme switch in a background tab): the colours may be stale
      return;
    }
    // plotly rejects a resize of a plot that is not displayed (the sidebar's list view hides the detail).
    if (this._plotly && this._drawn && this._displayed()) {
      void Promise.resolve(this._plotly.Plots?.resize(this._plot)).catch(() => undefined);
    }
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._themeObserver?.disconnect();
    if (this._plotly && this._drawn) {
      this._plotly.purge(this._plot);
    }
    this.node.remove();
  }

  private async _draw(): Promise<void> {
    const points = this._points;
    const empty = points.length === 0;
    this._empty.style.display = empty ? '' : 'none';
    this._plot.style.display = empty ? 'none' : '';
    if (empty) {
      return;
    }
    try {
      this._plotly = this._plotly ?? (await this._loadPlotly());
    } catch (err) {
      this._empty.textContent = `Cannot load the plotting library: ${String(err)}`;
      this._empty.style.display = '';
      this._plot.style.display = 'none';
      return;
    }
    if (this._disposed) {
      return;
    }
    const colors = Private.themeColors(this.node);
    const traces = this._runs ? Private.runTraces(this._runs, colors) : this._traces(points, colors);
    await this._plotly.react(
      this._plot,
      traces,
      {
        height: this._height,
        margin: { l: 48, r: 12, t: this._validation.length || this._runs ? 28 : 12, b: 36 },
        paper_bgcolor: 'rgba(0,0,0,0)',
        plot_bgcolor: 'rgba(0,0,0,0)',
        font: { color: colors.font, family: colors.fontFamily, size: 11 },
        xaxis: { title: { text: 'step' }, gridcolor: colors.grid, zeroline: false },
        yaxis: { title: { text: 'loss' }, gridcolor: colors.grid, zeroline: false },
        showlegend: this._validation.length > 0 || !!this._runs,
        legend: { orientation: 'h', x: 0, y: 1.15 }
      },
      { displayModeBar: false, responsive: true }
    );
    this._drawn = true;
    this._drawnHidden = !this._displayed();
  }

  private _displayed(): boolean {
    return this._plot.isConnected && this._plot.getClientRects().length > 0;
  }

  private _traces(points: readonly ILossPoint[], colors: Private.IColors): Record<string, unknown>[] {
    return [
      {
        x: points.map(p => p.step),
        y: points.map(p => p.loss),
        type: 'scatter',
        mode: points.length > 1 ? 'lines' : 'markers',
        name: 'loss',
        line: { color: colors.line, width: 2 },
        marker: { color: colors.line },
        hovertemplate: 'step %{x}<br>loss %{y:.4f}<extra></extra>'
      },
      {
        x: this._validation.map(p => p.step),
        y: this._validation.map(p => p.loss),
        type: 'scatter',
        mode: 'lines+markers',
        name: 'validation loss',
        line: { color: colors.validation, width: 1, dash: 'dot' },
        marker: { color: colors.validation, size: 7 },
        hovertemplate: 'step %{x}<br>validation loss %{y:.4f}<extra></extra>'
      }
    ];
  }

  private _points: ILossPoint[] = [];
  private _runs: ILossRun[] | null = null;
  private _validation: ILossPoint[] = [];
  private _plotly: IPlotly | null = null;
  private _drawing: Promise<void> | null = null;
  private _dirty = false;
  private _drawn = false;
  private _disposed = false;
  private _themeObserver: MutationObserver | null = null;
  private _drawnHidden = false;
  private readonly _plot: HTMLDivElement;
  private readonly _empty: HTMLDivElement;
  private readonly _height: number;
  private readonly _loadPlotly: () => Promise<IPlotly>;
}

/** Run `f` after the next frame has been rendered. */
function afterNextFrame(f: () => void): void {
  if (typeof requestAnimationFrame === 'function') {
    requestAnimationFrame(() => requestAnimationFrame(() => f()));
  } else {
    setTimeout(f, 0);
  }
}

namespace Private {
  let plotly: Promise<IPlotly> | null = null;

  /** Import the plotly bundle once. */
  export function loadPlotly(): Promise<IPlotly> {
    if (!plotly) {
      plotly = import('plotly.js-basic-dist-min').then(mod => {
        const m = mod as unknown as { default?: IPlotly } & IPlotly;
        return (m.default ?? m) as IPlotly;
      });
      plotly.catch(() => {
        plotly = null;
      });
    }
    return plotly;
  }

  export interface IColors {
    line: string;
    validation: string;
    font: string;
    grid: string;
    fontFamily: string;
  }

  /** Plotly's default colour cycle, after the theme's brand colour for the first job. */
  const RUN_COLORS = ['#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];

  /** A comparison's traces: each job's loss, then its validation loss dotted, in the job's colour. */
  export function runTraces(runs: readonly ILossRun[], colors: IColors): Record<string, unknown>[] {
    return runs.flatMap((run, i) => {
      const color = i === 0 ? colors.line : RUN_COLORS[(i - 1) % RUN_COLORS.length];
      const loss = {
        x: run.points.map(p => p.step),
        y: run.points.map(p => p.loss),
        type: 'scatter',
        mode: run.points.length > 1 ? 'lines' : 'markers',
        name: run.name,
        line: { color, width: 2 },
        marker: { color },
        hovertemplate: `${run.name}<br>step %{x}<br>loss %{y:.4f}<extra></extra>`
      };
      const validation = {
        x: run.validation.map(p => p.step),
        y: run.validation.map(p => p.loss),
        type: 'scatter',
        mode: 'lines+markers',
        name: `${run.name} (validation)`,
        line: { color, width: 1, dash: 'dot' },
        marker: { color, size: 6 },
        hovertemplate: `${run.name}<br>step %{x}<br>validation loss %{y:.4f}<extra></extra>`
      };
      return run.validation.length ? [loss, validation] : [loss];
    });
  }

  /** Read the JupyterLab theme variables so the plot follows light/dark themes. */
  export function themeColors(node: HTMLElement): IColors {
    const style = typeof getComputedStyle === 'function' ? getComputedStyle(node) : null;
    const read = (name: string, fallback: string) =>
      style?.getPropertyValue(name).trim() || fallback;
    return {
      line: read('--jp-brand-color1', '#1976d2'),
      validation: read('--jp-warn-color1', '#f57c00'),
      font: read('--jp-ui-font-color1', '#616161'),
      grid: read('--jp-border-color2', '#e0e0e0'),
      fontFamily: read('--jp-ui-font-family', 'sans-serif')
    };
  }
}
