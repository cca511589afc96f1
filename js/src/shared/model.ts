/**
 * Typed model of the objects served by the jupyter-cleverthis REST API
 * (`<baseUrl>cleverthis/api/...`) and mirrored by the notebook widgets'
 * traitlets.  Pure types plus a few helpers; no DOM, no JupyterLab.
 */

/** Lifecycle status of a job as reported by the server. */
export type JobStatus =
  | 'queued'
  | 'initializing'
  | 'running'
  | 'succeeded'
  | 'failed'
  | 'cancelled';

/** All statuses, in lifecycle order. */
export const JOB_STATUSES: readonly JobStatus[] = [
  'queued',
  'initializing',
  'running',
  'succeeded',
  'failed',
  'cancelled'
];

/** Statuses from which a job can still be cancelled. */
export const ACTIVE_STATUSES: readonly JobStatus[] = ['queued', 'initializing', 'running'];

/** Whether a job in this status is still active (can be cancelled, will change). */
export function isActive(status: string): boolean {
  return (ACTIVE_STATUSES as readonly string[]).includes(status);
}

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

/** Kind of job; set by the Create Job dialog's tab. */
export type JobType = 'train' | 'finetune';

/** `GET /clusters/{cluster}/jobs` item. */
export interface IJobSummary {
  name: string;
  cluster: string;
  status: JobStatus | string;
  ray_status?: string | null;
  job_type: JobType | string;
  framework?: string | null;
  base_model?: string | null;
  dataset_path?: string | null;
  epochs?: number | null;
  batch_size?: number | null;
  workers?: number | null;
  owner?: string | null;
  /** Unix seconds. */
  created_at: number;
  started_at?: number | null;
  ended_at?: number | null;
  elapsed_s?: number | null;
  message?: string | null;
}

/** A saved checkpoint of a job. */
export interface ICheckpoint {
  name: string;
  path: string;
  epoch?: number | null;
}

/** Latest training metrics of a job. */
export interface IJobMetrics {
  step?: number | null;
  loss?: number | null;
  learning_rate?: number | null;
  tokens_per_s?: number | null;
  eta_s?: number | null;
  epoch?: number | null;
}

/** `GET /clusters/{cluster}/jobs/{name}`. */
export interface IJobDetail extends IJobSummary {
  spec: IJobSpec | Record<string, unknown>;
  phase?: string | null;
  checkpoint_dir?: string | null;
  checkpoints?: ICheckpoint[];
  metrics?: IJobMetrics | null;
  error?: string | null;
  /** Classified failure (out_of_memory, dataset, ...) and the product page's advice for it. */
  error_kind?: string | null;
  advice?: string | null;
  traceback?: string | null;
  /** Why a queued job waits: the resources it asked for against what is free. */
  queued_reason?: { message?: string; requested?: Record<string, unknown>; free?: Record<string, unknown> } | null;
  /** The automatic choices (method, precision, strategy, ...) with their reasons. */
  plan?: { reasons?: Record<string, string>; [key: string]: unknown } | null;
  /** What the Model Serving page asks for. */
  serving?: { model_path?: string; lora_adapter_path?: string; base_model?: string } | null;
  /** Where the run's records went (report_to): TensorBoard folder, MLflow run, W&B run. */
  tracking?: {
    /** `viewer`: this Jupyter server can show the folder in TensorBoard ("Open in TensorBoard"). */
    tensorboard?: { log_dir?: string | null; viewer?: boolean };
    mlflow?: { run_id?: string; experiment_id?: string; tracking_uri?: string; url?: string | null };
    wandb?: { run_id?: string; dir?: string; url?: string | null; mode?: string };
  } | null;
  /** early_stopping_patience ran out: the job succeeded, stopped early, for this reason. */
  stopped_early?: boolean;
  stop_reason?: string | null;
  log_url?: string;
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

/** Body of `POST /clusters/{cluster}/jobs`. */
export interface IJobSpec {
  name?: string;
  cluster?: string;
  base_model?: string;
  dataset_path?: string;
  job_type?: JobType | string;
  framework?: string;
  epochs?: number;
  batch_size?: number;
  workers?: number;
  training_config?: Record<string, unknown>;
  [key: string]: unknown;
}

/** An event of a job's event stream. */
export interface IJobEvent {
  /** Position in the job's event log (from 1); `since` / `next` of the events API count these. */
  i?: number;
  /** Sequence number within the event's source (`src`). */
  seq?: number;
  type: 'phase' | 'step' | 'epoch' | 'checkpoint' | 'error' | string;
  [key: string]: unknown;
}

/** A `type: "step"` event. */
export interface IStepEvent extends IJobEvent {
  type: 'step';
  step: number;
  loss?: number | null;
  learning_rate?: number | null;
  tokens_per_s?: number | null;
  eta_s?: number | null;
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
    const step = event['step'];
    const loss = event['eval_loss'];
    if (event.type === 'validation' && typeof step === 'number' && typeof loss === 'number' && Number.isFinite(loss)) {
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
