"""What the service answers: job summaries and details (REST bodies, widget traitlets, CLI --json), and the other
REST bodies (clusters, pages of jobs, events and logs, loss curves, the pre-flight answer, a TensorBoard's address).

Each is served as `model_dump(mode="json")` (every field, defaults included), so the front-end's types
(js/src/shared/generated/api.ts, see jupyter_cleverthis/schemas.py) have every field required; `X | None`
is where the value may be null. Models with extra="allow" keep what a newer runtime adds.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from cleverthis_runtime.event_models import UtilisationEvent

from ..spec import JobStatus

# -- clusters -----------------------------------------------------------------------------------------------------

ClusterStatus = Literal["running", "starting", "stopped", "unreachable"]


class Record(BaseModel):
    """A part of a job's detail that was a plain dict before it had a model: `d.plan["method"]` and
    `d.plan.get("method")` still read it (user code written then keeps working), besides `d.plan.method`."""

    def __getitem__(self, key: str) -> Any:
        if key in type(self).model_fields:
            return getattr(self, key)
        if self.model_extra and key in self.model_extra:
            return self.model_extra[key]
        raise KeyError(key)  # a method name ("model_dump") is not a key either

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


class ResourceUsage(Record):
    """One kind of resource of a cluster or node (CPU, GPU: counts; memory: bytes)."""

    total: float
    free: float


class NodeUse(Record):
    """What one job's placement groups hold on a node."""

    job: str
    CPU: float | None = None
    GPU: float | None = None


class NodeResources(Record):
    """One alive node. `name` (its address), `head` and `used_by` are filled where the state API was asked
    (`GET /clusters/{cluster}/nodes`, a queued job's reason); the cluster list gives the resources only."""

    node_id: str
    name: str | None = None
    ip: str | None = None
    head: bool = False
    CPU: ResourceUsage | None = None
    GPU: ResourceUsage | None = None
    memory: ResourceUsage | None = None
    used_by: list[NodeUse] | None = None


class NodeList(BaseModel):
    """`GET /clusters/{cluster}/nodes`: the alive nodes, the head first."""

    nodes: list[NodeResources]


class ClusterResources(Record):
    """The cluster's resources (probes.cluster_resources): per kind, then per node; a kind it lacks is null."""

    CPU: ResourceUsage | None = None
    GPU: ResourceUsage | None = None
    memory: ResourceUsage | None = None
    nodes: list[NodeResources] = []


class ClusterState(BaseModel):
    """`POST /clusters/{cluster}/up|down`: the cluster's public config (never its token) and status."""

    name: str
    address: str
    managed: bool
    status: ClusterStatus


class ClusterInfo(ClusterState):
    """A `GET /clusters` item; `resources` is null while the cluster is not running (or does not say)."""

    resources: ClusterResources | None = None


class ClusterList(BaseModel):
    """`GET /clusters`; `user` is who asks, as the owner of the jobs they create is named (under token-only
    authentication Jupyter's identity is a random id: then the server's own user)."""

    clusters: list[ClusterInfo]
    user: str | None = None
    server_root: str | None = None  # the folder the Jupyter server shows (its files open in the lab's editor)


class Checkpoint(BaseModel):
    """A checkpoint the job wrote, with its numbers; `marks`: which of the folder's links point at it (`best`:
    the lowest validation loss, `epoch-final`: the job's last, `latest`: the newest written); `snippet`: Python that
loads it (with PeftModel too where it holds a LoRA adapter)."""

    name: str
    path: str
    epoch: int | None = None
    step: int | None = None
    train_loss: float | None = None
    eval_loss: float | None = None
    adapter_path: str | None = None
    size_bytes: int | None = None
    #: a LoRA checkpoint: whether it holds merged weights beside its adapter (best and epoch-final do)
    merged: bool | None = None
    marks: list[str] = []
    snippet: str | None = None


class Metrics(BaseModel):
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    loss: float | None = None
    learning_rate: float | None = None
    tokens_per_s: float | None = None
    eta_s: float | None = None


class JobSummary(BaseModel):
    name: str
    cluster: str
    status: JobStatus
    ray_status: str
    job_type: str | None = None
    framework: str | None = None
    base_model: str | None = None
    dataset_path: str | None = None
    epochs: int | None = None
    batch_size: int | None = None
    workers: int | None = None
    owner: str | None = None
    created_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    elapsed_s: float | None = None
    message: str | None = None
    parent: str | None = Field(None, description="The sweep this job is a trial of")
    trials: int | None = Field(None, description="A sweep's number of trials")


class QueuedRequest(Record):
    workers: int
    per_worker: dict[str, float]
    total: dict[str, float]
    strategy: str = "PACK"


class QueuedReason(Record):
    """Why a queued job waits (detail.why_queued, placement.explain): its request against each node's free
    resources. `message` is the sentence the views show, `blockers` says it node by node (and which jobs hold
    what), `suggestions` what would let it start; `fits_now` / `fits_ever`: how many such workers could be placed
    now / on the empty cluster (null where the cluster does not say)."""

    requested: QueuedRequest
    free: dict[str, float | None]
    nodes: list[NodeResources] | None = None
    message: str
    blockers: list[str] = []
    suggestions: list[str] = []
    fits_now: int | None = None
    fits_ever: int | None = None


class Plan(Record):
    """The automatic choices (the runtime's `plan` event, the pre-flight's `plan`) and why (`reasons` per field)."""

    model_config = ConfigDict(extra="allow")
    method: str | None = None
    precision: str | None = None
    strategy: str | None = None
    gradient_checkpointing: bool | None = None
    memory_estimate_gb: dict[str, float] = {}
    reasons: dict[str, str] = {}
    parameters: float | None = None
    chat_template: str | None = None
    lora_target_modules: str | list[str] | None = None
    batching: str | None = None  # packed, grouped (similar lengths, padded) or padded
    weights_dtype: str | None = None  # the dtype the weights load in: bf16/fp16 (a frozen base), fp32, 4bit/8bit
    checkpoint_gb: dict[str, Any] | None = None  # the disk one checkpoint takes: each, merged (LoRA), keep
    optim: str | None = None  # the TrainingArguments optimizer
    attn_implementation: str | None = None  # the attention the model trains with (None: the model's own)
    # per worker, GB: weights, gradients, optimizer, activations, process and their total
    memory_per_worker_gb: dict[str, float] = {}


class MemoryUse(Record):
    """The plan's per-worker memory beside the highest peak a worker measured at the end of its run (the `memory`
    events): `text` says it in words ("memory: planned 1.9 GB, peak 2.1 GB")."""

    planned_gb: float | None = None
    peak_bytes: int | None = None
    rank: int | None = None  # the worker of the highest peak
    text: str


class Serving(Record):
    """What the Model Serving page asks for: the model's path, and the LoRA adapter's with the base it applies to."""

    model_path: str
    lora_adapter_path: str | None = None
    base_model: str | None = None


class TensorBoardTracking(Record):
    """`viewer`: this Jupyter server can show the folder in TensorBoard ("Open in TensorBoard")."""

    model_config = ConfigDict(extra="allow")
    log_dir: str | None = None
    viewer: bool = False


class MlflowTracking(Record):
    model_config = ConfigDict(extra="allow")
    run_id: str | None = None
    experiment_id: str | None = None
    tracking_uri: str | None = None
    url: str | None = None


class WandbTracking(Record):
    model_config = ConfigDict(extra="allow")
    run_id: str | None = None
    dir: str | None = None
    url: str | None = None
    mode: str | None = None


class Tracking(Record):
    """Where the run's records went (its report_to; the runtime's `tracking` event); null: not reported to."""

    tensorboard: TensorBoardTracking | None = None
    mlflow: MlflowTracking | None = None
    wandb: WandbTracking | None = None


# The spec a job was submitted with, read back from its runtime_env (runtime_env.spec_json): kept as that dict (so
# that the spec of a job from another version still shows), served as what it is, a JobSpec as accepted (its
# training_config holds the keys the user set): `$defs/JobSpec` of the api schema (schemas.API_MODELS).
SubmittedSpec = Annotated[dict[str, Any], WithJsonSchema({"$ref": "#/$defs/JobSpec"}, mode="serialization")]


class Fix(BaseModel):
    """A change to a failed job's spec that its error's advice names ("Retry with QLoRA"): `patch` holds the
    spec fields to set (training_config merged key by key, a null removing a key), `why` says what it saves."""

    label: str
    patch: dict[str, Any]
    why: str | None = None
    spec: SubmittedSpec | None = None  # the job's spec with the patch applied (what the create form opens with)


class Hint(BaseModel):
    """A slow or stuck job's hint (service/slowness.py): `kind` (data_loading, gpu_utilisation, one_worker,
    stuck_initializing) and the sentence with the page's advice."""

    kind: str
    message: str


class CurveDiagnosis(Record):
    """The page's loss-curve interpretation of the job's step losses so far (service/diagnosis.py)."""

    pattern: Literal["smooth", "oscillating", "spiking", "near_zero", "flat"]
    advice: str
    points: int


class DataLine(BaseModel):
    """The line of a dataset file a dataset error is about (1-based), with its text as read (cut to 200 chars)."""

    path: str
    line: int
    text: str | None = None


class JobDetail(JobSummary):
    spec: SubmittedSpec | None = None
    phase: str | None = None
    checkpoint_dir: str | None = None
    checkpoints: list[Checkpoint] = []
    metrics: Metrics | None = None
    error: str | None = None
    error_kind: str | None = None
    error_line: DataLine | None = None
    advice: str | None = None
    # what would fix the failure, as spec changes ("Retry with QLoRA"; service/fixes.py)
    fixes: list[Fix] = []
    traceback: str | None = None
    queued_reason: QueuedReason | None = None
    serving: Serving | None = None
    log_url: str | None = None
    plan: Plan | None = None
    tracking: Tracking | None = None
    # early_stopping_patience ran out: the job succeeded, stopped early (`stop_reason` says why, with the best)
    stopped_early: bool = False
    stop_reason: str | None = None
    # The latest `utilisation` event of each worker, by rank (with its index `i` in the job's event log).
    utilisation: list[UtilisationEvent] = []
    # planned and measured peak memory per worker (None until a worker reports its peak)
    memory: MemoryUse | None = None
    # what the loss curve shows, with the page's advice (None while too few steps to tell)
    curve: CurveDiagnosis | None = None
    # slow throughput or a long initialization, with the page's advice (service/slowness.py)
    hints: list[Hint] = []

class JobPage(BaseModel):
    """`GET /clusters/{cluster}/jobs`: a page of summaries, and how many jobs matched in all."""

    jobs: list[JobSummary]
    total: int


# -- a job's events, logs, curves, TensorBoard ------------------------------------------------------------------------

class EventsPage(BaseModel):
    """`GET .../jobs/{name}/events?since=N`: the job's events after index N, in log order, each one of
    cleverthis_runtime.event_models (js/src/shared/generated/events.ts) with its index `i` in the job's event log;
    `next` is the last index sent (`since` when none)."""

    events: list[dict[str, Any]]
    next: int


class LogsPage(BaseModel):
    """`GET .../jobs/{name}/logs?offset=&limit=`: the log text from `offset`; `next` continues it, `size` is the
    whole log's length (characters)."""

    text: str
    offset: int
    next: int
    size: int


class EpochPoint(BaseModel):
    epoch: int | None = None
    step: int | None = None
    train_loss: float | None = None


class ValidationPoint(BaseModel):
    epoch: float | None = None
    step: int | None = None
    eval_loss: float | None = None
    perplexity: float | None = None


class Curves(BaseModel):
    """`GET .../jobs/{name}/metrics[?after_step=S]`: the step-loss series downsampled to at most max_points
    (`count`: the steps in all; with after_step, only the points after S), the epoch ends, the validation points,
    the latest step reported (`last_step`) and its figures."""

    count: int
    after_step: float | None = None
    last_step: float | None = None
    step: list[float]
    loss: list[float]
    epochs: list[EpochPoint]
    validation: list[ValidationPoint]
    latest: Metrics | None = None


# The REST bodies that are not a job's projection (the helper jobs' answers, templates, a spec's export, a
# comparison, the TensorBoard link) live in helper_models.py; served from here as well.
from .helper_models import (  # noqa: E402, F401
    ChatTemplateChoice,
    Comparison,
    DatasetFacts,
    DownloadResult,
    ExportResult,
    FieldError,
    Preflight,
    PreviewRun,
    SpecDifference,
    SpecExport,
    TargetModulesChoice,
    Template,
    TemplateList,
    TensorBoardLink,
)
