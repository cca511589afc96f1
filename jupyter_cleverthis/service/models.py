"""What the service answers: job summaries and details (REST bodies, widget traitlets, CLI --json)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ..spec import JobStatus


class Checkpoint(BaseModel):
    name: str
    path: str
    epoch: int | None = None
    step: int | None = None
    train_loss: float | None = None
    eval_loss: float | None = None
    adapter_path: str | None = None


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


class JobDetail(JobSummary):
    spec: dict[str, Any] | None = None
    phase: str | None = None
    checkpoint_dir: str | None = None
    checkpoints: list[Checkpoint] = []
    metrics: Metrics | None = None
    error: str | None = None
    error_kind: str | None = None
    advice: str | None = None
    traceback: str | None = None
    queued_reason: dict[str, Any] | None = None
    serving: dict[str, Any] | None = None
    log_url: str | None = None
    plan: dict[str, Any] | None = None
    # where the run's records went: {"tensorboard": {"log_dir"}, "mlflow": {"run_id", "url", ...}, "wandb": {...}}
    tracking: dict[str, Any] | None = None
    # early_stopping_patience ran out: the job succeeded, stopped early (`stop_reason` says why, with the best)
    stopped_early: bool = False
    stop_reason: str | None = None
    # The latest `utilisation` event of each worker (rank, cpu_percent, rss_bytes; GPU figures on CUDA).
    utilisation: list[dict[str, Any]] = []
