"""Tensor parallelism: transformers' own tensor-parallel plan over the workers' process group (CPU/gloo or GPU).

`tensor_parallel_size: N` loads the model with `from_pretrained(distributed_config=DistributedConfig(tp_size=N))`:
transformers builds a device mesh over the process group Ray Train made and shards each decoder layer's
attention and MLP projections as the model's `base_model_tp_plan` says (column-wise in, row-wise out), so each
weight is a DTensor holding 1/N of it. With `workers = N x D` and D > 1 the mesh is 2-D, ("fsdp", "tp"): the
tensor-parallel groups are consecutive ranks (Ray Train numbers a node's workers consecutively, so a group lies
within a node where it can), and the D groups share the data, each a data-parallel replica, its parameters
sharded over that dimension with FSDP2 (transformers' `fsdp_size`). The HF Trainer trains it: ranks of one
tensor-parallel group read the same batches (accelerate's ParallelismConfig, which the Trainer builds from the
model). Checkpoints gather the full weights (`strategies.gathered_state_dict`): a plain `model.safetensors`.

What is refused, before anything loads, with the field named (`refusal`):
- a model whose transformers class has no tensor-parallel plan (Falcon and GPT-2 in transformers 5.25),
- attention heads (or key/value heads) that do not split evenly over N,
- LoRA/QLoRA: peft's adapter layers are not in the plan, so an adapter on a sharded projection would add a
  full-width update to a 1/N-wide output (measured: the gradient norms differ from DDP at step 1).
"""

from __future__ import annotations

from typing import Any

from .spec import TrainingConfig


def sizes(tc: TrainingConfig, world: int) -> tuple[int, int]:
    """(tensor-parallel size, data-parallel size) for `world` workers."""
    tp = tc.tensor_parallel_size
    return tp, max(1, world // max(1, tc.model_parallel_size))


def refusal(tc: TrainingConfig, model_config: Any, method: str | None) -> tuple[str, str] | None:
    """(field, why) when this model cannot be trained with the requested tensor (or pipeline: pipeline.refusal)
    parallelism; None when it can."""
    tp = tc.tensor_parallel_size
    if tc.pipeline_parallel_size > 1:
        from .pipeline import refusal as stages

        return stages(tc, model_config)
    if tp <= 1:
        return None
    if method in ("lora", "qlora"):
        return ("training_config.method",
                f"method {method} cannot be combined with tensor_parallel_size {tp}: the LoRA adapters are not "
                "split by the tensor-parallel plan; use method 'full', or keep LoRA with tensor_parallel_size 1 "
                "(DDP, or strategy 'fsdp' to shard the model)")
    family = getattr(model_config, "model_type", "this model")
    if not getattr(model_config, "base_model_tp_plan", None):
        return ("training_config.tensor_parallel_size",
                f"{family} has no tensor-parallel plan in transformers, so it cannot be split over {tp} workers; "
                "set tensor_parallel_size to 1 and use strategy 'fsdp' or deepspeed ZeRO-3 to shard it "
                "(families with a plan: llama, mistral, mixtral, gemma, qwen2, phi3)")
    for key in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(model_config, key, None)
        if heads and heads % tp:
            return ("training_config.tensor_parallel_size",
                    f"tensor_parallel_size {tp} must divide the model's {key} ({heads}): each worker holds whole "
                    "attention heads")
    return None


def distributed_config(tc: TrainingConfig, world: int) -> Any:
    """The `distributed_config=` for from_pretrained, or None without tensor parallelism."""
    tp, dp = sizes(tc, world)
    if tp <= 1:
        return None
    from transformers import DistributedConfig

    return DistributedConfig(tp_size=tp, fsdp_size=dp)


def layout(tc: TrainingConfig, world: int, model_config: Any) -> dict[str, Any]:
    """For the `plan` and `strategy` events: the mesh, the ranks of each group, and what is split how (the
    stages under pipeline parallelism: pipeline.layout)."""
    if tc.pipeline_parallel_size > 1:
        from .pipeline import layout as stages

        return stages(tc, world, model_config)
    tp, dp = sizes(tc, world)
    groups = [list(range(g * tp, (g + 1) * tp)) for g in range(dp)]
    return {"mesh": {"dp": dp, "tp": tp}, "mesh_dims": ["fsdp", "tp"], "tensor_parallel_groups": groups,
            "data_parallel": "FSDP2 over the data-parallel dimension" if dp > 1 else "none (one replica)",
            "sharded_modules": dict(getattr(model_config, "base_model_tp_plan", None) or {})}


def reason(tc: TrainingConfig, world: int) -> str:
    if tc.pipeline_parallel_size > 1:
        from .pipeline import reason as stages

        return stages(tc, world)
    tp, dp = sizes(tc, world)
    groups = "; ".join(f"ranks {g * tp}-{(g + 1) * tp - 1}" for g in range(dp))
    return (f"tensor parallel: each layer split {tp} ways (transformers' tp_plan) over {groups}"
            + (f"; {dp} data-parallel replicas, sharded with FSDP2" if dp > 1 else "; one replica (no data parallel)")
            + ": set in training_config.json")
