/**
 * Typed model of the objects served by the jupyter-cleverthis REST API
 * (`<baseUrl>cleverthis/api/...`) and mirrored by the notebook widgets'
 * traitlets.  Pure types plus a few helpers; no DOM, no JupyterLab.
 *
 * The payloads the server's pydantic models describe are not written here:
 * they are the types generated from those models (`./generated`, see
 * `js/scripts/build-types.mjs`), re-exported under the names the views use.
 * What is hand-written below has no pydantic model on the server.
 */
import type * as Api from './generated/api';
import type * as Events from './generated/events';

/** Lifecycle status of a job as reported by the server. */
export type JobStatus = Api.JobStatus;

/** All statuses, in lifecycle order. */
export const JOB_STATUSES: readonly JobStatus[] = [
  'queued',
  'initializing',
  'running',
  'succeeded',
  'failed',
  'cancelled'
] satisfies readonly JobStatus[];

/** Statuses from which a job can still be cancelled. */
export const ACTIVE_STATUSES: readonly JobStatus[] = ['queued', 'initializing', 'running'];

/** Whether a job in this status is still active (can be cancelled, will change). */
export function isActive(status: string): boolean {
  return (ACTIVE_STATUSES as readonly string[]).includes(status);
}

/** Kind of job; set by the Create Job dialog's tab. */
export type JobType = NonNullable<Api.JobSpec['job_type']>;

/** `GET /clusters/{cluster}/jobs` item (`JobSummary`). */
export type IJobSummary = Api.JobSummary;

/** A saved checkpoint of a job (`Checkpoint`). */
export type ICheckpoint = Api.Checkpoint;

/** Latest training metrics of a job (`Metrics`). */
export type IJobMetrics = Api.Metrics;

/** `GET /clusters/{cluster}/jobs/{name}` (`JobDetail`). */
export type IJobDetail = Api.JobDetail;

/** Body of `POST /clusters/{cluster}/jobs` (`JobSpec`, as validated: fields with defaults may be left out). */
export type IJobSpec = Api.JobSpec;

/** The `training_config` of a spec (`TrainingConfig`). */
export type ITrainingConfig = Api.TrainingConfig;

/** An event of a job's event stream (one model per `type`), with its position `i` in the job's event log. */
export type IJobEvent = Events.CleverthisEvent & {
  /** Position in the job's event log (from 1); `since` / `next` of the events API count these. */
  i?: number;
};

/** A `type: "step"` event. */
export type IStepEvent = Events.StepEvent & { i?: number };

/** A `type: "validation"` event. */
export type IValidationEvent = Events.ValidationEvent & { i?: number };

/** Where a job is, as its `phase` events say. */
export type JobPhase = Events.Phase;

// ---- Hand-written: no pydantic model on the server (dicts it builds) ----

/** Status of a Ray cluster. */
export type ClusterStatus = 'running' | 'stopped' | 'unreachable';

/** One resource (CPU, GPU, memory...) of a cluster. */
export interface IResourceUsage {
  total: number;
  free: number;
}

/** `GET /clusters` item. */
export interface IClusterInfo {
  name: string;
  address: string;
  status: ClusterStatus | string;
  managed: boolean;
  /** Null while the cluster is not running. */
  resources: Record<string, IResourceUsage> | null;
}

/**
 * What the views read of `JobDetail`'s `dict[str, Any]` fields (the model
 * does not type them): why a queued job waits, the resources it asked for
 * against what is free.
 */
export interface IQueuedReason {
  message?: string;
  requested?: Record<string, unknown>;
  free?: Record<string, unknown>;
}

/** `JobDetail.plan`: the automatic choices (method, precision, strategy, ...) with their reasons. */
export interface IPlan {
  reasons?: Record<string, string>;
  [key: string]: unknown;
}

/** `JobDetail.serving`: what the Model Serving page asks for. */
export interface IServing {
  model_path?: string;
  lora_adapter_path?: string;
  base_model?: string;
}

/** `JobDetail.tracking`: where the run's records went (report_to): TensorBoard folder, MLflow run, W&B run. */
export interface ITracking {
  /** `viewer`: this Jupyter server can show the folder in TensorBoard ("Open in TensorBoard"). */
  tensorboard?: { log_dir?: string | null; viewer?: boolean };
  mlflow?: { run_id?: string; experiment_id?: string; tracking_uri?: string; url?: string | null };
  wandb?: { run_id?: string; dir?: string; url?: string | null; mode?: string };
}

/** The TensorBoard of a job's checkpoint folder, behind the server's proxy. */
export interface ITensorBoard {
  /** Where to open it (same origin: the server's base URL). */
  url: string;
  log_dir: string;
  /** The job's run in it. */
  run: string;
}

/** Options of a resume: epochs (default: those that remain) and the checkpoint (default: the latest). */
export interface IResumeOptions {
  epochs?: number;
  checkpoint?: string;
}

/** `GET /clusters/{cluster}/jobs/{name}/events?since=N`. */
export interface IEventsPage {
  events: IJobEvent[];
  next: number;
}

/** `GET /schema`. */
export interface ISchemaBundle {
  job_spec: IJSONSchema;
  training_config?: IJSONSchema;
}

/** One field error of a 422 `invalid_spec` answer. */
export interface IFieldError {
  field: string;
  message: string;
}

/** The subset of JSON Schema (as emitted by pydantic v2) the form generator reads. */
export interface IJSONSchema {
  type?: string | string[];
  title?: string;
  description?: string;
  default?: unknown;
  enum?: unknown[];
  const?: unknown;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  format?: string;
  properties?: Record<string, IJSONSchema>;
  required?: string[];
  items?: IJSONSchema;
  anyOf?: IJSONSchema[];
  oneOf?: IJSONSchema[];
  allOf?: IJSONSchema[];
  $ref?: string;
  $defs?: Record<string, IJSONSchema>;
  definitions?: Record<string, IJSONSchema>;
  readOnly?: boolean;
  [key: string]: unknown;
}

/** Whether an event is a step event carrying a numeric loss. */
export function isStepEvent(event: IJobEvent): event is IStepEvent {
  return event.type === 'step' && typeof event.step === 'number';
}

/** A placeholder detail built from a summary while the full detail loads. */
export function summaryAsDetail(job: IJobSummary): IJobDetail {
  return {
    ...job,
    spec: {},
    phase: null,
    checkpoint_dir: null,
    checkpoints: [],
    metrics: null,
    error: null,
    error_kind: null,
    advice: null,
    traceback: null,
    queued_reason: null,
    serving: null,
    log_url: null,
    plan: null,
    tracking: null,
    stopped_early: false,
    stop_reason: null,
    utilisation: []
  };
}

/** A point of the loss curve. */
export interface ILossPoint {
  step: number;
  loss: number;
}

/**
 * Extract the step-loss series from a list of events, sorted by step, one
 * point per step (the last event for a step wins).
 */
export function lossSeries(events: readonly IJobEvent[]): ILossPoint[] {
  const byStep = new Map<number, number>();
  for (const event of events) {
    if (isStepEvent(event) && typeof event.loss === 'number' && Number.isFinite(event.loss)) {
      byStep.set(event.step, event.loss);
    }
  }
  return sortedPoints(byStep);
}

/**
 * The validation-loss series (`validation` events, at epoch ends and every
 * `eval_steps`), sorted by the optimizer step it was measured at.
 */
export function validationSeries(events: readonly IJobEvent[]): ILossPoint[] {
  const byStep = new Map<number, number>();
  for (const event of events) {
    if (event.type !== 'validation') {
      continue;
    }
    const { step, eval_loss: loss } = event;
    if (typeof step === 'number' && typeof loss === 'number' && Number.isFinite(loss)) {
      byStep.set(step, loss);
    }
  }
  return sortedPoints(byStep);
}

/** Merge two series by step (the second wins on a shared step). */
export function mergeSeries(a: readonly ILossPoint[], b: readonly ILossPoint[]): ILossPoint[] {
  return sortedPoints(new Map<number, number>([...a, ...b].map(p => [p.step, p.loss])));
}

function sortedPoints(byStep: Map<number, number>): ILossPoint[] {
  return [...byStep.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([step, loss]) => ({ step, loss }));
}
