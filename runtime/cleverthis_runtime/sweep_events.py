"""The events of a sweep's driver (sweep.py): part of event_models' union."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .event_base import Event


class SweepTrial(BaseModel):
    name: str
    values: dict[str, float | int]
    status: str | None = None  # (sweep_result) succeeded, failed, stopped_early, cancelled
    objective: float | None = None  # (sweep_result) the metric at its last report
    epochs: int | None = None  # (sweep_result) epochs reported to Ray Tune


class SweepEvent(Event):
    """The sweep starts: its trials (names and values), what decides the best, and how they are run."""

    type: Literal["sweep"]
    trials: list[SweepTrial]
    metric: Literal["eval_loss", "loss"]
    scheduler: str = "none"
    concurrent: int = 1
    checkpoint_dir: str | None = None


class SweepResultEvent(Event):
    """Ray Tune's outcome: each trial's last value of the metric, and the best trial."""

    type: Literal["sweep_result"]
    metric: Literal["eval_loss", "loss"]
    best: str | None = None
    trials: list[SweepTrial] = Field(default_factory=list)
