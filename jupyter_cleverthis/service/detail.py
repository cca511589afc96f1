"""From what Ray and the runtime say to what the service answers: a job's events projected onto `JobSummary`
and `JobDetail`, why a job is queued, and its loss curves.

Pure functions of Ray's job record (`info`), the job's parsed events and, for a queued job, the cluster's
resources: reading them is the job service's part (jobs.py).
"""

from __future__ import annotations

import os
import time
from typing import Any

from pydantic import ValidationError

from cleverthis_runtime.event_models import (
    FINAL_PHASES,
    INITIALIZING_PHASES,
    QUEUED_PHASES,
    Phase,
    UtilisationEvent,
)
from cleverthis_runtime.memory import words
from cleverthis_runtime.triage import advice_for, classify

from ..spec import JobStatus
from . import tensorboard
from .diagnosis import curve_diagnosis
from .fixes import fixes_for
from .models import (
    Checkpoint,
    CurveDiagnosis,
    DataLine,
    JobDetail,
    JobSummary,
    MemoryUse,
    Metrics,
    Plan,
    QueuedReason,
    Serving,
    Tracking,
)
from .placement import explain
from .ray_client import ray_status, short_message
from .runtime_env import spec_of
from .slowness import hints

RAY_TO_STATUS = {
    "PENDING": JobStatus.QUEUED,
    "SUCCEEDED": JobStatus.SUCCEEDED,
    "FAILED": JobStatus.FAILED,
    "STOPPED": JobStatus.CANCELLED,
}
# The phase sets (event_models.py): while Ray says RUNNING, a job whose workers have not started is still waiting
# for capacity (QUEUED_PHASES), while they load data and weights it is initializing (INITIALIZING_PHASES), then
# running.  FINAL_PHASES are the driver's last word: workers' log lines reach the driver's log later than its own,
# so a worker phase (cancel_checkpoint_written) can follow "cancelled" in the log; a final phase is never replaced.
PLAN_KEYS = ("method", "precision", "strategy", "gradient_checkpointing", "memory_estimate_gb", "reasons",
             "parameters", "chat_template", "lora_target_modules", "batching", "weights_dtype",
             "checkpoint_gb", "optim", "attn_implementation", "memory_per_worker_gb")
TRACKERS = ("tensorboard", "mlflow", "wandb")
LATEST_KEYS = ("step", "total_steps", "epoch", "loss", "learning_rate", "tokens_per_s", "eta_s")


def phase_of(evs: list[dict[str, Any]]) -> str | None:
    """The job's current phase: the last phase event, except that a final phase is never replaced."""
    phase = None
    for ev in evs:
        if ev["type"] == "phase" and phase not in FINAL_PHASES:
            phase = ev.get("phase")
    return phase


def status_of(info: Any, evs: list[dict[str, Any]]) -> JobStatus:
    """Ray's status, except RUNNING: there the runtime's phase events tell queued / initializing / running apart."""
    status = RAY_TO_STATUS.get(ray_status(info))
    if status is not None:
        return status
    phases = [e.get("phase") for e in evs if e["type"] == "phase"]
    status = JobStatus.QUEUED
    if any(p in INITIALIZING_PHASES for p in phases):
        status = JobStatus.INITIALIZING
    if any(p not in QUEUED_PHASES and p not in INITIALIZING_PHASES for p in phases):
        status = JobStatus.RUNNING
    return status


def status_needs_log(info: Any, phase_evs: list[dict[str, Any]]) -> bool:
    """Whether a job's stored phase events cannot tell its status yet (Ray says RUNNING, no phase past
    initializing stored): only then does the job list read the job's log."""
    return (RAY_TO_STATUS.get(ray_status(info)) is None
            and not any(e.get("phase") not in QUEUED_PHASES | INITIALIZING_PHASES for e in phase_evs))


def summary_of(cluster: str, info: Any, evs: list[dict[str, Any]]) -> JobSummary:
    """A job's summary from Ray's record and its (phase) events."""
    status = status_of(info, evs)
    created = info.start_time / 1000 if info.start_time else None
    ended = info.end_time / 1000 if info.end_time else None
    started = next((e.get("t") for e in evs if e["type"] == "phase" and e.get("phase") == Phase.running), None)
    elapsed = ((ended or time.time()) - created) if created else None
    spec = spec_of(info.runtime_env) or {}
    return JobSummary(
        **_spec_fields(spec),
        name=info.submission_id,
        cluster=cluster,
        status=status,
        ray_status=ray_status(info),
        owner=(info.metadata or {}).get("owner"),
        created_at=created,
        started_at=started,
        ended_at=ended,
        elapsed_s=round(elapsed, 1) if elapsed is not None else None,
        message=short_message(info.message) if status == JobStatus.FAILED else None,
        parent=(info.metadata or {}).get("parent"),
        trials=_trial_count(spec),
    )


def detail_of(cluster: str, info: Any, evs: list[dict[str, Any]], *, log_url: str) -> JobDetail:
    """A job's detail from Ray's record and all its events (`queued_reason` is the caller's: see why_queued)."""
    detail = JobDetail(**summary_of(cluster, info, evs).model_dump(), spec=spec_of(info.runtime_env))
    detail.phase = phase_of(evs)
    original_base = None
    for ev in evs:
        if ev["type"] == "config":
            original_base = ev.get("original_base_model")
        _apply_event(detail, ev)
    if detail.status == JobStatus.FAILED:
        _explain_failure(detail, info.message, working_phase(evs))
    if detail.error:
        detail.message = detail.error
    elif detail.stopped_early and detail.status == JobStatus.SUCCEEDED:
        detail.message = detail.stop_reason
    detail.log_url = log_url
    detail.serving = serving_values(detail, original_base)
    base = original_base or (detail.spec or {}).get("base_model")
    for c in detail.checkpoints:
        c.snippet = load_snippet(c.path, c.adapter_path, base)
    found = curve_diagnosis([e for e in evs if e["type"] == "step"])
    detail.curve = CurveDiagnosis(**found) if found else None
    detail.hints = hints(detail, evs)
    return detail


def submitted_detail(cluster: str, name: str, *, runtime_env: dict[str, Any], metadata: dict[str, str],
                     created_at: float, log_url: str) -> JobDetail:
    """The detail of a job just submitted, from what its submission sent (what `detail_of` says of it until its
    first event, without asking Ray): queued, Ray's PENDING."""
    spec = spec_of(runtime_env)
    return JobDetail(
        **_spec_fields(spec or {}),
        name=name,
        cluster=cluster,
        status=JobStatus.QUEUED,
        ray_status="PENDING",
        owner=metadata.get("owner"),
        created_at=created_at,
        elapsed_s=0.0,
        spec=spec,
        log_url=log_url,
        trials=_trial_count(spec or {}),
    )


def _trial_count(spec: dict[str, Any]) -> int | None:
    if not spec.get("sweep"):
        return None
    from cleverthis_runtime.sweep_spec import SweepSpec

    try:
        return SweepSpec.model_validate(spec["sweep"]).trial_count()
    except ValidationError:
        return None


def _spec_fields(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: spec.get(k) for k in ("job_type", "framework", "base_model", "dataset_path", "epochs", "batch_size",
                                     "workers")}


def _apply_event(detail: JobDetail, ev: dict[str, Any]) -> None:
    """What one event tells the detail (in log order: later events win)."""
    t = ev["type"]
    if t == "config":
        detail.checkpoint_dir = ev.get("checkpoint_dir")
    elif t == "plan":
        detail.plan = Plan.model_validate({k: ev[k] for k in PLAN_KEYS if ev.get(k) is not None})
    elif t == "tracking":
        detail.tracking = Tracking.model_validate({k: ev[k] for k in TRACKERS if ev.get(k) is not None})
        tb = detail.tracking.tensorboard
        if tb is not None:  # "Open in TensorBoard": this machine can show it
            tb.viewer = tensorboard.viewable(tb.log_dir)
    elif t == "early_stop":
        detail.stopped_early, detail.stop_reason = True, ev.get("reason")
    elif t == "step":
        detail.metrics = Metrics(**{k: ev.get(k) for k in Metrics.model_fields})
    elif t == "checkpoint" and ev.get("name") in LINKS:
        _mark(detail.checkpoints, ev["name"], ev.get("target"))
    elif t == "checkpoint" and ev.get("name", "").startswith("epoch-"):
        _add_checkpoint(detail.checkpoints, ev)
    elif t == "utilisation":
        _apply_utilisation(detail, ev)
    elif t == "memory" and isinstance(ev.get("peak_bytes"), int):
        _apply_memory(detail, ev)
    elif t == "error" and detail.error is None:
        detail.error, detail.error_kind = ev.get("message"), ev.get("kind")
        if ev.get("path") and ev.get("line"):
            detail.error_line = DataLine(path=ev["path"], line=ev["line"], text=ev.get("text"))
        detail.traceback = ev.get("traceback")


LINKS = ("best", "epoch-final")  # the folder's links a checkpoint event announces (`target`: the checkpoint)


def _add_checkpoint(checkpoints: list[Checkpoint], ev: dict[str, Any]) -> None:
    """A checkpoint written, rewritten (a LoRA checkpoint that gained or lost its merged weights: it keeps its
    marks) or deleted (keep_checkpoints)."""
    at = next((i for i, c in enumerate(checkpoints) if c.name == ev["name"]), None)
    if ev.get("deleted"):
        if at is not None:
            del checkpoints[at]
        return
    new = Checkpoint(**{k: ev.get(k) for k in Checkpoint.model_fields if k != "marks"})
    if at is None:
        checkpoints.append(new)
        _mark(checkpoints, "latest", ev.get("path"))
    else:
        new.marks = checkpoints[at].marks
        checkpoints[at] = new


def _mark(checkpoints: list[Checkpoint], mark: str, target: str | None) -> None:
    """Move `mark` to the checkpoint at `target` (a link points at one checkpoint at a time)."""
    for c in checkpoints:
        if mark in c.marks:
            c.marks.remove(mark)
        if target and os.path.normpath(c.path) == os.path.normpath(target):
            c.marks.append(mark)


def _apply_utilisation(detail: JobDetail, ev: dict[str, Any]) -> None:
    """Keep the latest utilisation event per worker, by rank (one that does not fit the model is skipped)."""
    try:
        u = UtilisationEvent.model_validate(ev)
    except ValidationError:
        return
    detail.utilisation = sorted([x for x in detail.utilisation if x.rank != u.rank] + [u], key=lambda x: x.rank)


def _apply_memory(detail: JobDetail, ev: dict[str, Any]) -> None:
    """The highest peak over the workers, beside the plan's per-worker estimate."""
    if detail.memory is not None and (detail.memory.peak_bytes or 0) >= ev["peak_bytes"]:
        return
    planned = ev.get("planned_gb")
    if planned is None and detail.plan is not None:
        planned = detail.plan.memory_per_worker_gb.get("total")
    detail.memory = MemoryUse(planned_gb=planned, peak_bytes=ev["peak_bytes"], rank=ev.get("rank"),
                              text=words(planned, ev["peak_bytes"]))


def working_phase(evs: list[dict[str, Any]]) -> str | None:
    """The last phase the job worked in before it ended (its last phase that is not final)."""
    phases = [e.get("phase") for e in evs if e["type"] == "phase" and e.get("phase") not in FINAL_PHASES]
    return phases[-1] if phases else None


def _explain_failure(detail: JobDetail, ray_message: str | None, phase: str | None = None) -> None:
    """A failed job's error, its kind and the advice for it (Ray's message when the runtime said nothing). Memory
    that ran out while the data was read or tokenized is the data's, not the model's (other fixes help)."""
    if detail.error is None:
        detail.error = short_message(ray_message) or "the job failed"
        detail.traceback = ray_message
        detail.error_kind = classify(ray_message or "")[0]
    detail.error_kind = detail.error_kind or classify(detail.error)[0]
    if phase == Phase.loading_data and detail.error_kind == "out_of_memory":
        detail.error_kind = "data_out_of_memory"
    detail.advice = advice_for(detail.error_kind)
    detail.fixes = fixes_for(detail.error_kind, detail.spec)


def why_queued(spec: dict[str, Any], nodes: list[dict[str, Any]] | None, own_job: str | None = None) -> QueuedReason:
    """What a queued job asked for against each node's free resources (`nodes`: placement.cluster_nodes), what
    blocks it and what would let it start (placement.explain)."""
    workers = int(spec.get("workers") or 1)
    per = {"CPU": float(spec.get("cpus_per_worker") or 1)}
    if spec.get("gpus_per_worker"):
        per["GPU"] = float(spec["gpus_per_worker"])
    strategy = str((spec.get("training_config") or {}).get("placement_strategy") or "PACK")
    free = {k: sum(float((n.get(k) or {}).get("free") or 0) for n in nodes) for k in per} if nodes else {}
    found = explain(workers, per, strategy, nodes, own_job)
    return QueuedReason.model_validate({
        "requested": {"workers": workers, "per_worker": per, "total": {k: v * workers for k, v in per.items()},
                      "strategy": strategy},
        "free": free, "nodes": nodes, **found})


def load_snippet(path: str, adapter_path: str | None, base_model: str | None) -> str:
    """Python that loads a checkpoint: its full (merged) weights, and for a LoRA checkpoint also the base model
    with the adapter on top."""
    lines = ["from transformers import AutoModelForCausalLM, AutoTokenizer",
             f"model = AutoModelForCausalLM.from_pretrained({path!r})",
             f"tokenizer = AutoTokenizer.from_pretrained({path!r})"]
    if adapter_path and base_model:
        lines += ["# or the base model with the LoRA adapter on top:", "from peft import PeftModel",
                  f"base = AutoModelForCausalLM.from_pretrained({base_model!r})",
                  f"model = PeftModel.from_pretrained(base, {adapter_path!r})"]
    return "\n".join(lines)


def serving_values(d: JobDetail, original_base: str | None = None) -> Serving | None:
    """What the Model Serving page asks for: the model path, and the LoRA adapter path when there is one
    (with the base it applies to: the original base model, also for a job resumed from a checkpoint)."""
    if not d.checkpoint_dir or not d.checkpoints:
        return None
    final = os.path.join(d.checkpoint_dir, "epoch-final") if d.status == JobStatus.SUCCEEDED else d.checkpoints[-1].path
    out = Serving(model_path=final)
    if d.checkpoints[-1].adapter_path:
        out.lora_adapter_path = os.path.join(final, "adapter_model")
        out.base_model = original_base or (d.spec or {}).get("base_model")
    return out


def curves(evs: list[dict[str, Any]], *, max_points: int = 1000, after_step: float | None = None) -> dict[str, Any]:
    """Loss curves for plotting: the step series downsampled (MinMaxLTTB) to at most max_points, epoch ends,
    validation points and the latest step's figures.

    `after_step`: only what lies after that step (a front-end that already drew the curve up to it asks for the
    rest); `count` still counts every step, `last_step` is the latest step reported."""
    all_steps = [e for e in evs if e["type"] == "step" and e.get("loss") is not None]
    last_step = float(all_steps[-1]["step"]) if all_steps else None

    def after(e: dict[str, Any]) -> bool:
        return after_step is None or (e.get("step") is not None and float(e["step"]) > after_step)

    steps = [e for e in all_steps if after(e)]
    evs = [e for e in evs if e["type"] not in ("epoch", "validation") or after(e)]
    x = [float(e["step"]) for e in steps]
    y = [float(e["loss"]) for e in steps]
    idx = downsample(x, y, max_points)
    return {
        "count": len(all_steps),
        "after_step": after_step,
        "last_step": last_step,
        "step": [x[i] for i in idx],
        "loss": [y[i] for i in idx],
        "epochs": [{"epoch": e.get("epoch"), "step": e.get("step"), "train_loss": e.get("train_loss")}
                   for e in evs if e["type"] == "epoch"],
        "validation": [{k: e.get(k) for k in ("epoch", "step", "eval_loss", "perplexity")}
                       for e in evs if e["type"] == "validation"],
        "latest": {k: all_steps[-1].get(k) for k in LATEST_KEYS} if all_steps else None,
    }


def downsample(x: list[float], y: list[float], n: int) -> list[int]:
    """Indices of at most n points that keep the curve's shape (MinMaxLTTB from tsdownsample)."""
    if len(x) <= n:
        return list(range(len(x)))
    import numpy as np
    from tsdownsample import MinMaxLTTBDownsampler

    # np.fromiter is ~4x faster than np.asarray on Python lists of floats (it dominated the 100k-point case).
    xs, ys = np.fromiter(x, float, len(x)), np.fromiter(y, float, len(y))
    return MinMaxLTTBDownsampler().downsample(xs, ys, n_out=max(n, 4)).tolist()
