/**
 * Typed model of the objects served by the jupyter-cleverthis REST API
 * (`<baseUrl>cleverthis/api/...`) and mirrored by the notebook widgets'
 * traitlets.  Pure types plus a few helpers; no DOM, no JupyterLab.
 *
 * The payloads the server's pydantic models describe are not written here:
 * they are the types generated from those models (`./generated`, see
 * `js/scripts/build-types.mjs`), re-exported under the names the views use.
 * What is hand-written below has no pydantic model on the server: the
 * resume request, the `GET /schema` bundle and the JSON Schema subset.
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

/** A sweep's trials compared (`GET .../sweep`). */
export type ISweepDetail = Api.SweepDetail;

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

/** Status of a Ray cluster. */
export type ClusterStatus = Api.ClusterState['status'];

/** One resource (CPU, GPU: counts; memory: bytes) of a cluster or node (`ResourceUsage`). */
export type IResourceUsage = Api.ResourceUsage;

/** A cluster's resources per kind (null: it has none of that kind), then per node (`ClusterResources`). */
export type IClusterResources = Api.ClusterResources;

/** `POST /clusters/{cluster}/up|down` (`ClusterState`). */
export type IClusterState = Api.ClusterState;

/** One alive node: free and total resources, and what each job's workers hold on it (`NodeResources`). */
export type INodeResources = Api.NodeResources;

/** A change to a failed job's spec that its error's advice names ("Retry with QLoRA"; `Fix`). */
export type IFix = Api.Fix;

/** `POST /clusters/{cluster}/download`: the pre-fetch's answer per node (`DownloadResult`). */
export type IDownloadResult = Api.DownloadResult;

/** Whether a base model is a Hub id to pre-fetch (`org/name`), not a path on the nodes. */
export function isHubId(model: string | null | undefined): boolean {
  return !!model && !/^[/.~]/.test(model) && /^[A-Za-z0-9][\w.-]*\/[\w.-]+$/.test(model);
}

/** `POST .../jobs/{name}/export`: the standalone merged model folder written on the cluster (`ExportResult`). */
export type IExportResult = Api.ExportResult;

/** `GET /clusters` item (`ClusterInfo`); `resources` is null while the cluster is not running. */
export type IClusterInfo = Api.ClusterInfo;

/** `GET /clusters` (`ClusterList`). */
export type IClusterList = Api.ClusterList;

/** `GET /clusters/{cluster}/compare?jobs=a,b`: where the jobs' specs differ, key by key (`Comparison`). */
export type IComparison = Api.Comparison;

/** A saved spec ("Save as template"; `GET /templates` item, `Template`). */
export type ITemplate = Api.Template;

/** `GET .../jobs/{name}/spec`: the submitted spec, and as YAML (`SpecExport`). */
export type ISpecExport = Api.SpecExport;

/** `GET /clusters/{cluster}/jobs` (`JobPage`). */
export type IJobPage = Api.JobPage;

/** `JobDetail.queued_reason`: why a queued job waits, what it asked for against what is free (`QueuedReason`). */
export type IQueuedReason = Api.QueuedReason;

/** `JobDetail.plan` and the pre-flight's `plan`: the automatic choices with their reasons (`Plan`). */
export type IPlan = Api.Plan;

/** `JobDetail.serving`: what the Model Serving page asks for (`Serving`). */
export type IServing = Api.Serving;

/** `JobDetail.tracking`: where the run's records went (report_to): TensorBoard folder, MLflow run, W&B run. */
export type ITracking = Api.Tracking;

/** `JobDetail.utilisation` item: a worker's latest resource use (`UtilisationEvent`). */
export type IUtilisation = Api.UtilisationEvent;

/** `GET .../jobs/{name}/tensorboard`: the TensorBoard of a job's records, behind the server's proxy. */
export type ITensorBoard = Api.TensorBoardLink;

/** `GET .../jobs/{name}/logs` (`LogsPage`). */
export type ILogsPage = Api.LogsPage;

/** `GET .../jobs/{name}/metrics[?after_step=]`: the loss curves, downsampled (`Curves`). */
export type ICurves = Api.Curves;

/** `POST /clusters/{cluster}/plan`: the pre-flight answer (`Preflight`). */
export type IPreflight = Api.Preflight;

/** One run of an example in the pre-flight preview (`PreviewRun`). */
export type IPreviewRun = Api.PreviewRun;

/**
 * One field error of a 422 `invalid_spec` answer or of the pre-flight (`FieldError`); the form's own checks give
 * only the field and the message, a dataset error on one line also the line (`path`, `line`, `text`).
 */
export type IFieldError = Pick<Api.FieldError, 'field' | 'message'> & Partial<Omit<Api.FieldError, 'field' | 'message'>>;

/** The line of a dataset file a dataset error is about (`DataLine`). */
export type IDataLine = Api.DataLine;

/** Opens a dataset file at a line (JupyterLab's editor); `canOpen` says whether this server can show the path. */
export interface IDataLineOpener {
  canOpen(path: string): boolean;
  open(line: IDataLine): void;
}

/**
 * `GET /clusters/{cluster}/jobs/{name}/events?since=N` (`EventsPage`): the
 * model leaves the events untyped; they are the generated event union.
 */
export type IEventsPage = Omit<Api.EventsPage, 'events'> & { events: IJobEvent[] };

// ---- Hand-written: no pydantic model on the server ----

/**
 * Body of `POST .../jobs/{name}/resume`: epochs (default: those that remain)
 * and the checkpoint (default: the latest); the handler checks it field by field.
 */
export interface IResumeOptions {
  epochs?: number;
  checkpoint?: string;
}

/**
 * `GET /schema` (`jupyter_cleverthis.schemas.schema_bundle()`, also the
 * CreateJobForm widget's `schema` traitlet): JSON Schema documents, typed
 * by the meta-schema subset below, not instances of a model.
 */
export interface ISchemaBundle {
  job_spec: IJSONSchema;
  training_config?: IJSONSchema;
  /** The server's refresh interval (s); absent in the widget's traitlet. */
  refresh_interval_s?: number;
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
    spec: null,
    phase: null,
    checkpoint_dir: null,
    checkpoints: [],
    metrics: null,
    error: null,
    error_kind: null,
    error_line: null,
    advice: null,
    fixes: [],
    traceback: null,
    queued_reason: null,
    serving: null,
    log_url: null,
    plan: null,
    tracking: null,
    stopped_early: false,
    stop_reason: null,
    utilisation: [],
    memory: null,
    curve: null,
    hints: []
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
