"""The product page's "Loss curve interpretation" table, applied to a job's step losses: one source for the
sidebar, the notebook widgets and `%train show`.

The thresholds (docs/architecture.md, "Pre-flight, feasibility and failures"), on the training-loss series of the steps so far:
- too early to tell: fewer than MIN_POINTS losses;
- near zero quickly: the mean of the last third under NEAR_ZERO while less than half of the planned steps ran;
- spike: the loss had fallen (the lowest of its moving average over max(2, n/10) steps, before the last
  SPIKE_WINDOW points, is under SPIKE_FALL x the first third's mean), then the mean of the last SPIKE_WINDOW
  points is over SPIKE_RISE x that lowest average (and over 0.8 x the start);
- smooth: the last third's mean is under SMOOTH_DROP x the first third's, and under the first loss (a loss that
  jumped far above where it started and came part of the way back down is not decreasing: too high a learning
  rate does that on a real job);
- oscillating: no such decrease, and the step-to-step changes' standard deviation is over OSCILLATION x the
  starting loss;
- flat: none of these.
"""

from __future__ import annotations

import statistics
from typing import Any

MIN_POINTS = 8
NEAR_ZERO = 0.05
SPIKE_WINDOW = 3
SPIKE_FALL = 0.9
SPIKE_RISE = 1.5
SMOOTH_DROP = 0.97
OSCILLATION = 0.05

#: pattern -> (what the curve shows, the page's advice)
PATTERNS: dict[str, tuple[str, str]] = {
    "smooth": ("Loss decreasing smoothly", "training is working correctly."),
    "oscillating": ("Loss oscillating without decrease", "learning rate too high; reduce it by 10x."),
    "spiking": ("Loss decreasing then spiking", "gradient instability; enable gradient clipping (max_grad_norm)."),
    "near_zero": ("Loss near zero very quickly", "overfitting or data leakage; check dataset quality."),
    "flat": ("Loss not decreasing at all", "learning rate too low, or the model is not receiving gradients."),
}


def advice(pattern: str) -> str:
    seen, what = PATTERNS[pattern]
    return f"{seen}: {what}"


def interpret(losses: list[float], total_steps: int | None = None) -> tuple[str, str] | None:
    """(pattern, advice) for a loss series, or None while there are too few points to tell."""
    n = len(losses)
    if n < MIN_POINTS:
        return None
    third = max(2, n // 3)
    first, last = statistics.fmean(losses[:third]), statistics.fmean(losses[-third:])
    progress = n / total_steps if total_steps else 1.0
    if last < NEAR_ZERO and progress < 0.5:
        return "near_zero", advice("near_zero")
    before, w = losses[: n - SPIKE_WINDOW], max(2, n // 10)
    best_before = min(statistics.fmean(before[i:i + w]) for i in range(len(before) - w + 1))
    recent = statistics.fmean(losses[-SPIKE_WINDOW:])
    if best_before < first * SPIKE_FALL and recent > best_before * SPIKE_RISE + 1e-9 and recent > first * 0.8:
        return "spiking", advice("spiking")
    diffs = [b - a for a, b in zip(losses, losses[1:], strict=False)]
    wiggle = statistics.pstdev(diffs) if len(diffs) > 1 else 0.0
    if last < first * SMOOTH_DROP and last < losses[0]:
        return "smooth", advice("smooth")
    if wiggle / max(abs(first), 1e-9) > OSCILLATION:
        return "oscillating", advice("oscillating")
    return "flat", advice("flat")


def curve_diagnosis(step_events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The diagnosis of a job's `step` events: {pattern, advice, points}, or None while too early to tell."""
    losses = [float(e["loss"]) for e in step_events if e.get("loss") is not None]
    total = next((e.get("total_steps") for e in reversed(step_events) if e.get("total_steps")), None)
    found = interpret(losses, total)
    if found is None:
        return None
    return {"pattern": found[0], "advice": found[1], "points": len(losses)}
