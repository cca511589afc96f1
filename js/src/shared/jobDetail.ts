/**
 * Detail view of one job: status, timings, progress metrics, error,
 * checkpoints, configuration, loss curve and a log tail, plus Back and
 * Cancel actions.  Plain DOM; what each section shows is in
 * `jobDetailSections.ts`.
 */
import { CSS_PREFIX, h, updateStatusBadge } from './format';
import {
  VIEW_CLASS,
  configRows,
  fillTable,
  kvTable,
  planRows,
  progressRows,
  backLink,
  renderCheckpoints,
  renderDiagnosis,
  renderFixes,
  renderQueued,
  section,
  servingRows,
  summaryRows,
  trackingOf,
  trackingRows,
  utilisationRows
} from './jobDetailSections';
import { ExportMerged, ExportMergedFn } from './exportMerged';
import { ChatFn, TryIt } from './tryIt';
import { ICurveSeries } from './curveFollower';
import { LogView } from './logView';
import { ILossCurveOptions, LossCurve } from './lossCurve';
import { ICheckpoint, IDataLineOpener, IFix, IJobDetail, IJobEvent, isActive, isHubId } from './model';

/** Options of {@link JobDetailView}. */
export interface IJobDetailViewOptions {
  /** Shows a "Back" link calling this. */
  onBack?: () => void;
  /** Shows a Cancel button (enabled while the job is active) calling this. */
  onCancel?: (job: IJobDetail) => void | Promise<unknown>;
  /** A Resume button (once the job ended with a checkpoint), "Resume from here" per checkpoint (undefined: latest). */
  onResume?: (job: IJobDetail, checkpoint?: ICheckpoint) => void | Promise<unknown>;
  /** Shows "Pre-fetch model" for a base model from the Hub (the model cache of every node). */
  onPrefetch?: (job: IJobDetail) => void;
  /** Shows the failure's fixes ("Retry with QLoRA") as buttons: the create form prefilled with the change. */
  onRetryWith?: (job: IJobDetail, fix: IFix) => void;
  /** Offers "Open at line N" for a dataset error's line, where this server can show the file. */
  dataLines?: IDataLineOpener;
  /** Shows "Try it" on every checkpoint: a chat with it, generated on the cluster. */
  onChat?: ChatFn;
  /** Shows "Export merged" on LoRA checkpoints, running the export on the cluster. */
  onExportMerged?: ExportMergedFn;
  /** Shows "Open in TensorBoard" (for a job whose TensorBoard folder this server can show) calling this. */
  onOpenTensorBoard?: (job: IJobDetail) => void | Promise<unknown>;
  /** Shows "Create from this job" (the create form prefilled with the job's spec) calling this. */
  onClone?: (job: IJobDetail) => void | Promise<unknown>;
  /** Shows "Export" (the job's spec as YAML that `%%train` accepts) calling this. */
  onExport?: (job: IJobDetail) => void | Promise<unknown>;
  /** Shows "Save as template" (the job's spec under a name the form offers) calling this. */
  onSaveTemplate?: (job: IJobDetail) => void | Promise<unknown>;
  /** Show the loss curve (default true). */
  showLossCurve?: boolean;
  /** Show the log tail (default true). */
  showLogs?: boolean;
  /** Options of the loss curve. */
  lossCurve?: ILossCurveOptions;
  /** Current time in unix seconds (tests). */
  now?: () => number;
}

export class JobDetailView {
  constructor(options: IJobDetailViewOptions = {}) {
    this._onCancel = options.onCancel;
    this._onResume = options.onResume;
    this._exportMerged = options.onExportMerged ? new ExportMerged(options.onExportMerged) : undefined;
    this._tryIt = options.onChat ? new TryIt(options.onChat) : undefined;
    this._onOpenTensorBoard = options.onOpenTensorBoard;
    this._now = options.now ?? (() => Date.now() / 1000);

    this._title = h('span', { class: `${VIEW_CLASS}-name` });
    this._badge = h('span');
    this._cancel = Private.button('cancel', 'Cancel this job', 'Cancel', 'jp-mod-warn');
    this._cancel.addEventListener('click', this._onCancelClick);
    this._cancel.style.display = this._onCancel ? '' : 'none';
    this._resume = Private.button('resume', 'Continue from the latest checkpoint', 'Resume');
    this._resume.addEventListener('click', () => void this._resumeFrom(undefined));
    this._resume.style.display = this._onResume ? '' : 'none';
    this._tensorBoard = Private.button(
      'tensorboard',
      "Open this job's checkpoint folder in TensorBoard (a new browser tab)",
      'Open in TensorBoard'
    );
    this._tensorBoard.style.display = 'none';
    this._tensorBoard.addEventListener('click', this._onTensorBoardClick);
    this._clone = Private.button('clone', "A new job with this job's settings (the form, prefilled)", 'Create from this job');
    this._clone.style.display = options.onClone ? '' : 'none';
    this._clone.addEventListener('click', () => this._job && void options.onClone?.(this._job));
    this._prefetch = Private.button('prefetch', "Download the base model into every node's cache", 'Pre-fetch model');
    this._prefetch.addEventListener('click', () => this._job && void options.onPrefetch?.(this._job));
    this._hasPrefetch = !!options.onPrefetch;
    this._export = Private.button('export', "This job's spec as YAML that %%train and --config read", 'Export');
    this._export.style.display = options.onExport ? '' : 'none';
    this._export.addEventListener('click', () => this._job && void options.onExport?.(this._job));
    this._template = Private.button('template', "Keep this job's settings as a template the Create Job form offers", 'Save as template');
    this._template.style.display = options.onSaveTemplate ? '' : 'none';
    this._template.addEventListener('click', () => this._job && void options.onSaveTemplate?.(this._job));

    this._message = h('div', { class: `${VIEW_CLASS}-message` });
    this._error = h('pre', { class: `${VIEW_CLASS}-error` });
    this._queued = h('div', { class: `${VIEW_CLASS}-queued`, role: 'status' });
    this._advice = h('div', { class: `${VIEW_CLASS}-advice` });
    this._fixes = h('div', { class: `${VIEW_CLASS}-fixes` });
    this._onRetryWith = options.onRetryWith;
    this._dataLines = options.dataLines;
    this._curve = h('div', { class: `${VIEW_CLASS}-curveHint`, role: 'note' });
    this._tracebackText = h('pre', { class: `${VIEW_CLASS}-tracebackText` });
    this._traceback = h('details', { class: `${VIEW_CLASS}-traceback` }, h('summary', null, 'Traceback'), this._tracebackText);
    this._summary = kvTable('summary');
    this._progress = kvTable('progress');
    this._checkpoints = h('div', { class: `${VIEW_CLASS}-checkpoints` });
    this._serving = kvTable('serving');
    this._tracking = kvTable('tracking');
    this._plan = kvTable('plan');
    this._utilisation = kvTable('utilisation');
    this._config = kvTable('config');
    this._logLink = h('a', { class: `${VIEW_CLASS}-logLink`, target: '_blank', rel: 'noopener' });

    this._utilisationSection = section('Utilisation', this._utilisation);
    this.node = h('div', { class: VIEW_CLASS });
    this.lossCurve = (options.showLossCurve ?? true) ? new LossCurve(options.lossCurve) : null;
    this.logView = (options.showLogs ?? true) ? new LogView() : null;
    this._layout(options.onBack);
    this.setJob(null);
  }

  /** The root element. */
  readonly node: HTMLDivElement;
  /** The loss curve, unless disabled. */
  readonly lossCurve: LossCurve | null;
  /** The log view, unless disabled. */
  readonly logView: LogView | null;

  /** The job shown. */
  get job(): IJobDetail | null {
    return this._job;
  }

  /** Show a job (null: placeholder). */
  setJob(job: IJobDetail | null): void {
    if (this._job && job && this._job.name !== job.name) {
      void this.lossCurve?.setPoints([]);
      this.logView?.setText('');
    }
    this._job = job;
    this.node.classList.toggle('jp-mod-empty', !job);
    if (!job) {
      this._clear();
      return;
    }
    this.node.dataset.job = job.name;
    this._showHeader(job);
    this._showMessages(job);
    fillTable(this._summary, summaryRows(job, this._now()));
    fillTable(this._progress, progressRows(job));
    renderCheckpoints(this._checkpoints, job, {
      resuming: this._resuming,
      onResumeFrom: this._onResume ? ckpt => void this._resumeFrom(ckpt) : undefined,
      exportMerged: this._exportMerged,
      tryIt: this._tryIt
    });
    fillTable(this._serving, servingRows(job));
    fillTable(this._tracking, trackingRows(job));
    this._tensorBoard.style.display =
      this._onOpenTensorBoard && trackingOf(job).tensorboard?.viewer ? '' : 'none';
    fillTable(this._plan, planRows(job));
    fillTable(this._utilisation, utilisationRows(job));
    this._utilisationSection.style.display = (job.utilisation ?? []).length ? '' : 'none';
    fillTable(this._config, configRows(job));

    if (job.log_url) {
      this._logLink.href = job.log_url;
      this._logLink.textContent = 'full log';
      this._logLink.style.display = '';
    } else {
      this._logLink.style.display = 'none';
    }
  }

  /** Draw the loss curve from the server's downsampled series. */
  setCurve(series: ICurveSeries): Promise<void> {
    return this.lossCurve?.setSeries(series.loss, series.validation) ?? Promise.resolve();
  }

  /** Replace the loss-curve events. */
  setEvents(events: readonly IJobEvent[]): Promise<void> {
    return this.lossCurve?.setEvents(events) ?? Promise.resolve();
  }

  /** Append new events to the loss curve. */
  addEvents(events: readonly IJobEvent[]): Promise<void> {
    return this.lossCurve?.addEvents(events) ?? Promise.resolve();
  }

  /** Replace the log text. */
  setLogs(text: string): void {
    this.logView?.setText(text);
  }

  dispose(): void {
    this._cancel.removeEventListener('click', this._onCancelClick);
    this.lossCurve?.dispose();
    this.logView?.dispose();
    this.node.remove();
  }

  /** Attach the parts, in the order the page reads. */
  private _layout(onBack: (() => void) | undefined): void {
    if (onBack) {
      this.node.appendChild(h('div', { class: `${VIEW_CLASS}-nav` }, backLink(onBack)));
    }
    const header = h(
      'div',
      { class: `${VIEW_CLASS}-header` },
      this._title,
      this._badge,
      h('span', { class: `${CSS_PREFIX}-spacer` }),
      h('span', { class: `${VIEW_CLASS}-actions` }, this._prefetch, this._clone, this._template, this._export, this._resume, this._cancel)
    );
    this.node.append(
      header,
      this._queued,
      this._message,
      this._error,
      this._advice,
      this._fixes,
      this._traceback,
      section('Status', this._summary),
      section('Progress', this._progress)
    );
    this.node.appendChild(
      this.lossCurve ? section('Loss', this.lossCurve.node, this._curve) : section('Loss', this._curve)
    );
    this.node.append(
      section('Checkpoints', this._checkpoints),
      section('Serving', this._serving),
      section('Tracking', this._tracking, this._tensorBoard),
      section('Plan', this._plan),
      this._utilisationSection,
      section('Configuration', this._config)
    );
    if (this.logView) {
      const logs = section('Logs', this.logView.node);
      logs.querySelector('h3')?.appendChild(this._logLink);
      this.node.appendChild(logs);
    }
  }

  /** The placeholder: nothing selected. */
  private _clear(): void {
    this._title.textContent = 'No job selected';
    this._badge.style.display = 'none';
    this._cancel.disabled = true;
    this._message.style.display = 'none';
    this._error.style.display = 'none';
    this._resume.disabled = true;
    this._clone.disabled = true;
    this._prefetch.style.display = 'none';
    this._export.disabled = true;
    this._template.disabled = true;
    for (const el of [this._queued, this._advice, this._fixes, this._traceback, this._curve]) {
      el.style.display = 'none';
    }
    this._utilisationSection.style.display = 'none';
    for (const table of [this._summary, this._progress, this._config, this._plan, this._utilisation, this._serving, this._tracking]) {
      table.replaceChildren();
    }
    this._checkpoints.replaceChildren();
  }

  /** Name, status badge, Cancel and Resume. */
  private _showHeader(job: IJobDetail): void {
    this._title.textContent = job.name;
    this._badge.style.display = '';
    updateStatusBadge(this._badge, job.status);
    this._cancel.disabled = this._cancelling || !isActive(job.status);
    this._cancel.textContent = this._cancelling ? 'Cancelling\u2026' : 'Cancel';
    const checkpointsKnown = (job.checkpoints ?? []).length > 0;
    this._resume.disabled = this._resuming || isActive(job.status) || !checkpointsKnown;
    this._clone.disabled = this._export.disabled = this._template.disabled = false;
    this._prefetch.style.display = this._hasPrefetch && isHubId(job.base_model) ? '' : 'none';
  }

  /** The message, error, why queued, advice and traceback lines (each hidden when empty). */
  private _showMessages(job: IJobDetail): void {
    this._message.textContent = job.message ?? '';
    this._message.style.display = job.message ? '' : 'none';
    this._error.textContent = job.error ?? '';
    this._error.style.display = job.error ? '' : 'none';
    renderQueued(this._queued, job.status === 'queued' ? job.queued_reason : null);
    renderFixes(this._fixes, job, this._onRetryWith, this._dataLines);
    this._advice.textContent = job.advice ? `${job.error_kind ? `[${job.error_kind}] ` : ''}${job.advice}` : '';
    this._advice.style.display = job.advice ? '' : 'none';
    this._tracebackText.textContent = job.traceback ?? '';
    this._traceback.style.display = job.traceback ? '' : 'none';
    renderDiagnosis(this._curve, job); // the curve's interpretation and the slow/stuck hints, as `%train show`
  }

  private _onTensorBoardClick = async (): Promise<void> => {
    const job = this._job;
    if (!job || !this._onOpenTensorBoard || this._tensorBoard.disabled) {
      return;
    }
    this._tensorBoard.disabled = true;
    try {
      await this._onOpenTensorBoard(job);
    } finally {
      this._tensorBoard.disabled = false;
    }
  };

  private _onCancelClick = async (): Promise<void> => {
    const job = this._job;
    if (!job || !this._onCancel || this._cancelling) {
      return;
    }
    this._cancelling = true;
    this.setJob(job);
    try {
      await this._onCancel(job);
    } finally {
      this._cancelling = false;
      this.setJob(this._job);
    }
  };

  private async _resumeFrom(checkpoint: ICheckpoint | undefined): Promise<void> {
    const job = this._job;
    if (!job || !this._onResume || this._resuming) {
      return;
    }
    this._resuming = true;
    this.setJob(job);
    try {
      await this._onResume(job, checkpoint);
    } finally {
      this._resuming = false;
      this.setJob(this._job);
    }
  }

  private _job: IJobDetail | null = null;
  private _cancelling = false;
  private readonly _onOpenTensorBoard?: (job: IJobDetail) => void | Promise<unknown>;
  private readonly _tensorBoard: HTMLButtonElement;
  private _resuming = false;
  private readonly _onResume?: (job: IJobDetail, checkpoint?: ICheckpoint) => void | Promise<unknown>;
  private readonly _exportMerged?: ExportMerged;
  private readonly _tryIt?: TryIt;
  private readonly _resume: HTMLButtonElement;
  private readonly _clone: HTMLButtonElement;
  private readonly _prefetch: HTMLButtonElement;
  private readonly _hasPrefetch: boolean;
  private readonly _export: HTMLButtonElement;
  private readonly _template: HTMLButtonElement;
  private readonly _queued: HTMLDivElement;
  private readonly _fixes: HTMLDivElement;
  private readonly _dataLines?: IDataLineOpener;
  private readonly _onRetryWith?: (job: IJobDetail, fix: IFix) => void;
  private readonly _advice: HTMLDivElement;
  private readonly _curve: HTMLDivElement;
  private readonly _traceback: HTMLDetailsElement;
  private readonly _tracebackText: HTMLPreElement;
  private readonly _plan: HTMLTableElement;
  private readonly _utilisation: HTMLTableElement;
  private readonly _utilisationSection: HTMLElement;
  private readonly _serving: HTMLTableElement;
  private readonly _tracking: HTMLTableElement;
  private readonly _onCancel?: (job: IJobDetail) => void | Promise<unknown>;
  private readonly _now: () => number;
  private readonly _title: HTMLSpanElement;
  private readonly _badge: HTMLSpanElement;
  private readonly _cancel: HTMLButtonElement;
  private readonly _message: HTMLDivElement;
  private readonly _error: HTMLPreElement;
  private readonly _summary: HTMLTableElement;
  private readonly _progress: HTMLTableElement;
  private readonly _checkpoints: HTMLDivElement;
  private readonly _config: HTMLTableElement;
  private readonly _logLink: HTMLAnchorElement;
}

namespace Private {
  /** A button of the header or a section (`<VIEW_CLASS>-<name>`). */
  export function button(name: string, title: string, label: string, mod?: string): HTMLButtonElement {
    return h(
      'button',
      { type: 'button', class: `${CSS_PREFIX}-button ${mod ? `${mod} ` : ''}${VIEW_CLASS}-${name}`, title },
      label
    );
  }
}
