"""The automatic choices, computed before training and explained: a pure function, no torch needed.

Memory rules of thumb (the product page's numbers): a full fine-tune in 16-bit needs about 8-9 bytes per
parameter with Adam (weights, gradients, optimizer states, activations): 7B -> ~60 GB. LoRA keeps the
16-bit base frozen (~2.5 bytes/param with activations: 7B -> ~18 GB); QLoRA keeps a 4-bit base (~1.1
bytes/param: 7B -> ~8 GB).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from . import parallel
from .spec import JobSpec, TrainingConfig, parallelism_error

GB = 1e9
#: attention implementations that run packed rows as variable-length sequences: no padding, no mask
VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3")
BYTES_PER_PARAM = {"full": 8.5, "lora": 2.55, "qlora": 1.1}


class PlanError(ValueError):
    """A training config that cannot run on these devices (e.g. tensor parallelism on CPU)."""


@dataclass
class Device:
    kind: str  # "cuda" or "cpu"
    memory_bytes: float
    compute_capability: float | None = None


@dataclass
class Plan:
    method: str
    precision: str
    strategy: str
    gradient_checkpointing: bool
    memory_estimate_gb: dict[str, float]
    reasons: dict[str, str] = field(default_factory=dict)
    #: tensor or pipeline parallelism's mesh, groups or stages (parallel.layout), None without them
    parallelism: dict[str, Any] | None = None
    #: how examples form batches: "packed" (several per row), "grouped" (similar lengths, padded) or "padded"
    batching: str = "padded"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate(params: float, method: str, precision: str = "bf16") -> float:
    scale = 2.0 if precision in ("no", "fp32") and method != "qlora" else 1.0
    return params * BYTES_PER_PARAM[method] * scale / GB


def make_plan(*, params: float, devices: list[Device], workers: int, config: TrainingConfig,
              attention: str | None = None, packing_refusal: str | None = None, raw_text: bool = False) -> Plan:
    """`attention`: the attention implementation the model would run packed rows with; `packing_refusal`: why this
    model cannot keep packed examples apart (methods.packing_refusal), None when it can; `raw_text`: the data is
    raw text, cut into blocks."""
    dev = min(devices, key=lambda d: d.memory_bytes) if devices else Device("cpu", 16 * GB)
    reasons: dict[str, str] = {}
    on_gpu = dev.kind == "cuda"
    problem = parallelism_error(config, framework="torch", workers=workers)
    if problem:
        raise PlanError(f"training_config: {problem}")

    if config.mixed_precision is not None:
        precision = config.mixed_precision
        reasons["precision"] = f"{precision}: set in training_config.json"
    elif config.deepspeed is not None and (config.deepspeed.bf16 or config.deepspeed.fp16):
        precision = "bf16" if config.deepspeed.bf16 else "fp16"
        reasons["precision"] = f"{precision}: from the deepspeed section"
    elif on_gpu and (dev.compute_capability or 0) >= 8.0:
        precision, reasons["precision"] = "bf16", f"bf16: compute capability {dev.compute_capability} >= 8.0"
    elif on_gpu:
        precision, reasons["precision"] = "fp16", f"fp16: compute capability {dev.compute_capability} < 8.0"
    else:
        precision, reasons["precision"] = "no", "fp32: training on CPU"

    est = {m: round(estimate(params, m, precision), 3) for m in BYTES_PER_PARAM}
    mem_gb = dev.memory_bytes / GB
    if config.method is not None:
        method = config.method
        reasons["method"] = f"{method}: set in training_config.json"
    elif config.model_parallel_size > 1:
        method = "full"
        what = "tensor" if config.tensor_parallel_size > 1 else "pipeline"
        reasons["method"] = (f"full: {what} parallelism splits the full weights over the workers "
                             "(LoRA adapters are not split over them)")
    elif est["full"] <= mem_gb:
        method = "full"
        reasons["method"] = f"full: ~{est['full']:.1f} GB fits the {mem_gb:.1f} GB per device"
    else:
        method = "lora"
        reasons["method"] = (
            f"lora: a full fine-tune needs ~{est['full']:.1f} GB, more than the {mem_gb:.1f} GB per device"
        )

    if method == "qlora" and config.quantization:
        reasons["method"] += (f"; the frozen base is quantized to {config.quantization}"
                              f"{' (nf4)' if config.quantization == '4bit' else ''} through bitsandbytes")
    batching = _blocks(config, packing_refusal, reasons) if raw_text else \
        _batching(config, attention, packing_refusal, reasons)

    weights_gb = params * (2.0 if precision in ("bf16", "fp16") else 4.0) / GB
    if method == "qlora":
        weights_gb = params * 0.55 / GB
    if config.gradient_checkpointing is not None:
        gc = config.gradient_checkpointing
        reasons["gradient_checkpointing"] = f"{'on' if gc else 'off'}: set in training_config.json"
    else:
        free_after_weights = mem_gb - weights_gb
        gc = on_gpu and free_after_weights <= 0.2 * weights_gb
        reasons["gradient_checkpointing"] = (
            f"on: free memory {free_after_weights:.1f} GB is within 20% of the weights' {weights_gb:.1f} GB"
            if gc
            else "off: enough memory for activations"
        )

    strategy = _strategy(config, workers, est[method], mem_gb, reasons)
    layout = parallel.layout(config, workers, None) if config.model_parallel_size > 1 else None
    return Plan(method, precision, strategy, gc, est, reasons, layout, batching)


def _blocks(config: TrainingConfig, packing_refusal: str | None, reasons: dict[str, str]) -> str:
    """Raw text is always full blocks; packed when the model keeps documents apart by position_ids."""
    reasons["batching"] = (
        f"raw text: documents joined with EOS and cut into blocks of {config.max_seq_length} tokens; "
        + ("position_ids restart at each document, so no token attends across documents" if packing_refusal is None
           else f"documents in a block attend to each other ({packing_refusal.split(';')[0]})"))
    return "packed" if packing_refusal is None else "padded"


def start_of(spec: JobSpec, checkpoint: str | None) -> tuple[str, str]:
    """Which weights a job starts from (the plan's `start`), and why."""
    if checkpoint:
        return "checkpoint", f"the weights of checkpoint {os.path.basename(checkpoint.rstrip('/'))}"
    if spec.from_scratch:
        return "scratch", f"fresh weights of {spec.base_model}'s architecture (job type train, start scratch)"
    why = "continued pre-training" if spec.job_type == "train" else "fine-tuning"
    return "pretrained", f"the weights of {spec.base_model} ({why})"


def _batching(config: TrainingConfig, attention: str | None, refusal: str | None, reasons: dict[str, str]) -> str:
    """Packed rows where the attention takes them as variable-length sequences, else length-grouped batches.

    Without varlen attention a packed row needs a block-diagonal mask, and on CPU that costs more than the
    padding that length grouping leaves (README, P2)."""
    if config.packing:  # a model that cannot pack is refused by the pre-flight and the workers, naming the field
        reasons["batching"] = "packed: set in training_config.json; several examples per row, kept apart by position_ids"
        return "packed"
    if config.packing is None:
        if config.pipeline_parallel_size > 1:
            why = "the pipeline's stages pass no example boundaries"
        elif refusal:
            why = refusal.split(":")[0]
        elif attention in VARLEN_ATTENTION:
            reasons["batching"] = (f"packed: {attention} runs packed rows as variable-length sequences, so packing "
                                   "removes the padding at no cost")
            return "packed"
        else:
            why = (f"{attention or 'this'} attention needs a block-diagonal mask for packed rows, which costs more "
                   "than the padding grouped batches leave (flash-attention on a GPU packs)")
    else:
        why = "packing set to false in training_config.json"
    if config.group_by_length is False:
        reasons["batching"] = f"padded: one example per row in a random order (group_by_length false); {why}"
        return "padded"
    how = "set in training_config.json" if config.group_by_length else "automatic"
    reasons["batching"] = (f"grouped ({how}): batches of examples of similar length, less padding, in an order "
                           f"seeded per epoch; not packed: {why}")
    return "grouped"


def _strategy(config: TrainingConfig, workers: int, need_gb: float, mem_gb: float, reasons: dict[str, str]) -> str:
    """The distributed strategy, its reason into `reasons`."""
    if config.model_parallel_size > 1:
        strategy = "tensor-parallel" if config.tensor_parallel_size > 1 else "pipeline-parallel"
        reasons["strategy"] = parallel.reason(config, workers)
    elif config.deepspeed is not None:
        strategy = f"deepspeed-zero{config.deepspeed.zero_stage}"
        ds = config.deepspeed
        offload = [w for w, on in (("optimizer states", ds.offload_optimizer), ("parameters", ds.offload_param)) if on]
        reasons["strategy"] = (f"DeepSpeed ZeRO-{ds.zero_stage}: configured in training_config.json; "
                               + (f"offload of {' and '.join(offload)} to CPU memory" if offload else "no offload"))
    elif config.strategy is not None:
        strategy = config.strategy
        reasons["strategy"] = (f"{'FSDP (FSDP2 fully_shard: parameters, gradients and optimizer states sharded)' if strategy == 'fsdp' else 'DDP'}"
                               ": set in training_config.json")
    elif need_gb > mem_gb and workers > 1:
        strategy = "fsdp"
        reasons["strategy"] = f"FSDP: ~{need_gb:.1f} GB does not fit one {mem_gb:.1f} GB device"
    else:
        strategy = "ddp"
        reasons["strategy"] = (
            "DDP: the model fits one device" if workers > 1 else "single worker: the model fits one device"
        )
    return strategy
