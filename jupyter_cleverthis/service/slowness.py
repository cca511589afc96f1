"""Slow and stuck jobs: the page's "Slow training throughput" and "initializing for more than 10
minutes" read from a job's events, one source for the job tab, the notebook's job view and `%train show`.

The thresholds (docs/troubleshooting.md), over the last WINDOW `step` events:
- data loading: the batch fetch (`data_s`, timed by the runtime between a step's end and the next one's begin)
  takes over DATA_SHARE of the step (`data_s + compute_s`), both the median over the window (an epoch's
  checkpoint or a validation falls between two steps too, and the median is not moved by one);
- GPU utilisation: the workers' latest `gpu_util_percent` average under GPU_UTIL (only where GPUs report it);
- one worker: the job runs a single worker (no data parallelism);
- tokens/s far below the plan's: the median tokens/s under FAR_BELOW of the `expected_tokens_per_s` the torch
  runtime's `strategy` event states (each worker at 40 % of the matrix-multiply rate it measured at start, over
  the model's FLOPs per token), for steps of at least MIN_STEP_FLOPS per worker (a toy model's steps are all
  overhead: nothing to compare);
- stuck initializing: the job has been initializing (downloading or loading the model, loading data) for over
  STUCK_AFTER_S (10 minutes, or 1 minute per GB of a model being downloaded when that is longer).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from .models import Hint, JobDetail

WINDOW = 20
MIN_STEPS = 5
DATA_SHARE = 0.3
GPU_UTIL = 80.0
STUCK_AFTER_S = 600.0
FAR_BELOW = 0.25
MIN_STEP_FLOPS = 1e9


def _fmt_s(s: float) -> str:
    s = int(s)
    return f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


def throughput_hints(d: JobDetail, evs: list[dict[str, Any]]) -> list[Hint]:
    steps = [e for e in evs if e["type"] == "step" and e.get("data_s") is not None and e.get("compute_s") is not None]
    out = []
    recent = steps[-WINDOW:]
    if len(recent) >= MIN_STEPS:
        data = statistics.median(float(e["data_s"]) for e in recent)
        compute = statistics.median(float(e["compute_s"]) for e in recent)
        if data + compute > 0 and data / (data + compute) > DATA_SHARE:
            out.append(Hint(kind="data_loading", message=(
                f"Data loading takes {100 * data / (data + compute):.0f}% of each step ({data:.2f} s of "
                f"{data + compute:.2f} s): the dataset may be on slow storage (NFS with high latency). Copy it to "
                "local disk on the nodes, or pre-tokenize it (a saved Arrow dataset).")))
    slow = _below_plan(d, evs, recent)
    if slow is not None:
        out.append(slow)
    gpus = [u.gpu_util_percent for u in d.utilisation if u.gpu_util_percent is not None]
    if gpus and sum(gpus) / len(gpus) < GPU_UTIL:
        out.append(Hint(kind="gpu_utilisation", message=(
            f"GPU utilisation is {sum(gpus) / len(gpus):.0f}% (under {GPU_UTIL:.0f}%): increase batch_size to keep "
            "the GPUs busy.")))
    if (d.workers or 1) == 1 and steps:
        out.append(Hint(kind="one_worker", message=(
            "One worker: the job does not use data parallelism. Where the cluster has more CPUs or GPUs, set "
            "workers to spread the batches over them.")))
    return out


def _below_plan(d: JobDetail, evs: list[dict[str, Any]], recent: list[dict[str, Any]]) -> Hint | None:
    plan = next((e for e in reversed(evs) if e["type"] == "strategy" and e.get("expected_tokens_per_s")), None)
    tps = [float(e["tokens_per_s"]) for e in recent if e.get("tokens_per_s")]
    if plan is None or len(tps) < MIN_STEPS:
        return None
    got, want = statistics.median(tps), float(plan["expected_tokens_per_s"])
    step_s = statistics.median(float(e["data_s"]) + float(e["compute_s"]) for e in recent)
    per_step = got * step_s / max(d.workers or 1, 1) * float(plan["flops_per_token"])
    if per_step < MIN_STEP_FLOPS or got >= FAR_BELOW * want:
        return None
    return Hint(kind="below_plan", message=(
        f"Training runs at {got:,.0f} tokens/s, under a quarter of the {want:,.0f} tokens/s the plan expects "
        f"from these workers ({float(plan['device_flops']) / 1e9:,.0f} GFLOP/s each, measured at start). "
        "Common causes: a batch too small to keep the devices busy (increase batch_size), padding (packing, or "
        "group_by_length when it is off, in training_config), data loading (see above), or another process sharing the nodes."))


def stuck_hint(d: JobDetail, evs: list[dict[str, Any]], now: float | None = None) -> Hint | None:
    """While initializing for too long: what it is doing (downloading, with progress, or loading)."""
    phases = [e for e in evs if e["type"] == "phase"]
    if d.status.value != "initializing" or not phases:
        return None
    since = float(phases[0].get("t") or d.started_at or 0) or None
    if since is None:
        return None
    waited = (now or time.time()) - since
    progress = [e for e in evs if e["type"] == "download_progress"]
    total = max((int(e.get("total") or 0) for e in progress), default=0)
    limit = max(STUCK_AFTER_S, 60.0 * total / 1e9)
    if waited < limit:
        return None
    model = d.base_model or "the base model"
    if d.phase == "downloading":
        got = max((int(e.get("downloaded") or 0) for e in progress), default=0)
        doing = f"downloading {model}" + (f" ({got / 1e9:.1f} of {total / 1e9:.1f} GB)" if total else "")
    elif d.phase == "loading_model":
        doing = f"loading {model} (very large models take 10 minutes or more)"
    else:
        doing = f"in {str(d.phase or 'start-up').replace('_', ' ')}"
    return Hint(kind="stuck_initializing", message=(
        f"Initializing for {_fmt_s(waited)}: {doing}. For repeated jobs on this cluster, pre-fetch the model "
        f"once on every node: %train download {model} (or cleverthis-train download {model})."))


def hints(d: JobDetail, evs: list[dict[str, Any]], now: float | None = None) -> list[Hint]:
    stuck = stuck_hint(d, evs, now)
    return ([stuck] if stuck else []) + (throughput_hints(d, evs) if d.status.value == "running" else [])
