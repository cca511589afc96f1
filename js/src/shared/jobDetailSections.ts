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
import { ICheckpoint, IJobDetail, IPlan, IServing, ITracking, isActive } from './model';

/** The class of the detail view's root; its parts' classes start with it. */
export const VIEW_CLASS = `${CSS_PREFIX}-JobDetail`;

/** A row of a key/value table. */
export type KeyValueRow = [string, string | number | null | undefined];

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
  return ['method', 'precision', 'strategy', 'gradient_checkpointing', 'lora_target_modules']
    .filter(key => key !== 'lora_target_modules' || reasons[key] !== undefined)
    .map(key => [key, reasons[key] ?? (plan[key] === undefined || plan[key] === null ? null : String(plan[key]))] as KeyValueRow);
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
    const item = h(
      'li',
      { title: ckpt.path, 'data-checkpoint': ckpt.name },
      h('span', null, ckpt.name),
      ' ',
      h('code', null, ckpt.path),
      ' ',
      copyButton(ckpt.path)
    );
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
    list.appendChild(item);
  }
  container.appendChild(list);
  const path = servingOf(job).model_path ?? checkpoints[checkpoints.length - 1].path;
  const snippet = `from transformers import AutoModelForCausalLM, AutoTokenizer\nmodel = AutoModelForCausalLM.from_pretrained(${JSON.stringify(path)})\ntokenizer = AutoTokenizer.from_pretrained(${JSON.stringify(path)})`;
  container.appendChild(h('div', { class: `${VIEW_CLASS}-snippet` }, h('pre', null, snippet), copyButton(snippet)));
}

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
