/**
 * Detail view of one job: status, timings, progress metrics, error,
 * checkpoints, configuration, loss curve and a log tail, plus Back and
 * Cancel actions.  Plain DOM.
 */
import {
  CSS_PREFIX,
  formatElapsed,
  formatNumber,
  formatTimestamp,
  h,
  jobElapsed,
  jobTypeLabel,
  updateStatusBadge
} from './format';
import { LogView } from './logView';
import { ILossCurveOptions, LossCurve } from './lossCurve';
import { ICheckpoint, IJobDetail, IJobEvent, IPlan, IQueuedReason, IServing, ITracking, isActive } from './model';

/** Options of {@link JobDetailView}. */
export interface IJobDetailViewOptions {
  /** Shows a "Back" link calling this. */
  onBack?: () => void;
  /** Shows a Cancel button (enabled while the job is active) calling this. */
  onCancel?: (job: IJobDetail) => void | Promise<unknown>;
  /**
   * Shows a Resume button (enabled once the job ended with a checkpoint) and a "Resume from here" button
   * per checkpoint; `checkpoint` is undefined for the latest.
   */
  onResume?: (job: IJobDetail, checkpoint?: ICheckpoint) => void | Promise<unknown>;
  /** Shows "Open in TensorBoard" (for a job whose TensorBoard folder this server can show) calling this. */
  onOpenTensorBoard?: (job: IJobDetail) => void | Promise<unknown>;
  /** Show the loss curve (default true). */
  showLossCurve?: boolean;
  /** Show the log tail (default true). */
  showLogs?: boolean;
  /** Options of the loss curve. */
  lossCurve?: ILossCurveOptions;
  /** Current time in unix seconds (tests). */
  now?: () => number;
}

const VIEW_CLASS = `${CSS_PREFIX}-JobDetail`;

export class JobDetailView {
  constructor(options: IJobDetailViewOptions = {}) {
    this._onCancel = options.onCancel;
    this._now = options.now ?? (() => Date.now() / 1000);

    this._title = h('span', { class: `${VIEW_CLASS}-name` });
    this._badge = h('span');
    this._cancel = h(
      'button',
      {
        type: 'button',
        class: `${CSS_PREFIX}-button jp-mod-warn ${VIEW_CLASS}-cancel`,
        title: 'Cancel this job'
      },
      'Cancel'
    );
    this._cancel.addEventListener('click', this._onCancelClick);
    if (!this._onCancel) {
      this._cancel.style.display = 'none';
    }
    this._onResume = options.onResume;
    this._resume = h(
      'button',
      { type: 'button', class: `${CSS_PREFIX}-button ${VIEW_CLASS}-resume`, title: 'Continue from the latest checkpoint' },
      'Resume'
    );
    this._resume.addEventListener('click', () => void this._resumeFrom(undefined));
    if (!this._onResume) {
      this._resume.style.display = 'none';
    }
    const header = h('div', { class: `${VIEW_CLASS}-header` });
    this.node = h('div', { class: VIEW_CLASS });
    if (options.onBack) {
      const back = h(
        'a',
        { class: `${CSS_PREFIX}-back`, href: '#', role: 'button', title: 'Back to the job list' },
        '\u2039 Back'
      );
      const onBack = options.onBack;
      back.addEventListener('click', event => {
        event.preventDefault();
        onBack();
      });
      this.node.appendChild(h('div', { class: `${VIEW_CLASS}-nav` }, back));
    }
    header.append(
      this._title,
      this._badge,
      h('span', { class: `${CSS_PREFIX}-spacer` }),
      this._resume,
      this._cancel
    );

    this._message = h('div', { class: `${VIEW_CLASS}-message` });
    this._error = h('pre', { class: `${VIEW_CLASS}-error` });
    this._queued = h('div', { class: `${VIEW_CLASS}-queued`, role: 'status' });
    this._advice = h('div', { class: `${VIEW_CLASS}-advice` });
    this._tracebackText = h('pre', { class: `${VIEW_CLASS}-tracebackText` });
    this._traceback = h(
      'details',
      { class: `${VIEW_CLASS}-traceback` },
      h('summary', null, 'Traceback'),
      this._tracebackText
    );
    this._plan = h('table', { class: `${CSS_PREFIX}-kvTable ${VIEW_CLASS}-plan` });
    this._serving = h('table', { class: `${CSS_PREFIX}-kvTable ${VIEW_CLASS}-serving` });
    this._tracking = h('table', { class: `${CSS_PREFIX}-kvTable ${VIEW_CLASS}-tracking` });
    this._onOpenTensorBoard = options.onOpenTensorBoard;
    this._tensorBoard = h(
      'button',
      {
        type: 'button',
        class: `${CSS_PREFIX}-button ${VIEW_CLASS}-tensorboard`,
        title: "Open this job's checkpoint folder in TensorBoard (a new browser tab)"
      },
      'Open in TensorBoard'
    );
    this._tensorBoard.style.display = 'none';
    this._tensorBoard.addEventListener('click', this._onTensorBoardClick);
    this._summary = h('table', { class: `${CSS_PREFIX}-kvTable ${VIEW_CLASS}-summary` });
    this._progress = h('table', { class: `${CSS_PREFIX}-kvTable ${VIEW_CLASS}-progress` });
    this._checkpoints = h('div', { class: `${VIEW_CLASS}-checkpoints` });
    this._config = h('table', { class: `${CSS_PREFIX}-kvTable ${VIEW_CLASS}-config` });
    this._logLink = h('a', { class: `${VIEW_CLASS}-logLink`, target: '_blank', rel: 'noopener' });

    this.node.append(
      header,
      this._queued,
      this._message,
      this._error,
      this._advice,
      this._traceback,
      Private.section('Status', this._summary),
      Private.section('Progress', this._progress)
    );
    if (options.showLossCurve ?? true) {
      this.lossCurve = new LossCurve(options.lossCurve);
      this.node.appendChild(Private.section('Loss', this.lossCurve.node));
    } else {
      this.lossCurve = null;
    }
    this.node.append(
      Private.section('Checkpoints', this._checkpoints),
      Private.section('Serving', this._serving),
      Private.section('Tracking', this._tracking, this._tensorBoard),
      Private.section('Plan', this._plan),
      Private.section('Configuration', this._config)
    );
    if (options.showLogs ?? true) {
      this.logView = new LogView();
      const logs = Private.section('Logs', this.logView.node);
      logs.querySelector('h3')?.appendChild(this._logLink);
      this.node.appendChild(logs);
    } else {
      this.logView = null;
    }
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
      this._title.textContent = 'No job selected';
      this._badge.style.display = 'none';
      this._cancel.disabled = true;
      this._message.style.display = 'none';
      this._error.style.display = 'none';
      this._resume.disabled = true;
      for (const el of [this._queued, this._advice, this._traceback]) {
        el.style.display = 'none';
      }
      for (const table of [this._summary, this._progress, this._config, this._plan, this._serving, this._tracking]) {
        table.replaceChildren();
      }
      this._checkpoints.replaceChildren();
      return;
    }
    this.node.dataset.job = job.name;
    this._title.textContent = job.name;
    this._badge.style.display = '';
    updateStatusBadge(this._badge, job.status);
    this._cancel.disabled = this._cancelling || !isActive(job.status);
    this._cancel.textContent = this._cancelling ? 'Cancelling\u2026' : 'Cancel';

    this._message.textContent = job.message ?? '';
    this._message.style.display = job.message ? '' : 'none';
    this._error.textContent = job.error ?? '';
    this._error.style.display = job.error ? '' : 'none';
    const queued = job.status === 'queued' ? (job.queued_reason as IQueuedReason | null)?.message : null;
    this._queued.textContent = queued ? `Why queued: ${queued}` : '';
    this._queued.style.display = queued ? '' : 'none';
    this._advice.textContent = job.advice ? `${job.error_kind ? `[${job.error_kind}] ` : ''}${job.advice}` : '';
    this._advice.style.display = job.advice ? '' : 'none';
    this._tracebackText.textContent = job.traceback ?? '';
    this._traceback.style.display = job.traceback ? '' : 'none';
    const checkpointsKnown = (job.checkpoints ?? []).length > 0;
    this._resume.disabled = this._resuming || isActive(job.status) || !checkpointsKnown;

    const ray = job.ray_status && job.ray_status !== job.status ? ` (Ray: ${job.ray_status})` : '';
    Private.fillTable(this._summary, [
      ['Status', `${job.status}${ray}`],
      ['Type', jobTypeLabel(job.job_type)],
      ['Framework', job.framework],
      ['Base model', job.base_model],
      ['Dataset', job.dataset_path],
      ['Owner', job.owner],
      ['Cluster', job.cluster],
      ['Created', formatTimestamp(job.created_at)],
      ['Started', formatTimestamp(job.started_at)],
      ['Ended', formatTimestamp(job.ended_at)],
      ['Elapsed', formatElapsed(jobElapsed(job, this._now()))]
    ]);

    const m = job.metrics;
    Private.fillTable(this._progress, [
      ['Epoch', m?.epoch === undefined || m.epoch === null ? null : `${formatNumber(m.epoch)} / ${job.epochs ?? '?'}`],
      ['Step', formatNumber(m?.step)],
      ['Last loss', formatNumber(m?.loss)],
      ['Learning rate', formatNumber(m?.learning_rate)],
      ['Tokens / s', formatNumber(m?.tokens_per_s, 5)],
      ['ETA', isActive(job.status) ? formatElapsed(m?.eta_s) : '\u2014']
    ]);

    this._checkpoints.replaceChildren(
      h(
        'div',
        { class: `${VIEW_CLASS}-checkpointDir` },
        h('span', { class: `${CSS_PREFIX}-label` }, 'Checkpoint path: '),
        h('code', null, job.checkpoint_dir || '\u2014')
      )
    );
    const checkpoints = job.checkpoints ?? [];
    const serving = (job.serving ?? {}) as IServing;
    if (checkpoints.length) {
      const list = h('ul', { class: `${VIEW_CLASS}-checkpointList` });
      for (const ckpt of checkpoints) {
        const item = h(
          'li',
          { title: ckpt.path, 'data-checkpoint': ckpt.name },
          h('span', null, ckpt.name),
          ' ',
          h('code', null, ckpt.path),
          ' ',
          Private.copyButton(ckpt.path)
        );
        if (this._onResume) {
          const here = h(
            'button',
            { type: 'button', class: `${CSS_PREFIX}-button ${VIEW_CLASS}-resumeHere`, title: `Resume from ${ckpt.name}` },
            'Resume from here'
          );
          here.disabled = this._resuming || isActive(job.status);
          here.addEventListener('click', () => void this._resumeFrom(ckpt));
          item.append(' ', here);
        }
        list.appendChild(item);
      }
      this._checkpoints.appendChild(list);
      const last = checkpoints[checkpoints.length - 1];
      const snippet = `from transformers import AutoModelForCausalLM, AutoTokenizer\nmodel = AutoModelForCausalLM.from_pretrained(${JSON.stringify(serving.model_path ?? last.path)})\ntokenizer = AutoTokenizer.from_pretrained(${JSON.stringify(serving.model_path ?? last.path)})`;
      this._checkpoints.appendChild(
        h('div', { class: `${VIEW_CLASS}-snippet` }, h('pre', null, snippet), Private.copyButton(snippet))
      );
    }
    Private.fillTable(this._serving, [
      ['Model path', serving.model_path],
      ['LoRA adapter path', serving.lora_adapter_path],
      ['Base model', serving.base_model]
    ]);
    const tracking = (job.tracking ?? {}) as ITracking;
    Private.fillTable(this._tracking, [
      ['TensorBoard', tracking.tensorboard?.log_dir],
      ['MLflow', tracking.mlflow ? (tracking.mlflow.url ?? `run ${tracking.mlflow.run_id}`) : null],
      ['W&B', tracking.wandb ? (tracking.wandb.url ?? `${tracking.wandb.mode ?? ''} run in ${tracking.wandb.dir}`) : null]
    ]);
    this._tensorBoard.style.display =
      this._onOpenTensorBoard && tracking.tensorboard?.viewer ? '' : 'none';
    const plan = (job.plan ?? {}) as IPlan;
    const reasons = plan.reasons ?? {};
    Private.fillTable(
      this._plan,
      ['method', 'precision', 'strategy', 'gradient_checkpointing', 'lora_target_modules']
        .filter(key => key !== 'lora_target_modules' || reasons[key] !== undefined)
        .map(
          key => [key, reasons[key] ?? (plan[key] === undefined ? null : String(plan[key]))] as [string, string | null]
        )
    );

    const spec = (job.spec ?? {}) as Record<string, unknown>;
    Private.fillTable(
      this._config,
      Object.keys(spec).map(key => [key, Private.configValue(spec[key])] as [string, string])
    );

    if (job.log_url) {
      this._logLink.href = job.log_url;
      this._logLink.textContent = 'full log';
      this._logLink.style.display = '';
    } else {
      this._logLink.style.display = 'none';
    }
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
  private readonly _resume: HTMLButtonElement;
  private readonly _queued: HTMLDivElement;
  private readonly _advice: HTMLDivElement;
  private readonly _traceback: HTMLDetailsElement;
  private readonly _tracebackText: HTMLPreElement;
  private readonly _plan: HTMLTableElement;
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
  /** A button copying `text` to the clipboard. */
  export function copyButton(text: string): HTMLButtonElement {
    const button = h(
      'button',
      { type: 'button', class: `${CSS_PREFIX}-button ${CSS_PREFIX}-copy`, title: 'Copy to the clipboard' },
      'Copy'
    );
    button.addEventListener('click', () => {
      void navigator.clipboard?.writeText(text).then(
        () => (button.textContent = 'Copied'),
        () => (button.textContent = 'Copy failed')
      );
      setTimeout(() => (button.textContent = 'Copy'), 1500);
    });
    return button;
  }

  export function section(title: string, ...body: HTMLElement[]): HTMLElement {
    return h(
      'section',
      { class: `${VIEW_CLASS}-section`, 'data-section': title.toLowerCase() },
      h('h3', null, title),
      ...body
    );
  }

  export function fillTable(
    table: HTMLTableElement,
    rows: [string, string | number | null | undefined][]
  ): void {
    const body = h('tbody');
    for (const [key, value] of rows) {
      const text = value === null || value === undefined || value === '' ? '\u2014' : String(value);
      body.appendChild(
        h('tr', { 'data-key': key }, h('th', { scope: 'row' }, key), h('td', { title: text }, text))
      );
    }
    table.replaceChildren(body);
  }

  export function configValue(value: unknown): string {
    if (value === null || value === undefined) {
      return '\u2014';
    }
    if (typeof value === 'object') {
      return JSON.stringify(value);
    }
    return String(value);
  }
}
