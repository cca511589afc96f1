"""A sweep: the same job tried with one to three parameters varied (docs/sweeps-chat.md).

The trials are decided here, before anything runs, from the spec alone: the service knows every trial's name,
parameters and spec from the sweep's spec (the trials of a sweep are its child jobs), and the runtime hands
the same list to Ray Tune. Value lists form a grid (every combination, in order); ranges are sampled, log or
linear, with the sweep's seed. Pure pydantic and the standard library, like spec.py.
"""

from __future__ import annotations

import itertools
import math
import posixpath
import random
from typing import Any, Literal

from pydantic import Field, model_validator

from .strict import StrictModel

SweepParameter = Literal["learning_rate", "lora_r", "lora_alpha", "batch_size", "epochs", "warmup_ratio",
                         "weight_decay"]
#: the parameters that are job fields (the others are training_config keys)
SPEC_LEVEL = ("batch_size", "epochs")
INTEGER = ("lora_r", "batch_size", "epochs")
MAX_TRIALS = 100


class SweepValues(StrictModel):
    """One parameter's values: a list, or a range sampled on a log or linear scale."""

    values: list[float] | None = Field(None, min_length=1, max_length=MAX_TRIALS, description="The values to try")
    min: float | None = Field(None, description="The range's lower end (with max)")
    max: float | None = Field(None, description="The range's upper end (with min)")
    sampling: Literal["log", "linear"] = Field("linear", description="How a range is sampled: log or linear")

    @model_validator(mode="after")
    def _one_form(self) -> SweepValues:
        if self.values is not None:
            if self.min is not None or self.max is not None:
                raise ValueError("give either values or a range (min and max), not both")
            return self
        if self.min is None or self.max is None:
            raise ValueError("give values, or a range with both min and max")
        if self.min >= self.max:
            raise ValueError(f"min ({self.min:g}) must be below max ({self.max:g})")
        if self.sampling == "log" and self.min <= 0:
            raise ValueError("log sampling needs a range above 0")
        return self


class SweepSpec(StrictModel):
    """The form's Sweep section: what varies, how many trials, how many at once, what decides the best."""

    parameters: dict[SweepParameter, SweepValues] = Field(
        ..., min_length=1, max_length=3, title="Parameters",
        description="One to three of learning_rate, lora_r, lora_alpha, batch_size, epochs, warmup_ratio, "
                    "weight_decay, each with values or a range",
    )
    trials: int | None = Field(
        None, ge=1, le=MAX_TRIALS, title="Trials",
        description="How many trials (default: every combination of the value lists; a range needs a number)",
    )
    concurrent: int = Field(1, ge=1, le=MAX_TRIALS, title="Run at once", description="Trials that run at the same time")
    metric: Literal["auto", "eval_loss", "loss"] = Field(
        "auto", title="Metric",
        description="What picks the best trial (lowest wins): auto is the validation loss when the data has a "
                    "validation split, else the training loss",
    )
    scheduler: Literal["none", "asha"] = Field(
        "none", title="Early stopping", description="asha: Ray Tune's ASHA stops trials that trail at each epoch",
    )
    seed: int = Field(0, ge=0, description="Seed of the sampled ranges")

    @model_validator(mode="after")
    def _count(self) -> SweepSpec:
        ranged = [k for k, v in self.parameters.items() if v.values is None]
        if ranged and self.trials is None:
            raise ValueError(f"trials: give the number of trials ({', '.join(ranged)} is a range)")
        return self

    def grid_size(self) -> int:
        return math.prod(len(v.values) for v in self.parameters.values() if v.values is not None)

    def trial_count(self) -> int:
        return self.trials if self.trials is not None else self.grid_size()


def trial_values(sweep: SweepSpec) -> list[dict[str, float | int]]:
    """Each trial's parameter values, in trial order. The grid of the value lists is walked in order (and
    repeated when there are more trials than combinations; a seeded choice of combinations when fewer); each
    range is sampled per trial."""
    rng = random.Random(sweep.seed)
    listed = [(k, v.values) for k, v in sweep.parameters.items() if v.values is not None]
    grid = list(itertools.product(*(vals for _, vals in listed)))
    count = sweep.trial_count()
    if count < len(grid):
        grid = [grid[i] for i in sorted(rng.sample(range(len(grid)), count))]
    out = []
    for i in range(count):
        chosen: dict[str, float | int] = dict(zip((k for k, _ in listed), grid[i % len(grid)], strict=True))
        for key, v in sweep.parameters.items():
            if v.values is None:
                assert v.min is not None and v.max is not None
                if v.sampling == "log":
                    x = math.exp(rng.uniform(math.log(v.min), math.log(v.max)))
                else:
                    x = rng.uniform(v.min, v.max)
                chosen[key] = float(f"{x:.3g}")
        out.append({k: (int(round(x)) if k in INTEGER else x) for k, x in chosen.items()})
    return out


def trial_name(sweep_name: str, index: int) -> str:
    """The name of trial `index` (from 1): `SWEEP-t3`."""
    return f"{sweep_name}-t{index}"


def trial_spec_data(spec_data: dict[str, Any], values: dict[str, float | int], index: int,
                    checkpoint_dir: str | None = None) -> dict[str, Any]:
    """A trial's spec (the sweep's, with its values set and no sweep) from the sweep's spec as submitted
    (`spec_json`: training_config holds only the keys the user set). Its checkpoints go to a folder of its own
    inside the sweep's (`checkpoint_dir`), when that is given."""
    data = {k: v for k, v in spec_data.items() if k != "sweep"}
    data["name"] = trial_name(spec_data["name"], index)
    if checkpoint_dir:
        data["output_dir"] = posixpath.join(checkpoint_dir, data["name"])
    tc = dict(data.get("training_config") or {})
    for key, value in values.items():
        if key in SPEC_LEVEL:
            data[key] = value
        else:
            tc[key] = value
    data["training_config"] = tc or None
    return data
