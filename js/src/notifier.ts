/**
 * Job-end notifications: one background poll of the running clusters' job lists, independent of the Training
 * panel (it runs while the panel is closed). A job is followed when the signed-in user owns it (wherever it was
 * started: the sidebar, a notebook's `%train`, the CLI) or when it was opened or created in this window. When a
 * followed job is seen active and then ended, `notify` is called once with what to tell the user; jobs that had
 * already ended when first seen are never announced. DOM-free: `index.ts` turns notices into JupyterLab
 * notifications.
 */
import { Poll } from '@lumino/polling';

import { IJobSummary, ITransport, errorMessage, isActive } from './shared';

/** What one notification says. */
export interface IJobNotice {
  kind: 'success' | 'error' | 'info';
  cluster: string;
  name: string;
  status: string;
  /** One or two sentences: the outcome, and for a failure the triage headline and its advice. */
  message: string;
}

/** Options of {@link JobNotifier}. */
export interface IJobNotifierOptions {
  transport: ITransport;
  /** Shows a notice (a JupyterLab notification with an "Open" action, in the lab). */
  notify: (notice: IJobNotice) => void;
  /** Seconds between polls (default 5). */
  interval?: number;
  /** Whether notifications are on (the `notifications` setting); polls pause while off. */
  enabled?: () => boolean;
}

/** Longest message a notification shows in full. */
const MAX_MESSAGE = 280;

export class JobNotifier {
  constructor(options: IJobNotifierOptions) {
    this._transport = options.transport;
    this._notify = options.notify;
    this._enabled = options.enabled ?? (() => true);
    this._poll = new Poll({
      auto: false,
      factory: () => this.check(),
      frequency: { interval: Math.max(1000, (options.interval ?? 5) * 1000), backoff: true, max: 60_000 },
      name: 'jupyter-cleverthis:notifier',
      standby: 'when-hidden'
    });
  }

  /** Follow a job opened or created in this window (`status`: what it was when seen; default queued). */
  watch(cluster: string, name: string, status = 'queued'): void {
    const key = Private.key(cluster, name);
    this._watched.add(key);
    if (!this._seen.has(key) || isActive(status)) {
      this._seen.set(key, status);
    }
  }

  /** Start polling. */
  start(): void {
    void this._poll.start();
  }

  /** One round: list the running clusters' jobs and announce each followed job that has ended since. */
  async check(): Promise<void> {
    if (!this._enabled()) {
      return;
    }
    const clusters = await this._transport.listClusters();
    const me = this._transport.user ?? null;
    for (const cluster of clusters) {
      if (cluster.status !== 'running') {
        continue;
      }
      try {
        // The user's own jobs in one request; jobs of others opened here, one by one while they run.
        const mine = me ? await this._transport.listJobs(cluster.name, { owner: me }) : [];
        for (const job of mine) {
          await this._see(cluster.name, job, me);
        }
        const listed = new Set(mine.map(j => Private.key(cluster.name, j.name)));
        for (const key of this._watched) {
          const [c, name] = key.split('\u0000');
          if (c === cluster.name && !listed.has(key) && isActive(this._seen.get(key) ?? '')) {
            await this._see(c, await this._transport.getJob(c, name), me);
          }
        }
      } catch {
        continue; // a cluster that stops between requests, a job deleted meanwhile: next round
      }
    }
  }

  dispose(): void {
    this._poll.dispose();
  }

  private async _see(cluster: string, job: IJobSummary, me: string | null): Promise<void> {
    const key = Private.key(cluster, job.name);
    const before = this._seen.get(key);
    this._seen.set(key, job.status);
    const followed = this._watched.has(key) || (!!me && job.owner === me);
    if (!followed || before === undefined || !isActive(before) || isActive(job.status)) {
      return;
    }
    this._notify(await this._notice(cluster, job));
  }

  private async _notice(cluster: string, job: IJobSummary): Promise<IJobNotice> {
    const base = { cluster, name: job.name, status: job.status };
    const name = `\u201c${job.name}\u201d`;
    if (job.status === 'succeeded') {
      return { ...base, kind: 'success', message: `Training job ${name} succeeded.` };
    }
    if (job.status === 'cancelled') {
      return { ...base, kind: 'info', message: `Training job ${name} was cancelled.` };
    }
    let why = job.message ?? '';
    try {
      const detail = await this._transport.getJob(cluster, job.name);
      why = [detail.error?.split('\n')[0], detail.advice].filter(Boolean).join(' ') || why;
    } catch (err) {
      why = why || errorMessage(err);
    }
    const message = `Training job ${name} failed${why ? `: ${why}` : '.'}`;
    return {
      ...base,
      kind: 'error',
      message: message.length > MAX_MESSAGE ? `${message.slice(0, MAX_MESSAGE - 1)}\u2026` : message
    };
  }

  private readonly _transport: ITransport;
  private readonly _notify: (notice: IJobNotice) => void;
  private readonly _enabled: () => boolean;
  private readonly _poll: Poll;
  private readonly _seen = new Map<string, string>();
  private readonly _watched = new Set<string>();
}

namespace Private {
  export function key(cluster: string, name: string): string {
    return `${cluster}\u0000${name}`;
  }
}
