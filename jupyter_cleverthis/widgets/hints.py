"""The product page's "Loss curve interpretation" table, applied to a live loss series."""

from __future__ import annotations

import statistics

HINTS = {
    "smooth": "Loss decreasing smoothly: training is working correctly.",
    "oscillating": "Loss oscillating without decrease: learning rate too high; reduce it by 10x.",
    "spiking": "Loss decreasing then spiking: gradient instability; enable gradient clipping (max_grad_norm).",
    "near_zero": "Loss near zero very quickly: overfitting or data leakage; check dataset quality.",
    "flat": "Loss not decreasing at all: learning rate too low, or the model is not receiving gradients.",
}


def interpret(losses: list[float], total_steps: int | None = None) -> tuple[str, str] | None:
    """(pattern, advice) for a loss series, or None while there are too few points to tell."""
    n = len(losses)
    if n < 8:
        return None
    third = max(2, n // 3)
    head, tail = losses[:third], losses[-third:]
    first, last = statistics.fmean(head), statistics.fmean(tail)
    progress = n / total_steps if total_steps else 1.0
    if last < 0.05 and progress < 0.5:
        return "near_zero", HINTS["near_zero"]
    # A spike: a recent point far above the best of what came before, after the loss had been falling.
    best_before = min(losses[: n - 3]) if n > 4 else losses[0]
    recent_max = max(losses[-3:])
    if best_before < first * 0.9 and recent_max > best_before * 1.5 + 1e-9 and recent_max > first * 0.8:
        return "spiking", HINTS["spiking"]
    diffs = [b - a for a, b in zip(losses, losses[1:], strict=False)]
    wiggle = statistics.pstdev(diffs) if len(diffs) > 1 else 0.0
    scale = max(abs(first), 1e-9)
    if last < first * 0.97:
        return "smooth", HINTS["smooth"]
    if wiggle / scale > 0.05:
        return "oscillating", HINTS["oscillating"]
    return "flat", HINTS["flat"]
