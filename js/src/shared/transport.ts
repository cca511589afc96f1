/**
 * The data-access interface of the shared views.  The JupyterLab panel uses
 * the REST implementation (`RestTransport`, in `restTransport.ts`); the
 * notebook widgets use one built over the anywidget model (`widget.ts`).
 */
import type { IChatAnswer, IChatRequest } from './tryIt';
import {
  IClusterInfo,
  IClusterState,
  IComparison,
  IDownloadResult,
  IEventsPage,
  IExportResult,
  IFieldError,
  IJobDetail,
  IJobSpec,
  IJobSummary,
  INodeResources,
  IPreflight,
  IResumeOptions,
  ISchemaBundle,
  ISpecExport,
  ITemplate,
  ICurves,
  ITensorBoard,
  ISweepDetail
} from './model';

/** Filters of {@link ITransport.listJobs}. */
export interface IJobQuery {
  owner?: string;
}

/** Options of {@link ITransport.getMetrics}. */
export interface IMetricsQuery {
  maxPoints: number;
  afterStep?: number | null;
}

/** Callbacks of {@link ITransport.tailLogs}. */
export interface ILogTailHandlers {
  onText(chunk: string): void;
  onClose(): void;
}

/** Everything the views need from the server. */
export interface ITransport {
  listClusters(): Promise<IClusterInfo[]>;
  /** The cluster's jobs, newest first (`owner`: only that user's). */
  listJobs(cluster: string, options?: IJobQuery): Promise<IJobSummary[]>;
  getJob(cluster: string, name: string): Promise<IJobDetail>;
  createJob(cluster: string, spec: IJobSpec): Promise<IJobDetail>;
  cancelJob(cluster: string, name: string): Promise<IJobDetail>;
  /** A new job continuing `name` from its latest (or the given) checkpoint. */
  resumeJob(cluster: string, name: string, options?: IResumeOptions): Promise<IJobDetail>;
  /** The pre-flight plan of a spec, computed on the cluster without submitting. */
  planJob(cluster: string, spec: IJobSpec): Promise<IPreflight>;
  getLogs(cluster: string, name: string): Promise<string>;
  getEvents(cluster: string, name: string, since: number): Promise<IEventsPage>;
  /**
   * The job's loss curves, downsampled by the server to at most `maxPoints` (`afterStep`: only the points after
   * that step; a transport that cannot filter answers the whole curve, with `after_step` null).
   */
  getMetrics?(cluster: string, name: string, options: IMetricsQuery): Promise<ICurves>;
  getSchema(): Promise<ISchemaBundle>;
  /** Start (`up`) or stop (`down`) a cluster jupyter-cleverthis manages; absent where it cannot. */
  clusterAction?(cluster: string, action: 'up' | 'down'): Promise<IClusterState>;
  /** Pre-fetch a Hub model into every node's cache (`model.download`); absent where it cannot. */
  downloadModel?(cluster: string, model: string, revision?: string): Promise<IDownloadResult>;
  /** Export merged: a checkpoint as a standalone fp16/bf16 model folder on the cluster; absent where it cannot. */
  exportCheckpoint?(cluster: string, name: string, checkpoint: string, dtype: string): Promise<IExportResult>;
  /**
   * Chat with a job's checkpoints (`POST .../chat`): `onText` receives the answer's pieces as they are generated;
   * resolves with every checkpoint's answer. Absent where the transport cannot.
   */
  chat?(
    cluster: string,
    name: string,
    request: IChatRequest,
    onText: (index: number, text: string) => void
  ): Promise<IChatAnswer[]>;
  /** A sweep's trials compared (`GET .../sweep`); absent where the transport cannot. */
  getSweep?(cluster: string, name: string): Promise<ISweepDetail>;
  /** The spec of a sweep's best trial, as a new job's (`GET .../sweep/best`); absent where it cannot. */
  getBestSpec?(cluster: string, name: string): Promise<ISpecExport>;
  /** Where the specs of jobs `names` differ, key by key (`GET .../compare`); absent where it cannot. */
  compareJobs?(cluster: string, names: readonly string[]): Promise<IComparison>;
  /** The cluster's alive nodes, the head first (`GET /clusters/{cluster}/nodes`); absent where unknown. */
  listNodes?(cluster: string): Promise<INodeResources[]>;
  /** The spec a job was submitted with, and the same as YAML (`%%train` reads it); absent where unknown. */
  getSpec?(cluster: string, name: string): Promise<ISpecExport>;
  /**
   * Follow a job's log: `onText` gets the whole log so far, then each addition; `onClose` once the tail ends
   * (the job ended, or no tail could be opened). Absent where the transport has no live tail.
   */
  tailLogs?(cluster: string, name: string, handlers: ILogTailHandlers): { close(): void };
  /** Saved specs, by name; absent where there is no template store. */
  listTemplates?(): Promise<ITemplate[]>;
  /** Save a spec (less its job name) as a template, replacing one of that name. */
  saveTemplate?(name: string, spec: Record<string, unknown>): Promise<ITemplate>;
  /** Who the server says is asking (the owner of the jobs they create), once the clusters were listed. */
  readonly user?: string | null;
  /** Start (or find) the TensorBoard of the job's checkpoint folder; absent where it cannot be shown. */
  openTensorBoard?(cluster: string, name: string): Promise<ITensorBoard>;
}

/**
 * An error answered by the server (`{code, message, details}` with a 4xx/5xx
 * status) or raised by the transport itself (status 0 for network errors).
 */
export class TransportError extends Error {
  constructor(
    message: string,
    readonly status: number = 0,
    readonly code: string = 'error',
    readonly details: Record<string, unknown> = {}
  ) {
    super(message);
    this.name = 'TransportError';
  }

  /** The per-field errors of an `invalid_spec` (422) answer; empty otherwise. */
  get fieldErrors(): IFieldError[] {
    const errors = (this.details as { errors?: unknown }).errors;
    if (!Array.isArray(errors)) {
      return [];
    }
    return errors
      .filter(
        (e): e is { field?: unknown; loc?: unknown; message?: unknown; msg?: unknown; path?: unknown; line?: unknown; text?: unknown } =>
          typeof e === 'object' && e !== null
      )
      .map(e => ({
        field: String(
          e.field ?? (Array.isArray(e.loc) ? e.loc.filter(p => p !== 'body').join('.') : '')
        ),
        message: String(e.message ?? e.msg ?? 'invalid value'),
        // a dataset error on one line of a file: where (the form offers to open it there)
        ...(typeof e.path === 'string' && typeof e.line === 'number'
          ? { path: e.path, line: e.line, text: typeof e.text === 'string' ? e.text : null }
          : {})
      }));
  }

  /**
   * Build an error from a parsed error body (`{code, message, details}`)
   * or from anything else the server answered.
   */
  static fromBody(status: number, body: unknown, fallback: string): TransportError {
    if (typeof body === 'object' && body !== null) {
      const b = body as { code?: unknown; message?: unknown; details?: unknown };
      const details =
        typeof b.details === 'object' && b.details !== null
          ? (b.details as Record<string, unknown>)
          : {};
      return new TransportError(
        typeof b.message === 'string' && b.message ? b.message : fallback,
        status,
        typeof b.code === 'string' ? b.code : 'error',
        details
      );
    }
    return new TransportError(fallback, status);
  }
}

/** A short human message for any error a transport may throw. */
/** What the user reads: the server's sentence, never an HTTP status code. */
export function errorMessage(err: unknown): string {
  if (err instanceof TransportError) {
    return err.message;
  }
  if (err instanceof Error) {
    return err.message;
  }
  return String(err);
}
