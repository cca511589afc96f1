"""Failures that offer a fix: for a failed job's error kind, the changes to its spec that the page's
advice names, each a `Fix` the views turn into a "Retry with ..." button that opens the create form prefilled
with the job's spec and that change. One source for the job tab, the notebook's job view and `%train show`.
"""

from __future__ import annotations

from typing import Any

from .models import Fix


def fixes_for(kind: str | None, spec: dict[str, Any] | None) -> list[Fix]:
    """The fixes for a failure of `kind`, skipping those the spec already has."""
    if kind == "data_out_of_memory" and spec:
        return _data_fixes(spec)
    if kind != "out_of_memory" or not spec:
        return []
    tc = spec.get("training_config") or {}
    out = []
    if tc.get("method") != "qlora":
        out.append(Fix(label="Retry with QLoRA", patch={"training_config": {"method": "qlora", "quantization": "4bit"}},
                       why="4-bit base weights: about a quarter of the model's memory"))
    batch = int(spec.get("batch_size") or 1)
    if batch > 1:
        out.append(Fix(label="Retry with half the batch size", patch={"batch_size": batch // 2},
                       why=f"batch_size {batch} -> {batch // 2}: fewer activations per step"))
    if not tc.get("gradient_checkpointing"):
        out.append(Fix(label="Retry with gradient checkpointing", patch={"training_config": {"gradient_checkpointing": True}},
                       why="recomputes activations in the backward pass instead of keeping them"))
    if (tc.get("deepspeed") or {}).get("zero_stage") != 3:
        out.append(Fix(label="Retry with ZeRO-3", patch={"training_config": {"strategy": None, "deepspeed": {"zero_stage": 3}}},
                       why="DeepSpeed shards parameters, gradients and optimizer states over the workers"))
    for f in out:
        f.spec = apply_fix(spec, f.patch)
    return out


def _data_fixes(spec: dict[str, Any]) -> list[Fix]:
    """A dataset that did not fit while it was read: packing tokenizes it all up front, and several workers on one
    node each do it."""
    out = []
    if (spec.get("training_config") or {}).get("packing") is not False:
        out.append(Fix(label="Retry without packing", patch={"training_config": {"packing": False}},
                       why="rows are then tokenized batch by batch as training reads them, never all at once"))
    workers = int(spec.get("workers") or 1)
    if workers > 1:
        out.append(Fix(label="Retry with one worker", patch={"workers": 1},
                       why=f"workers {workers} -> 1: one copy of the tokenizing work on the node"))
    for f in out:
        f.spec = apply_fix(spec, f.patch)
    return out


def apply_fix(spec: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The spec with a fix's patch merged in (training_config key by key; a None value removes the key)."""
    out = {**spec, **{k: v for k, v in patch.items() if k != "training_config"}}
    if "training_config" in patch:
        tc = {**(spec.get("training_config") or {}), **patch["training_config"]}
        out["training_config"] = {k: v for k, v in tc.items() if v is not None}
    return out
