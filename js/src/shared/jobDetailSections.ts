/**
 * What the sections of the job detail view show: the rows of their key/value
 * tables built from a job, the checkpoint list, and the small DOM pieces the
 * view is made of.  Used by `jobDetail.ts`.
 */
import {
  CSS_PREFIX,
  formatElapsed,
  formatNumber,
  formatTimestamp,
  h,
  jobElapsed,
  jobTypeLabel
} from './format';
import { ExportMerged } from './exportMerged';
import { TryIt } from './tryIt';
import {
  ICheckpoint,
  IDataLine,
  IDataLineOpener,
  IFix,
  IJobDetail,
  IPlan,
  IQueuedReason,
  IServing,
  ITracking,
  isActive
} from './model';

/** The class of the detail view's root; its parts' classes start with it. */
export const VIEW_CLASS = `${CSS_PREFIX}-JobDetail`;

/** A row of a key/value table. */
export type KeyValueRow = [string, string | number | null | undefined];

/** Why a queued job waits (node by node, from the service) and what would let it start; hidden when null. */
export function renderQueued(el: HTMLElement, reason: IQueuedReason | null | undefined): void {
  el.style.display = reason ? '' : 'none';
  if (!reason) {
    el.replaceChildren();
    return;
  }
  const suggestions = reason.suggestions ?? [];
  el.replaceChildren(
    h('div', { class: `${VIEW_CLASS}-queuedMessage` }, `Why queued: ${reason.message}`),
    ...(suggestions.length
      ? [
          h('div', { class: `${VIEW_CLASS}-queuedHint` }, 'What would let it start:'),
          h('ul', { class: `${VIEW_CLASS}-queuedSuggestions` }, ...suggestions.map(s => h('li', null, s)))
        ]
      : [])
  );
}

/** The service's loss-curve interpretation and its slow/stuck hints (`<VIEW_CLASS>-hint`); hidden when none. */
export function renderDiagnosis(el: HTMLElement, job: IJobDetail): void {
  const hints = job.hints ?? [];
  el.dataset.pattern = job.curve?.pattern ?? '';
  el.style.display = job.curve || hints.length ? '' : 'none';
  el.replaceChildren(
    ...(job.curve ? [h('div', { class: `${VIEW_CLASS}-curveAdvice` }, job.curve.advice)] : []),
    ...hints.map(x => h('div', { class: `${VIEW_CLASS}-hint`, 'data-kind': x.kind }, x.message))
  );
}

/** A failed job's fixes from the service, as "Retry with ..." buttons (hidden without fixes or a handler). */
export function renderFixes(
  el: HTMLElement,
  job: IJobDetail,
  onRetry?: (job: IJobDetail, fix: IFix) => void,
  opener?: IDataLineOpener
): void {
  const fixes = job.status === 'failed' && onRetry ? (job.fixes ?? []) : [];
  const line = job.error_line;
  el.style.display = fixes.length || line ? '' : 'none';
  el.replaceChildren(
    ...(line ? [dataLine(line, opener)] : []),
    ...fixes.map(fix => {
      const b = h(
        'button',
        { type: 'button', class: `${CSS_PREFIX}-button ${VIEW_CLASS}-fix`, title: fix.why ?? fix.label },
        fix.label
      );
      b.addEventListener('click', () => onRetry!(job, fix));
      return b;
    })
  );
}

/**
 * The dataset line an error is about: `path:line`, the line as read and, where this server can show the file,
 * "Open at line N" (JupyterLab's editor). The create form shows it under the dataset field too.
 */
export function dataLine(line: IDataLine, opener?: IDataLineOpener): HTMLDivElement {
  const el = h(
    'div',
    { class: `${CSS_PREFIX}-dataLine` },
    h('code', { class: `${CSS_PREFIX}-dataLine-where` }, `${line.path}:${line.line}`),
    ...(line.text ? [h('code', { class: `${CSS_PREFIX}-dataLine-text` }, line.text)] : [])
  );
  if (opener?.canOpen(line.path)) {
    const open = h(
      'button',
      { type: 'button', class: `${CSS_PREFIX}-button ${CSS_PREFIX}-dataLine-open`, title: `Open ${line.path} in the editor` },
      `Open at line ${line.line}`
    );
    open.addEventListener('click', () => opener.open(line));
    el.append(open);
  }
  return el;
}

/** The "Back" link to the job list. */
export function backLink(onBack: () => void): HTMLAnchorElement {
  const back = h('a', { class: `${CSS_PREFIX}-back`, href: '#', role: 'button', title: 'Back to the job list' }, '\u2039 Back');
  back.addEventListener('click', event => {
    event.preventDefault();
    onBack();
  });
  return back;
}

/** The Status table. */
export function summaryRows(job: IJobDetail, now: number): KeyValueRow[] {
  const ray = job.ray_status && job.ray_status !== job.status ? ` (Ray: ${job.ray_status})` : '';
  return [
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
    ['Elapsed', formatElapsed(jobElapsed(job, now))]
  ];
}

/** The Progress table (the latest metrics). */
export function progressRows(job: IJobDetail): KeyValueRow[] {
  const m = job.metrics;
  return [
    ['Epoch', m?.epoch === undefined || m.epoch === null ? null : `${formatNumber(m.epoch)} / ${job.epochs ?? '?'}`],
    ['Step', formatNumber(m?.step)],
    ['Last loss', formatNumber(m?.loss)],
    ['Learning rate', formatNumber(m?.learning_rate)],
    ['Tokens / s', formatNumber(m?.tokens_per_s, 5)],
    ['ETA', isActive(job.status) ? formatElapsed(m?.eta_s) : '\u2014']
  ];
}

/** `JobDetail.serving`, empty while the job has none. */
export function servingOf(job: IJobDetail): Partial<IServing> {
  return job.serving ?? {};
}

/** `JobDetail.tracking`, empty while the job reported none. */
export function trackingOf(job: IJobDetail): Partial<ITracking> {
  return job.tracking ?? {};
}

/** The Serving table. */
export function servingRows(job: IJobDetail): KeyValueRow[] {
  const serving = servingOf(job);
  return [
    ['Model path', serving.model_path],
    ['LoRA adapter path', serving.lora_adapter_path],
    ['Base model', serving.base_model]
  ];
}

/** The Tracking table. */
export function trackingRows(job: IJobDetail): KeyValueRow[] {
  const tracking = trackingOf(job);
  return [
    ['TensorBoard', tracking.tensorboard?.log_dir],
    ['MLflow', tracking.mlflow ? (tracking.mlflow.url ?? `run ${tracking.mlflow.run_id}`) : null],
    ['W&B', tracking.wandb ? (tracking.wandb.url ?? `${tracking.wandb.mode ?? ''} run in ${tracking.wandb.dir}`) : null]
  ];
}

/** The Plan table: the automatic choices, with their reasons where the plan gives them. */
export function planRows(job: IJobDetail): KeyValueRow[] {
  const plan: Partial<IPlan> = job.plan ?? {};
  const reasons = plan.reasons ?? {};
  const rows = ['method', 'precision', 'strategy', 'gradient_checkpointing', 'batching', 'optim', 'attn_implementation',
    'lora_target_modules']
    .filter(key => !['lora_target_modules', 'attn_implementation'].includes(key) || reasons[key] !== undefined)
    .map(key => [key, reasons[key] ?? (plan[key] === undefined || plan[key] === null ? null : String(plan[key]))] as KeyValueRow);
  const memory = memoryWords(job);
  return memory ? [...rows, ['memory', memory]] : rows;
}

/** "planned 1.9 GB, peak 2.1 GB": the plan's per-worker estimate and, once a worker reported it, the highest peak. */
export function memoryWords(job: IJobDetail): string | null {
  const planned = job.memory?.planned_gb ?? job.plan?.memory_per_worker_gb?.total;
  const parts = [
    typeof planned === 'number' ? `planned ${planned.toFixed(1)} GB` : null,
    typeof job.memory?.peak_bytes === 'number' ? `peak ${(job.memory.peak_bytes / 1e9).toFixed(1)} GB` : null
  ].filter(Boolean);
  return parts.length ? parts.join(', ') : null;
}

/** The Utilisation table: each worker's latest resource use ("rank 0 (host)": CPU, memory, GPU where present). */
export function utilisationRows(job: IJobDetail): KeyValueRow[] {
  const gb = (n: number | null | undefined) => (typeof n === 'number' ? `${(n / 1024 ** 3).toFixed(1)} GB` : null);
  return [...(job.utilisation ?? [])]
    .sort((a, b) => a.rank - b.rank)
    .map(u => {
      const parts = [
        typeof u.cpu_percent === 'number' ? `CPU ${Math.round(u.cpu_percent)} %` : null,
        u.rss_bytes ? `memory ${gb(u.rss_bytes)}` : null,
        typeof u.gpu_util_percent === 'number' ? `GPU ${Math.round(u.gpu_util_percent)} %` : null,
        u.gpu_memory_used_bytes
          ? `GPU memory ${gb(u.gpu_memory_used_bytes)}${u.gpu_memory_total_bytes ? ` of ${gb(u.gpu_memory_total_bytes)}` : ''}`
          : null,
        typeof u.step === 'number' ? `at step ${u.step}` : null
      ].filter(Boolean);
      return [`rank ${u.rank}${u.hostname ? ` (${u.hostname})` : ''}`, parts.join(' \u00b7 ') || null] as KeyValueRow;
    });
}

/** The Configuration table: the job's spec. */
export function configRows(job: IJobDetail): KeyValueRow[] {
  return Object.entries(job.spec ?? {}).map(([key, value]) => [key, configValue(value)] as KeyValueRow);
}

/** Options of {@link renderCheckpoints}. */
export interface ICheckpointsOptions {
  /** Adds a "Resume from here" button per checkpoint calling this. */
  onResumeFrom?: (checkpoint: ICheckpoint) => void;
  /** A resume is under way (the buttons are disabled). */
  resuming: boolean;
  /** "Export merged" for LoRA checkpoints; none when omitted. */
  exportMerged?: ExportMerged;
  /** "Try it" (chat with the checkpoint) on every checkpoint; none when omitted. */
  tryIt?: TryIt;
}

/** Fill the Checkpoints section: the folder, the list with copy buttons, and a snippet loading the latest. */
export function renderCheckpoints(container: HTMLElement, job: IJobDetail, options: ICheckpointsOptions): void {
  container.replaceChildren(
    h(
      'div',
      { class: `${VIEW_CLASS}-checkpointDir` },
      h('span', { class: `${CSS_PREFIX}-label` }, 'Checkpoint path: '),
      h('code', null, job.checkpoint_dir || '\u2014')
    )
  );
  const checkpoints = job.checkpoints ?? [];
  if (!checkpoints.length) {
    return;
  }
  const list = h('ul', { class: `${VIEW_CLASS}-checkpointList` });
  for (const ckpt of checkpoints) {
    const marks = (ckpt.marks ?? []).map(m => h('span', { class: `${VIEW_CLASS}-checkpointMark`, 'data-mark': m }, m));
    const item = h(
      'li',
      { title: ckpt.path, 'data-checkpoint': ckpt.name },
      h('span', { class: `${VIEW_CLASS}-checkpointName` }, ckpt.name),
      ...marks,
      ' ',
      h('code', null, ckpt.path),
      ' ',
      copyButton(ckpt.path),
      h('div', { class: `${VIEW_CLASS}-checkpointNumbers` }, checkpointNumbers(ckpt))
    );
    if (ckpt.snippet) {
      const snippet = copyButton(ckpt.snippet, 'Copy load code');
      snippet.classList.add(`${VIEW_CLASS}-copySnippet`);
      item.append(' ', snippet);
    }
    const onResumeFrom = options.onResumeFrom;
    if (onResumeFrom) {
      const here = h(
        'button',
        { type: 'button', class: `${CSS_PREFIX}-button ${VIEW_CLASS}-resumeHere`, title: `Resume from ${ckpt.name}` },
        'Resume from here'
      );
      here.disabled = options.resuming || isActive(job.status);
      here.addEventListener('click', () => onResumeFrom(ckpt));
      item.append(' ', here);
    }
    if (options.exportMerged && ExportMerged.applies(ckpt)) {
      item.append(' ', options.exportMerged.button(job, ckpt));
    }
    if (options.tryIt) {
      item.append(' ', options.tryIt.button(job, ckpt));
    }
    list.appendChild(item);
  }
  container.appendChild(list);
  if (options.exportMerged && checkpoints.some(c => ExportMerged.applies(c))) {
    container.appendChild(options.exportMerged.node);
  }
  if (options.tryIt) {
    container.appendChild(options.tryIt.node);
  }
  // the code loading the job's result: its final checkpoint once it has one, else the newest
  const shown = checkpoints.find(c => c.marks?.includes('epoch-final')) ?? checkpoints[checkpoints.length - 1];
  if (shown.snippet) {
    container.appendChild(h('div', { class: `${VIEW_CLASS}-snippet` }, h('pre', null, shown.snippet), copyButton(shown.snippet)));
  }
}

/** "epoch 2 · step 20 · train loss 1.234 · validation loss 1.31 · 4.1 MB" (what the checkpoint event said). */
export function checkpointNumbers(c: ICheckpoint): string {
  const parts = [
    c.epoch != null ? `epoch ${c.epoch}` : null,
    c.step != null ? `step ${c.step}` : null,
    c.train_loss != null ? `train loss ${formatNumber(c.train_loss)}` : null,
    c.eval_loss != null ? `validation loss ${formatNumber(c.eval_loss)}` : null,
    c.size_bytes != null ? formatBytes(c.size_bytes) : null
  ];
  return parts.filter(Boolean).join(' \u00b7 ');
}

/** Bytes in decimal units, as file managers show them. */
export function formatBytes(n: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) {
    n /= 1000;
    i++;
  }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

/** A button copying `text` to the clipboard. */
export function copyButton(text: string, label = 'Copy'): HTMLButtonElement {
  const button = h(
    'button',
    { type: 'button', class: `${CSS_PREFIX}-button ${CSS_PREFIX}-copy`, title: 'Copy to the clipboard' },
    label
  );
  button.addEventListener('click', () => {
    void navigator.clipboard?.writeText(text).then(
      () => (button.textContent = 'Copied'),
      () => (button.textContent = 'Copy failed')
    );
    setTimeout(() => (button.textContent = label), 1500);
  });
  return button;
}

/** A titled section of the view (`[data-section=<title>]`). */
export function section(title: string, ...body: HTMLElement[]): HTMLElement {
  return h(
    'section',
    { class: `${VIEW_CLASS}-section`, 'data-section': title.toLowerCase() },
    h('h3', null, title),
    ...body
  );
}

/** An empty key/value table (`<VIEW_CLASS>-<name>`). */
export function kvTable(name: string): HTMLTableElement {
  return h('table', { class: `${CSS_PREFIX}-kvTable ${VIEW_CLASS}-${name}` });
}

/** Replace the rows of a key/value table; empty values show as a dash. */
export function fillTable(table: HTMLTableElement, rows: KeyValueRow[]): void {
  const body = h('tbody');
  for (const [key, value] of rows) {
    const text = value === null || value === undefined || value === '' ? '\u2014' : String(value);
    body.appendChild(
      h('tr', { 'data-key': key }, h('th', { scope: 'row' }, key), h('td', { title: text }, text))
    );
  }
  table.replaceChildren(body);
}

/** A spec value as the Configuration table shows it. */
export function configValue(value: unknown): string {
  if (value === null || value === undefined) {
    return '\u2014';
  }
  if (typeof value === 'object') {
    return JSON.stringify(value);
  }
  return String(value);
}
