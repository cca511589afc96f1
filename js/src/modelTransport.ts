/**
 * `ITransport` of the notebook widgets, over the anywidget model: it reads
 * the traitlets (`jobs`, `detail`, `events`, `logs`, `schema`, `cluster`)
 * and sends actions with `model.send(...)`:
 *
 *   {action: "select", name}          a row was clicked (view set to "detail")
 *   {action: "cancel", name}          Cancel button
 *   {action: "resume", name}          Resume buttons (with `checkpoint`, `epochs`)
 *   {action: "logs", name}            the logs of `name` are wanted
 *   {action: "refresh"}               refresh jobs / detail now
 *   {action: "create", spec}          create a job from a spec
 *   {action: "plan", spec}            the pre-flight plan of a spec
 *   {action: "download", model}       "Pre-fetch model" (answered when every node has it)
 *   {action: "export", name, checkpoint, dtype}   "Export merged" of a LoRA checkpoint
 *
 * Every action also carries `request_id`; the kernel may answer with a custom
 * message `{reply_to: request_id, ok: bool, result?, error?: {code, message,
 * details}}`, otherwise the transport settles on the next matching traitlet
 * change (or after a timeout, with the current state).
 */
import {
  ICurves,
  IClusterInfo,
  IDownloadResult,
  IEventsPage,
  IExportResult,
  IJobDetail,
  IJobSpec,
  IJobSummary,
  IPreflight,
  IResumeOptions,
  ISchemaBundle,
  IJobQuery,
  ITransport,
  TransportError,
  summaryAsDetail
} from './shared';

/** The part of the anywidget model API used here. */
export interface IAnyModel {
  get(name: string): any;
  set(name: string, value: unknown): void;
  save_changes(): void;
  on(event: string, callback: (...args: any[]) => void): void;
  off(event?: string | null, callback?: ((...args: any[]) => void) | null): void;
  send(content: unknown, callbacks?: unknown, buffers?: unknown[]): void;
}

/** Default time to wait for the kernel to answer an action, in ms. */
const REPLY_TIMEOUT_MS = 15_000;

/**
 * Time to wait for the kernel to confirm a new job, in ms: the kernel runs the
 * pre-flight check on the cluster (a short Ray job, up to 120 s) before it
 * submits, which often takes longer than {@link REPLY_TIMEOUT_MS}.
 */
const CREATE_TIMEOUT_MS = 180_000;

/** Time to wait for a model download or a merged export, in ms (the kernel answers from a thread). */
const LONG_TIMEOUT_MS = 4 * 3600_000;

/** `ITransport` over an anywidget model. */
export class ModelTransport implements ITransport {
  constructor(
    readonly model: IAnyModel,
    readonly timeoutMs: number = REPLY_TIMEOUT_MS,
    readonly createTimeoutMs: number = Math.max(timeoutMs, CREATE_TIMEOUT_MS)
  ) {
    model.on('msg:custom', this._onCustom);
  }

  jobs(): IJobSummary[] {
    const jobs = this.model.get('jobs');
    return Array.isArray(jobs) ? (jobs as IJobSummary[]) : [];
  }

  detail(): IJobDetail | null {
    const detail = this.model.get('detail');
    return detail && typeof detail === 'object' ? (detail as IJobDetail) : null;
  }

  /** The detail's loss curves (`curve` traitlet: what `GET .../metrics` serves), if any. */
  curve(): ICurves | null {
    const curve = this.model.get('curve');
    return curve && typeof curve === 'object' && Array.isArray((curve as ICurves).step) ? (curve as ICurves) : null;
  }

  /** The widget's cluster (`cluster` traitlet), if any. */
  cluster(): string {
    const cluster = this.model.get('cluster');
    return typeof cluster === 'string' ? cluster : '';
  }

  async listClusters(): Promise<IClusterInfo[]> {
    const names = new Set<string>();
    if (this.cluster()) {
      names.add(this.cluster());
    }
    for (const job of this.jobs()) {
      if (job.cluster) {
        names.add(job.cluster);
      }
    }
    return [...names].map(name => ({ name, address: '', status: 'running', managed: false, resources: null }));
  }

  async listJobs(cluster: string, options: IJobQuery = {}): Promise<IJobSummary[]> {
    return this.jobs().filter(
      j => (!cluster || !j.cluster || j.cluster === cluster) && (!options.owner || j.owner === options.owner)
    );
  }

  async getJob(cluster: string, name: string): Promise<IJobDetail> {
    const current = this.detail();
    if (current?.name === name) {
      return current;
    }
    const reply = await this._request(
      { action: 'select', name, cluster },
      () => (this.detail()?.name === name ? this.detail() : undefined),
      ['change:detail']
    );
    const detail = (reply as IJobDetail | undefined) ?? this.detail();
    if (!detail || detail.name !== name) {
      throw new TransportError(`Job ${name} is not available`, 404, 'not_found');
    }
    return detail;
  }

  async createJob(cluster: string, spec: IJobSpec): Promise<IJobDetail> {
    const name = spec.name;
    const reply = await this._request(
      { action: 'create', spec: { ...spec, cluster } },
      () => {
        const detail = this.detail();
        if (name && detail?.name === name) {
          return detail;
        }
        const job = name ? this.jobs().find(j => j.name === name) : undefined;
        return job ? summaryAsDetail(job) : undefined;
      },
      ['change:detail', 'change:jobs'],
      false,
      this.createTimeoutMs
    );
    if (!reply) {
      throw new TransportError('The kernel did not confirm the new job', 0, 'timeout');
    }
    return reply as IJobDetail;
  }

  async cancelJob(cluster: string, name: string): Promise<IJobDetail> {
    const reply = await this._request(
      { action: 'cancel', name, cluster },
      () => {
        const detail = this.detail();
        return detail?.name === name ? detail : undefined;
      },
      ['change:detail', 'change:jobs'],
      true
    );
    const detail = (reply as IJobDetail | undefined) ?? this.detail();
    if (detail && detail.name === name) {
      return detail;
    }
    const job = this.jobs().find(j => j.name === name);
    if (job) {
      return summaryAsDetail(job);
    }
    throw new TransportError(`Job ${name} is not available`, 404, 'not_found');
  }

  async resumeJob(cluster: string, name: string, options: IResumeOptions = {}): Promise<IJobDetail> {
    const reply = await this._request({ action: 'resume', name, cluster, ...options }, () => undefined, []);
    if (!reply) {
      throw new TransportError('The kernel did not confirm the resumed job', 0, 'timeout');
    }
    return reply as IJobDetail;
  }

  async planJob(cluster: string, spec: IJobSpec): Promise<IPreflight> {
    const reply = await this._request({ action: 'plan', spec: { ...spec, cluster } }, () => undefined, []);
    if (!reply) {
      throw new TransportError('The kernel did not answer the pre-flight check', 0, 'timeout');
    }
    return reply as IPreflight;
  }

  async downloadModel(cluster: string, model: string, revision?: string): Promise<IDownloadResult> {
    const reply = await this._request({ action: 'download', model, revision, cluster }, () => undefined, [], false, LONG_TIMEOUT_MS);
    if (!reply) {
      throw new TransportError(`The kernel did not answer the download of ${model}`, 0, 'timeout');
    }
    return reply as IDownloadResult;
  }

  async exportCheckpoint(cluster: string, name: string, checkpoint: string, dtype: string): Promise<IExportResult> {
    const reply = await this._request(
      { action: 'export', name, checkpoint, dtype, cluster },
      () => undefined,
      [],
      false,
      LONG_TIMEOUT_MS
    );
    if (!reply) {
      throw new TransportError(`The kernel did not answer the export of ${checkpoint}`, 0, 'timeout');
    }
    return reply as IExportResult;
  }

  async getLogs(cluster: string, name: string): Promise<string> {
    const logs = this.model.get('logs');
    if (typeof logs === 'string' && logs) {
      return logs;
    }
    this._send({ action: 'logs', name, cluster });
    return typeof logs === 'string' ? logs : '';
  }

  /** The widget syncs the server's curves (`curve`), not raw events: nothing newer than `since` here. */
  async getEvents(_cluster: string, _name: string, since: number): Promise<IEventsPage> {
    return { events: [], next: since };
  }

  /** The whole curve of the `curve` traitlet (the kernel refreshes it; it cannot filter: `after_step` null). */
  async getMetrics(): Promise<ICurves> {
    const curve = this.curve();
    return curve
      ? { ...curve, after_step: null }
      : { count: 0, after_step: null, last_step: null, step: [], loss: [], epochs: [], validation: [], latest: null };
  }

  async getSchema(): Promise<ISchemaBundle> {
    const schema = this.model.get('schema');
    if (schema && typeof schema === 'object' && (schema as ISchemaBundle).job_spec) {
      return schema as ISchemaBundle;
    }
    throw new TransportError('The job schema is not available in this widget', 0, 'unsupported');
  }

  /** Ask the kernel to refresh. */
  refresh(): void {
    this._send({ action: 'refresh' });
  }

  /** Send an action (a `request_id` is added). Returns the id. */
  send(content: Record<string, unknown>): string {
    return this._send(content);
  }

  dispose(): void {
    this.model.off('msg:custom', this._onCustom);
    for (const pending of this._pending.values()) {
      pending.settle(undefined);
    }
    this._pending.clear();
  }

  private _send(content: Record<string, unknown>): string {
    const id = `${Date.now().toString(36)}-${(this._counter++).toString(36)}`;
    this.model.send({ ...content, request_id: id });
    return id;
  }

  /**
   * Send an action and settle on the kernel's reply, on the first state
   * change for which `check` returns a value, or after `timeoutMs` (undefined,
   * or `check()` when `settleOnTimeout`).
   */
  private _request(
    content: Record<string, unknown>,
    check: () => unknown,
    events: string[],
    settleOnTimeout = false,
    timeoutMs = this.timeoutMs
  ): Promise<unknown> {
    return new Promise((resolve, reject) => {
      let id = '';
      const cleanup = () => {
        clearTimeout(timer);
        for (const event of events) {
          this.model.off(event, onChange);
        }
        this._pending.delete(id);
      };
      const onChange = () => {
        const value = check();
        if (value !== undefined) {
          cleanup();
          resolve(value);
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        resolve(settleOnTimeout ? check() : undefined);
      }, timeoutMs);
      for (const event of events) {
        this.model.on(event, onChange);
      }
      id = this._send(content);
      this._pending.set(id, {
        settle: value => {
          cleanup();
          resolve(value);
        },
        fail: err => {
          cleanup();
          reject(err);
        }
      });
    });
  }

  private _onCustom = (msg: unknown): void => {
    if (!msg || typeof msg !== 'object') {
      return;
    }
    const m = msg as { reply_to?: unknown; ok?: unknown; result?: unknown; error?: unknown };
    if (typeof m.reply_to !== 'string') {
      return;
    }
    const pending = this._pending.get(m.reply_to);
    if (!pending) {
      return;
    }
    if (m.ok === false) {
      const error = (m.error ?? {}) as { status?: unknown };
      pending.fail(
        TransportError.fromBody(typeof error.status === 'number' ? error.status : 400, m.error, 'The kernel rejected the request')
      );
    } else {
      pending.settle(m.result);
    }
  };

  private _counter = 0;
  private _pending = new Map<string, { settle: (value: unknown) => void; fail: (err: unknown) => void }>();
}
