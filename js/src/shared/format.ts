/**
 * Formatting helpers and tiny DOM helpers shared by all views.
 */
import { IDownloadResult, IJobSummary, isActive } from './model';

/** CSS class prefix of every element this package creates. */
export const CSS_PREFIX = 'jp-CleverThis';

/**
 * Format a duration in seconds: `42s`, `3m 07s`, `2h 05m`, `3d 04h`.
 * Negative, NaN and missing values format as an em dash.
 */
export function formatElapsed(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds) || seconds < 0) {
    return '\u2014';
  }
  const s = Math.floor(seconds);
  if (s < 60) {
    return `${s}s`;
  }
  const pad = (n: number) => String(n).padStart(2, '0');
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m}m ${pad(s % 60)}s`;
  }
  const h = Math.floor(m / 60);
  if (h < 24) {
    return `${h}h ${pad(m % 60)}m`;
  }
  const d = Math.floor(h / 24);
  return `${d}d ${pad(h % 24)}h`;
}

/**
 * Elapsed seconds of a job.  Active jobs with a start time are counted up to
 * `nowS` so the value moves between polls; otherwise the server's
 * `elapsed_s` is used.
 */
export function jobElapsed(job: IJobSummary, nowS: number = Date.now() / 1000): number | null {
  if (isActive(job.status) && typeof job.started_at === 'number') {
    return Math.max(0, nowS - job.started_at);
  }
  if (typeof job.elapsed_s === 'number') {
    return job.elapsed_s;
  }
  if (typeof job.started_at === 'number' && typeof job.ended_at === 'number') {
    return Math.max(0, job.ended_at - job.started_at);
  }
  return null;
}

/** Format a unix-seconds timestamp as a short local date-time. */
export function formatTimestamp(unixSeconds: number | null | undefined): string {
  if (typeof unixSeconds !== 'number' || !Number.isFinite(unixSeconds)) {
    return '\u2014';
  }
  const d = new Date(unixSeconds * 1000);
  const pad = (n: number) => String(n).padStart(2, '0');
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
  );
}

/** Format a number with a bounded number of significant digits; dash when missing. */
export function formatNumber(value: unknown, digits = 4): string {
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    return '\u2014';
  }
  if (Number.isInteger(value)) {
    return String(value);
  }
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) {
    return value.toExponential(Math.max(0, digits - 1));
  }
  return String(Number(value.toPrecision(digits)));
}

/** Human label of a job type. */
export function jobTypeLabel(jobType: string | null | undefined): string {
  switch (jobType) {
    case 'train':
      return 'Training';
    case 'finetune':
      return 'Fine-tuning';
    default:
      return jobType ? String(jobType) : '\u2014';
  }
}

/** Attributes accepted by {@link h}. */
export type Attrs = Record<string, string | number | boolean | null | undefined>;

/**
 * Create an element: `h('div', {class: 'x', 'data-field': 'epochs'}, child, 'text')`.
 * `null`/`undefined`/`false` attributes are skipped; `true` sets an empty attribute.
 */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs?: Attrs | null,
  ...children: (Node | string | null | undefined | false)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) {
        continue;
      }
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) {
      continue;
    }
    el.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return el;
}

/**
 * Render a status badge: `<span class="jp-CleverThis-badge jp-CleverThis-badge-running">running</span>`.
 */
export function renderStatusBadge(status: string | null | undefined): HTMLSpanElement {
  const span = document.createElement('span');
  updateStatusBadge(span, status);
  return span;
}

/** Update an existing badge element in place (used by the table to avoid re-creating nodes). */
export function updateStatusBadge(span: HTMLElement, status: string | null | undefined): void {
  const value = status ? String(status) : 'unknown';
  const safe = value.toLowerCase().replace(/[^a-z0-9_-]/g, '');
  span.className = `${CSS_PREFIX}-badge ${CSS_PREFIX}-badge-${safe || 'unknown'}`;
  span.textContent = value;
  span.title = `Status: ${value}`;
  span.dataset.status = value;
}

/**
 * A name for a copy of job `name` that none of `taken` has: "<name>-2", or the next number when `name` already
 * ends in one ("run-2" -> "run-3"); at most 64 characters, like every job name.
 */
export function cloneName(name: string, taken: readonly string[]): string {
  const match = /^(.*?)-(\d{1,3})$/.exec(name);
  const base = match && match[1] ? match[1] : name;
  const used = new Set(taken);
  used.add(name);
  for (let n = match ? Number(match[2]) + 1 : 2; ; n++) {
    const suffix = `-${n}`;
    const candidate = base.slice(0, 64 - suffix.length).replace(/[._-]+$/, '') + suffix;
    if (!used.has(candidate)) {
      return candidate;
    }
  }
}

/** A pre-fetch's answer in words: where the model now is, or what failed (the lab notification, the widget). */
export function downloadSummary(r: IDownloadResult): string {
  const where = r.nodes.map(n => `${n.hostname ?? n.node_ip}: ${n.status}`).join(', ');
  const failed = r.error ?? r.nodes.filter(n => n.status === 'error').map(n => n.error).join('; ');
  return r.ok ? `${r.model} is in the model cache of every node (${where}).` : `${r.model} is not on every node: ${failed}`;
}
