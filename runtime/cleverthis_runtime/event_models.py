"""The events' schema: one pydantic model per event `type`, shared by the runtime (which emits them) and the
service (which parses them); `json_schema()` is what the front-end's types are generated from.

Every event carries `src` (the emitting process: "driver", "rank0", "rank1-a2" after a restart), `seq` (a
per-source counter) and `t` (wall-clock seconds). Models allow extra fields: a newer runtime may add one, and
an older service keeps what it does not know.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from .event_base import Event
from .helper_events import (  # the helper jobs' events (pre-flight, download, export, chat)
    ChatAnswerEvent,
    ChatEvent,
    ChatTextEvent,
    DownloadDoneEvent,
    DownloadEvent,
    DownloadProgressEvent,
    ExportEvent,
    PreflightEvent,
)
from .sweep_events import SweepEvent, SweepResultEvent


class Phase(str, enum.Enum):
    """Where a job is, as its `phase` events say (in roughly the order a job passes them)."""

    initializing = "initializing"
    downloading = "downloading"
    starting_workers = "starting_workers"
    loading_data = "loading_data"
    loading_model = "loading_model"
    running = "running"
    cancelling = "cancelling"
    cancel_checkpoint_written = "cancel_checkpoint_written"
    training_done = "training_done"
    cancelled = "cancelled"
    failed = "failed"
    succeeded = "succeeded"

    def __str__(self) -> str:  # f-strings and json show the word
        return self.value


QUEUED_PHASES = frozenset({Phase.initializing, Phase.starting_workers})
INITIALIZING_PHASES = frozenset({Phase.loading_data, Phase.loading_model, Phase.downloading})
FINAL_PHASES = frozenset({Phase.cancelled, Phase.failed, Phase.succeeded})


class PhaseEvent(Event):
    type: Literal["phase"]
    phase: Phase
    pid: int | None = None
    workers: int | None = None
    framework: str | None = None
    model: str | None = None
    base_model: str | None = None
    cache_dir: str | None = None
    total_steps: int | None = None
    epochs: float | None = None
    start_epoch: float | None = None
    start_step: int | None = None
    grace_s: float | None = None
    reason: str | None = None
    checkpoint: str | None = None
    seconds: float | None = None
    message: str | None = None


class ConfigEvent(Event):
    type: Literal["config"]
    training_config: dict[str, Any]
    training_config_file: str | None = None
    checkpoint_dir: str
    dataset_format: str | None = None
    dataset_formats: dict[str, int] = Field(default_factory=dict)  # records of each format
    examples: int | None = None
    resumed_from: str | None = None
    resumed_step: int | None = None
    resumed_partial: bool | None = None
    original_base_model: str | None = None
    start_epoch: int = 0
    max_failures: int | None = None


class WorkerEvent(Event):
    type: Literal["worker"]
    rank: int
    world_size: int
    attempt: int = 1
    pid: int | None = None
    hostname: str | None = None
    node_id: str | None = None
    framework: str | None = None


class ErrorEvent(Event):
    """The job's (or a worker's) classified failure; `kind` names the page's troubleshooting class."""

    type: Literal["error"]
    kind: str | None = None
    error_type: str | None = None
    message: str = ""
    traceback: str | None = None
    rank: int | None = None
    fatal: bool | None = None
    path: str | None = None  # a dataset error on one line of a file: that file, line (1-based) and its text
    line: int | None = None
    text: str | None = None


class WorkerErrorEvent(Event):
    """A worker failed and Ray Train may restart the group."""

    type: Literal["worker_error"]
    rank: int | None = None
    kind: str | None = None
    error_type: str | None = None
    message: str = ""
    fatal: bool | None = None


class DatasetEvent(Event):
    type: Literal["dataset"]
    format: str
    formats: dict[str, int] = Field(default_factory=dict)  # records of each format (several conversational ones)
    examples: int  # training records (after a validation split)
    validation_examples: int = 0
    rows: int | None = None  # training rows: one per record, or raw text's blocks, or packed rows
    truncated: int | None = 0  # None: counted as the rows are read (tokenized lazily)
    max_seq_length: int | None = None
    tokenized: str | None = None  # lazily (per batch), up front (for packing), or blocks (raw text)


class PackingEvent(Event):
    type: Literal["packing"]
    rows: int
    validation_rows: int = 0
    max_seq_length: int | None = None


class PlanEvent(Event):
    """The automatic choices and why (`reasons` per field)."""

    type: Literal["plan"]
    method: str
    precision: str
    strategy: str
    gradient_checkpointing: bool = False
    memory_estimate_gb: dict[str, float] = Field(default_factory=dict)
    reasons: dict[str, str] = Field(default_factory=dict)
    parameters: float | None = None
    chat_template: str | None = None
    lora_target_modules: str | list[str] | None = None
    parallelism: dict[str, Any] | None = None  # tensor parallelism: mesh, groups, split modules (parallel.layout)
    batching: str | None = None  # packed, grouped or padded (plan.Plan.batching)
    start: str | None = None  # scratch, pretrained (the base model's weights) or checkpoint
    optim: str | None = None  # the TrainingArguments optimizer
    attn_implementation: str | None = None  # the attention the model trains with (None: the model's own)
    # per worker, GB: weights, gradients, optimizer, activations, process and their total (memory.per_worker)
    memory_per_worker_gb: dict[str, float] = Field(default_factory=dict)
    weights_dtype: str | None = None  # the dtype the weights loaded in (plan.weights_dtype)
    checkpoint_gb: dict[str, Any] | None = None  # the disk one checkpoint takes (plan.checkpoint_disk)


class MemoryEvent(Event):
    """A worker's peak memory at the end of its run beside the plan's per-worker estimate (memory.py): the peak
    resident size on CPU, the device memory on a GPU (torch's peak reserved plus the CUDA context)."""

    type: Literal["memory"]
    rank: int
    planned_gb: float | None = None
    peak_bytes: int
    peak_rss_bytes: int | None = None
    gpu_peak_allocated_bytes: int | None = None
    gpu_peak_reserved_bytes: int | None = None
    gpu_context_bytes: int | None = None


class WarningEvent(Event):
    type: Literal["warning"]
    message: str
    checkpoint: str | None = None


class ResumeEvent(Event):
    type: Literal["resume"]
    checkpoint: str
    exact: bool
    completed_epochs: int = 0
    global_step: int | None = None
    partial: bool = False
    base_model: str | None = None
    base_loaded: str | None = None


class RecoveryEvent(Event):
    """Workers restarted after a failure and continue from the job's newest checkpoint."""

    type: Literal["recovery"]
    attempt: int
    max_failures: int | None = None
    checkpoint: str | None = None
    checkpoint_name: str | None = None
    global_step: int | None = None
    removed_partial_writes: list[str] = Field(default_factory=list)
    message: str | None = None


class CheckpointEvent(Event):
    """A checkpoint written (`epoch-N`, `step-N`), or a link pointed (`best`, `epoch-final`: `target`)."""

    type: Literal["checkpoint"]
    name: str
    path: str
    epoch: int | None = None
    step: int | None = None
    partial: bool | None = None
    train_loss: float | None = None
    eval_loss: float | None = None
    base_model: str | None = None
    adapter_path: str | None = None
    size_bytes: int | None = None
    framework: str | None = None
    target: str | None = None
    #: a LoRA checkpoint: whether it holds the merged weights (best and epoch-final do) beside the adapter
    merged: bool | None = None
    #: the checkpoint was deleted (keep_checkpoints); a later event of the same name replaces the earlier one
    deleted: bool | None = None


class StrategyEvent(Event):
    """What actually runs: the wrapper the Trainer built (torch) or the distribution strategy (tensorflow)."""

    type: Literal["strategy"]
    strategy: str | None = None
    framework: str | None = None
    world_size: int | None = None
    replicas: int | None = None
    wrapper: str | None = None
    model_class: str | None = None
    fsdp2_sharded: bool | None = None
    deepspeed: bool | None = None
    zero_stage: int | None = None
    activation_checkpointing: bool | None = None  # the model recomputes its activations in the backward pass
    tensor_parallel: dict[str, Any] | None = None  # the mesh transformers built, what it split
    pipeline: dict[str, Any] | None = None  # rank 0's pipeline stage: its layers, whether it holds the head
    # the speed the plan expects (monitoring.expected_speed): measured matmul FLOP/s per worker, model FLOPs/token
    device_flops: float | None = None
    flops_per_token: float | None = None
    expected_tokens_per_s: float | None = None


class TrackingEvent(Event):
    """Where the run's records went: one entry per tracker (tensorboard, mlflow, wandb)."""

    type: Literal["tracking"]
    tensorboard: dict[str, Any] | None = None
    mlflow: dict[str, Any] | None = None
    wandb: dict[str, Any] | None = None


class StepEvent(Event):
    type: Literal["step"]
    step: int
    total_steps: int | None = None
    epoch: float | None = None
    loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    tokens_per_s: float | None = None
    eta_s: float | None = None
    # mean seconds per step since the last step event: fetching the batch, and forward/backward/optimizer
    data_s: float | None = None
    compute_s: float | None = None


class EpochEvent(Event):
    type: Literal["epoch"]
    epoch: int
    step: int | None = None
    train_loss: float | None = None
    elapsed_s: float | None = None


class ValidationEvent(Event):
    type: Literal["validation"]
    epoch: float | None = None
    step: int | None = None
    eval_loss: float
    perplexity: float | None = None


class EarlyStopEvent(Event):
    type: Literal["early_stop"]
    reason: str
    step: int | None = None
    epoch: float | None = None
    best_eval_loss: float | None = None
    best_step: int | None = None
    checkpoint: str | None = None


class UtilisationEvent(Event):
    """One worker's resource use (CPU %, memory; the GPU's from torch and NVML when it has one)."""

    type: Literal["utilisation"]
    rank: int
    hostname: str | None = None
    pid: int | None = None
    step: int | None = None
    epoch: float | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    gpu_index: int | None = None
    gpu_util_percent: float | None = None
    gpu_memory_allocated_bytes: int | None = None
    gpu_memory_used_bytes: int | None = None
    gpu_memory_total_bytes: int | None = None
    gpu_error: str | None = None


MODELS: tuple[type[Event], ...] = (
    PhaseEvent, ConfigEvent, WorkerEvent, ErrorEvent, WorkerErrorEvent, DatasetEvent, PackingEvent, PlanEvent,
    WarningEvent, ResumeEvent, RecoveryEvent, CheckpointEvent, StrategyEvent, TrackingEvent, StepEvent, EpochEvent,
    ValidationEvent, EarlyStopEvent, UtilisationEvent, MemoryEvent, DownloadProgressEvent, DownloadDoneEvent,
    DownloadEvent, PreflightEvent, ExportEvent, ChatTextEvent, ChatAnswerEvent, ChatEvent, SweepEvent, SweepResultEvent,
)
BY_TYPE: dict[str, type[Event]] = {m.model_fields["type"].annotation.__args__[0]: m for m in MODELS}  # type: ignore[union-attr]

AnyEvent = Annotated[
    PhaseEvent | ConfigEvent | WorkerEvent | ErrorEvent | WorkerErrorEvent | DatasetEvent | PackingEvent
    | PlanEvent | WarningEvent | ResumeEvent | RecoveryEvent | CheckpointEvent | StrategyEvent | TrackingEvent
    | StepEvent | EpochEvent | ValidationEvent | EarlyStopEvent | UtilisationEvent | MemoryEvent | DownloadProgressEvent
    | DownloadDoneEvent | DownloadEvent | PreflightEvent | ExportEvent | ChatTextEvent | ChatAnswerEvent
    | ChatEvent | SweepEvent | SweepResultEvent,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyEvent)


class EventFieldError(ValueError):
    """An event the runtime was about to emit does not match its model (a programming error)."""


def check(event: dict[str, Any]) -> Event:
    """The typed event of a dict about to be emitted; an event type without a model is refused."""
    model = BY_TYPE.get(str(event.get("type")))
    if model is None:
        raise EventFieldError(f"event type {event.get('type')!r} has no model in event_models.py")
    try:
        return model.model_validate(event)
    except ValidationError as e:
        raise EventFieldError(f"event {event.get('type')!r}: {e}") from e


def parse(obj: dict[str, Any]) -> Event:
    """The typed event of a parsed log line. An unknown type, or a known one that does not validate (another
    runtime version, a user's print), stays a plain `Event` with every field kept: nothing is dropped."""
    model = BY_TYPE.get(str(obj.get("type")))
    if model is not None:
        try:
            return model.model_validate(obj)
        except ValidationError:
            pass
    return Event.model_validate(obj)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of every event (a union discriminated by `type`), for the front-end's generated types."""
    schema = _ADAPTER.json_schema()
    schema["title"] = "CleverthisEvent"
    return schema
