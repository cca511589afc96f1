"""A sweep's trials as child jobs, and the comparison of a sweep (docs/sweeps-chat.md).

A sweep is one Ray job (cleverthis_runtime/sweep.py); its trials are not. Each trial is still a job to the user:
`SWEEP-t3` has a status, events, curves, checkpoints and a spec. They are read from the sweep: the trials and
their specs follow from the sweep's spec (sweep_spec.py decides them, on the cluster and here alike), and a
trial's events are the sweep's events that carry its name. `trial_record` stands in for Ray's job record of a
trial, so the projections of detail.py serve trials unchanged.
"""

from __future__ import annotations

import json
import re
import statistics
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel, Field

from cleverthis_runtime.event_models import FINAL_PHASES
from cleverthis_runtime.spec import JobSpec
from cleverthis_runtime.sweep_spec import trial_name, trial_spec_data, trial_values

from ..spec import JobStatus
from .ray_client import MARK, TERMINAL_RAY_STATUSES, ray_status
from .runtime_env import spec_of

TRIAL_NAME = re.compile(r"^(?P<sweep>.+)-t(?P<index>[1-9][0-9]{0,2})$")
# A trial's last phase -> the status word Ray would have given it (detail.RAY_TO_STATUS reads these)
FINAL_TO_RAY = {"succeeded": "SUCCEEDED", "failed": "FAILED", "cancelled": "STOPPED"}
METRIC_WORDS = {"eval_loss": "validation loss", "loss": "training loss"}


class SweepTrialRow(BaseModel):
    """One row of a sweep's comparison table."""

    name: str
    index: int
    values: dict[str, float | int]
    status: JobStatus
    epochs_done: int = 0
    final_eval_loss: float | None = None
    best_eval_loss: float | None = None
    final_loss: float | None = None
    tokens_per_s: float | None = Field(None, description="Median training throughput")
    objective: float | None = Field(None, description="The sweep's metric at the trial's last epoch")
    checkpoint_dir: str | None = None
    message: str | None = None


class SweepDetail(BaseModel):
    """A sweep compared: each trial's parameters and results, and the best trial so far."""

    name: str
    cluster: str
    status: JobStatus
    parameters: list[str]
    metric: str | None = Field(None, description="eval_loss or loss: what picks the best trial (lowest wins)")
    metric_label: str | None = None
    best: str | None = Field(None, description="The best trial's name")
    scheduler: str = "none"
    concurrent: int = 1
    checkpoint_dir: str | None = None
    trials: list[SweepTrialRow]


def split_trial_name(name: str) -> tuple[str, int] | None:
    """("SWEEP", 3) for "SWEEP-t3"; None for a name that cannot be a trial's."""
    m = TRIAL_NAME.match(name)
    return (m["sweep"], int(m["index"])) if m else None


def sweep_spec_of(info: Any) -> dict[str, Any] | None:
    """The spec of a sweep's Ray job record (None when the job is not a sweep)."""
    spec = spec_of(info.runtime_env)
    return spec if spec and spec.get("sweep") else None


def trials_of(spec_data: dict[str, Any], evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sweep's trials, [{name, index, values, spec}], decided from its spec as the runtime decides them."""
    spec = JobSpec.model_validate(spec_data)
    assert spec.sweep is not None
    started = next((e for e in evs if e["type"] == "sweep"), {})
    return [{"name": trial_name(spec.name, i), "index": i, "values": values,
             "spec": trial_spec_data(spec_data, values, i, started.get("checkpoint_dir"))}
            for i, values in enumerate(trial_values(spec.sweep), 1)]


def trial_events(evs: list[dict[str, Any]], name: str, since: int = 0) -> list[dict[str, Any]]:
    """The sweep's events that trial `name` printed, numbered afresh from 1 (`i`), after `since`."""
    out = []
    for ev in evs:
        if ev.get("trial") == name:
            out.append({**ev, "i": len(out) + 1})
    return out[since:]


def trial_record(parent: Any, trial: dict[str, Any], evs: list[dict[str, Any]]) -> SimpleNamespace:
    """What Ray's job record of trial `trial` would say, from its sweep's record and the trial's own events."""
    phases = [e for e in evs if e["type"] == "phase"]
    final = next((e for e in phases if e.get("phase") in FINAL_PHASES), None)
    parent_status = ray_status(parent)
    if final is not None and str(final.get("phase")) in FINAL_TO_RAY:
        status = FINAL_TO_RAY[str(final.get("phase"))]
    elif parent_status in TERMINAL_RAY_STATUSES:  # the sweep ended without this trial's last word
        status = "STOPPED" if parent_status in ("STOPPED", "SUCCEEDED") else "FAILED"
    else:
        status = "RUNNING" if evs else "PENDING"
    first_t = evs[0].get("t") if evs else None
    message = final.get("message") if final else None  # e.g. "stopped early by the ASHA scheduler after ..."
    if status == "FAILED":
        err = next((e for e in reversed(evs) if e["type"] == "error"), None)
        message = (err or {}).get("message") or (None if final else (parent.message or "the sweep failed"))
    return SimpleNamespace(
        submission_id=trial["name"], job_id=None, status=status, message=message,
        start_time=int(first_t * 1000) if first_t else None,
        end_time=int(final["t"] * 1000) if final and final.get("t") else (
            parent.end_time if status in ("STOPPED", "FAILED") and final is None else None),
        metadata={**(parent.metadata or {}), "parent": parent.submission_id},
        runtime_env={"env_vars": {"CLEVERTHIS_SPEC": json.dumps(trial["spec"])}},
        parent=parent.submission_id, parent_info=parent,
    )


def compare(cluster: str, parent: Any, evs: list[dict[str, Any]]) -> SweepDetail:
    """The comparison table of sweep `parent` (Ray's record) from all its events."""
    from .detail import status_of

    spec_data = sweep_spec_of(parent)
    assert spec_data is not None
    started = next((e for e in evs if e["type"] == "sweep"), {})
    metric = started.get("metric")
    rows = []
    for trial in trials_of(spec_data, evs):
        own = trial_events(evs, trial["name"])
        record = trial_record(parent, trial, own)
        evals = [float(e["eval_loss"]) for e in own if e["type"] == "validation" and e.get("eval_loss") is not None]
        losses = [float(e["loss"]) for e in own if e["type"] == "step" and e.get("loss") is not None]
        speeds = [float(e["tokens_per_s"]) for e in own if e["type"] == "step" and e.get("tokens_per_s")]
        epochs = [e for e in own if e["type"] == "epoch"]
        epoch_losses = [e.get("train_loss") for e in epochs]
        objective = evals[-1] if metric == "eval_loss" and evals else (
            epoch_losses[-1] if metric == "loss" and epoch_losses else None)
        config = next((e for e in own if e["type"] == "config"), {})
        rows.append(SweepTrialRow(
            name=trial["name"], index=trial["index"], values=trial["values"], status=status_of(record, own),
            epochs_done=len(epochs), final_eval_loss=evals[-1] if evals else None,
            best_eval_loss=min(evals) if evals else None, final_loss=losses[-1] if losses else None,
            tokens_per_s=round(statistics.median(speeds), 1) if speeds else None, objective=objective,
            checkpoint_dir=config.get("checkpoint_dir") or trial["spec"].get("output_dir"), message=record.message,
        ))
    scored = [r for r in rows if r.objective is not None]
    best = min(scored, key=lambda r: r.objective or 0.0).name if scored else None
    sweep = spec_data["sweep"]
    return SweepDetail(
        name=parent.submission_id, cluster=cluster, status=status_of(parent, [e for e in evs if not e.get("trial")]),
        parameters=list(sweep["parameters"]), metric=metric, metric_label=METRIC_WORDS.get(metric or ""),
        best=best, scheduler=sweep.get("scheduler", "none"), concurrent=int(sweep.get("concurrent", 1)),
        checkpoint_dir=started.get("checkpoint_dir"), trials=rows,
    )


def best_spec(detail: SweepDetail, trial_spec: dict[str, Any]) -> dict[str, Any]:
    """"Create from best": the best trial's spec as a new job's (a name to choose, the default checkpoint folder)."""
    spec = {k: v for k, v in trial_spec.items() if k != "output_dir"}
    spec["name"] = f"{detail.name}-best"[:64]
    return spec


def queued_reason(info: Any, spec: dict[str, Any], nodes: list[dict[str, Any]] | None, name: str) -> Any:
    """Why a queued job waits (detail.why_queued); a trial Ray Tune has not started yet waits for its turn."""
    from .detail import why_queued

    reason = why_queued(spec, nodes, name)
    if is_trial(info) and info.status == "PENDING":
        n = int(((sweep_spec_of(info.parent_info) or {}).get("sweep") or {}).get("concurrent") or 1)
        reason.message = (f"Waiting for its turn: sweep {info.parent} runs {n} trial{'s' if n > 1 else ''} at once, "
                          "and this one starts when one of them ends.")
    return reason


def is_trial(info: Any) -> bool:
    return getattr(info, "parent", None) is not None


def trial_of(svc: Any, cluster: str, name: str) -> SimpleNamespace | None:
    """The stand-in record of sweep trial `name` on `cluster`, or None when there is no such trial."""
    parts = split_trial_name(name)
    parent = svc.info(cluster, parts[0]) if parts else None
    spec = sweep_spec_of(parent) if parent is not None and (parent.metadata or {}).get(MARK) == "1" else None
    if parts is None or spec is None:
        return None
    evs = svc.refresh_events(cluster, parent.submission_id, parent)
    trials = trials_of(spec, evs)
    if parts[1] > len(trials):
        return None
    return trial_record(parent, trials[parts[1] - 1], trial_events(evs, name))


def trial_summaries(svc: Any, cluster: str, info: Any) -> list[Any]:
    """A sweep's trials in the job list (its log is read while it runs: the trials' phases are in it)."""
    from .detail import summary_of

    if ray_status(info) in TERMINAL_RAY_STATUSES:
        evs = svc.store.events(cluster, info.submission_id, types=("phase", "sweep"))
    else:
        evs = svc.refresh_events(cluster, info.submission_id, info, types=("phase", "sweep"))
    out = []
    for trial in trials_of(sweep_spec_of(info) or {}, evs):
        own = trial_events(evs, trial["name"])
        out.append(summary_of(cluster, trial_record(info, trial, own), own))
    return out
