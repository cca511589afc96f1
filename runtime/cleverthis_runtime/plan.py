"""The automatic choices, computed before training and explained: a pure function, no torch needed.

Memory (memory.py gives every formula). `estimate` is what a method's weights, gradients and optimizer states
take per worker, known from the parameter count alone: a full fine-tune keeps fp32 master weights, fp32 gradients
and AdamW's two fp32 moments, 16 bytes a parameter (18 under 16-bit autocast on a GPU, which caches a 16-bit
copy of each weight for the backward): 7B -> ~126 GB. LoRA reads a frozen base in the 16-bit training precision
(2 bytes) and trains adapters of ~1% of it: 7B -> ~15 GB; QLoRA's 4-bit base ~0.5 bytes: 7B -> ~5 GB.
`memory_per_worker_gb` adds, once the model's shape is known (memory.Workload), the activations of batch_size x
max_seq_length tokens through its layers and the process's fixed overhead: the figure the job's measured peak
(its `memory` event) is compared with.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from . import memory, parallel
from .spec import JobSpec, TrainingConfig, parallelism_error

GB = 1e9
#: attention implementations that run packed rows as variable-length sequences: no padding, no mask
VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3")
METHODS = ("full", "lora", "qlora")


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
    #: the dtype the model's weights load in: "bf16"/"fp16" (a frozen LoRA base under mixed precision), "fp32",
    #: or "4bit"/"8bit" (QLoRA's quantized base)
    weights_dtype: str = "fp32"
    #: the disk one checkpoint takes (GB): "each" (every checkpoint), "merged" (what a LoRA job's best and epoch-final
    #: add: the merged weights), and "keep" (training_config keep_checkpoints, None: every one is kept)
    checkpoint_gb: dict[str, Any] = field(default_factory=dict)
    #: the TrainingArguments optimizer (training_config optim, or the method's default)
    optim: str = "adamw_torch"
    #: the attention implementation the model trains with (None: the model's own)
    attn_implementation: str | None = None
    #: per worker, GB: weights, gradients, optimizer, activations, process and their total (memory.per_worker)
    memory_per_worker_gb: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate(params: float, method: str, precision: str = "bf16", optim: str = "adamw_torch",
             quantization: str = "4bit") -> float:
    """GB of `method`'s weights, gradients and optimizer states per worker (no activations, no process: the floor
    a device must hold), from the parameter count alone (memory.per_worker without a workload)."""
    sixteen = precision in ("bf16", "fp16")
    weights = {"full": "fp32", "lora": precision if sixteen else "fp32", "qlora": quantization}[method]
    parts = memory.per_worker(params=params, method=method, weights=weights, precision=precision, optim=optim,
                              gradient_checkpointing=False, on_gpu=sixteen, work=None)
    return parts["total"] - parts["process"]


#: bytes per parameter of the loaded weights (QLoRA 4-bit: nf4 with double quantization, plus the layers that stay
#: in 16 bits, e.g. embeddings and norms)
WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "8bit": 1.1, "4bit": 0.55}


def precision_of(config: TrainingConfig, devices: list[Device]) -> tuple[str, str]:
    """The training precision ("bf16", "fp16" or "no") and why: known before the model loads, so the base can load
    in it."""
    dev = min(devices, key=lambda d: d.memory_bytes) if devices else Device("cpu", 16 * GB)
    if config.mixed_precision is not None:
        return config.mixed_precision, f"{config.mixed_precision}: set in training_config.json"
    if config.deepspeed is not None and (config.deepspeed.bf16 or config.deepspeed.fp16):
        precision = "bf16" if config.deepspeed.bf16 else "fp16"
        return precision, f"{precision}: from the deepspeed section"
    if dev.kind == "cuda" and (dev.compute_capability or 0) >= 8.0:
        return "bf16", f"bf16: compute capability {dev.compute_capability} >= 8.0"
    if dev.kind == "cuda":
        return "fp16", f"fp16: compute capability {dev.compute_capability} < 8.0"
    return "no", "fp32: training on CPU"


def method_of(config: TrainingConfig, params: float, devices: list[Device], precision: str) -> tuple[str, str]:
    """full, lora or qlora, and why (a full fine-tune where it fits one device)."""
    dev = min(devices, key=lambda d: d.memory_bytes) if devices else Device("cpu", 16 * GB)
    mem_gb = dev.memory_bytes / GB
    full_gb = estimate(params, "full", precision)
    if config.method is not None:
        return config.method, f"{config.method}: set in training_config.json"
    if config.model_parallel_size > 1:
        what = "tensor" if config.tensor_parallel_size > 1 else "pipeline"
        return "full", (f"full: {what} parallelism splits the full weights over the workers "
                        "(LoRA adapters are not split over them)")
    if full_gb <= mem_gb:
        return "full", f"full: ~{full_gb:.1f} GB fits the {mem_gb:.1f} GB per device"
    return "lora", f"lora: a full fine-tune needs ~{full_gb:.1f} GB, more than the {mem_gb:.1f} GB per device"


def weights_dtype(method: str, precision: str, config: TrainingConfig) -> str:
    """The dtype the weights load in. A frozen base (LoRA) loads in the 16-bit training precision: it is only
    read, so half the bytes cost nothing in accuracy. Trained weights (a full fine-tune) load in fp32 and mixed
    precision computes in 16 bits from them (fp32 master weights: the optimizer's small updates are not rounded
    away; DeepSpeed keeps its own fp32 copy the same way). QLoRA's base is quantized (4 or 8 bits)."""
    if method == "qlora" and config.quantization:
        return config.quantization
    if method in ("lora", "qlora") and precision in ("bf16", "fp16"):
        return precision
    return "fp32"


def _weights_reason(weights: str, method: str, precision: str) -> str:
    if weights in ("4bit", "8bit"):
        return f"{weights}: QLoRA's frozen base, quantized through bitsandbytes"
    if weights != "fp32":
        return f"{weights}: the frozen base in the training precision (the adapter trains in fp32)"
    if method == "full" and precision in ("bf16", "fp16"):
        return f"fp32: trained weights stay fp32 master weights; {precision} autocast computes"
    return "fp32: training in full precision"


def make_plan(*, params: float, devices: list[Device], workers: int, config: TrainingConfig,
              attention: str | None = None, packing_refusal: str | None = None, raw_text: bool = False,
              workload: memory.Workload | None = None, process_bytes: float | None = None) -> Plan:
    """`attention`: the attention implementation the model would run packed rows with; `packing_refusal`: why this
    model cannot keep packed examples apart (methods.packing_refusal), None when it can; `raw_text`: the data is
    raw text, cut into blocks; `workload`: the model's shape and the batch (memory.workload), for the per-worker
    memory estimate; `process_bytes`: the process's resident size before the model (its fixed overhead on CPU)."""
    dev = min(devices, key=lambda d: d.memory_bytes) if devices else Device("cpu", 16 * GB)
    reasons: dict[str, str] = {}
    on_gpu = dev.kind == "cuda"
    problem = parallelism_error(config, framework="torch", workers=workers)
    if problem:
        raise PlanError(f"training_config: {problem}")

    precision, reasons["precision"] = precision_of(config, devices)
    est = {m: round(estimate(params, m, precision), 3) for m in METHODS}
    mem_gb = dev.memory_bytes / GB
    method, reasons["method"] = method_of(config, params, devices, precision)
    attention = _attention(config, on_gpu, attention, reasons)
    _refuse_liger(config, on_gpu)
    if method == "qlora" and config.quantization:
        reasons["method"] += (f"; the frozen base is quantized to {config.quantization}"
                              f"{' (nf4)' if config.quantization == '4bit' else ''} through bitsandbytes")
    batching = _blocks(config, packing_refusal, reasons) if raw_text else \
        _batching(config, attention, packing_refusal, reasons)

    weights = weights_dtype(method, precision, config)
    reasons["weights_dtype"] = _weights_reason(weights, method, precision)
    weights_gb = params * WEIGHT_BYTES[weights] / GB
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
    disk = checkpoint_disk(params, method, weights, config)
    reasons["checkpoints"] = _disk_reason(disk, method)
    optim = _optim(config, method, on_gpu, reasons)
    per_worker = memory.per_worker(params=params, method=method, weights=weights, precision=precision, optim=optim,
                                   gradient_checkpointing=gc, on_gpu=on_gpu, work=workload, attention=attention,
                                   process_bytes=process_bytes)
    reasons["memory"] = _memory_reason(per_worker, workload, weights, optim, on_gpu)
    return Plan(method, precision, strategy, gc, est, reasons, layout, batching, weights, disk, optim,
                attention if config.attn_implementation or batching == "packed" else None, per_worker)


def _attention(config: TrainingConfig, on_gpu: bool, attention: str | None, reasons: dict[str, str]) -> str | None:
    """The configured attention implementation, refused where it cannot run; else the caller's (the one packed rows
    would run with)."""
    chosen = config.attn_implementation
    if chosen is None:
        return attention
    if chosen == "flash_attention_2":
        import importlib.util

        if not on_gpu:
            raise PlanError("training_config.attn_implementation: flash_attention_2 runs on CUDA GPUs only; these "
                            "workers train on CPU (use sdpa or eager, or give the workers GPUs)")
        if importlib.util.find_spec("flash_attn") is None:
            raise PlanError("training_config.attn_implementation: flash_attention_2 needs the flash-attn package on "
                            "the workers, which is not installed (pip install flash-attn, or use sdpa)")
    reasons["attn_implementation"] = f"{chosen}: set in training_config.json"
    return chosen


def _refuse_liger(config: TrainingConfig, on_gpu: bool) -> None:
    """Liger's kernels are Triton GPU kernels: refused, naming the field, where they cannot run."""
    if not config.use_liger_kernel:
        return
    import importlib.util

    if importlib.util.find_spec("liger_kernel") is None:
        raise PlanError("training_config.use_liger_kernel: the liger-kernel package is not installed on the workers "
                        "(pip install liger-kernel), or set use_liger_kernel to false")
    if not on_gpu:
        raise PlanError("training_config.use_liger_kernel: Liger's kernels are Triton kernels for CUDA GPUs; these "
                        "workers train on CPU (set use_liger_kernel to false, or give the workers GPUs)")


BNB_OPTIMIZERS = ("adamw_bnb_8bit", "paged_adamw_8bit", "paged_adamw_32bit")


def _optim(config: TrainingConfig, method: str, on_gpu: bool, reasons: dict[str, str]) -> str:
    """The optimizer (TrainingArguments `optim`) and why."""
    if config.optim is not None:
        optim = config.optim
        if optim in BNB_OPTIMIZERS:
            import importlib.util

            if importlib.util.find_spec("bitsandbytes") is None:
                raise PlanError(f"training_config.optim: {optim} needs the bitsandbytes package on the workers, which "
                                "is not installed (pip install bitsandbytes, or use adamw_torch)")
        paged = optim.startswith("paged_") and not on_gpu
        reasons["optim"] = f"{optim}: set in training_config.json" + (
            "; bitsandbytes pages optimizer states through CUDA only, so on CPU the states stay unpaged" if paged else "")
    elif method == "qlora" and on_gpu:
        optim = "paged_adamw_8bit"
        reasons["optim"] = ("paged_adamw_8bit: QLoRA's default, 8-bit AdamW states that bitsandbytes pages to CPU "
                            "memory when the GPU runs short")
    elif method == "qlora":
        optim = "adamw_torch"
        reasons["optim"] = ("adamw_torch: QLoRA's paged_adamw_8bit pages its states through CUDA, which bitsandbytes "
                            "does not do on CPU, and the adapter's states are small")
    else:
        optim = "adamw_torch"
        reasons["optim"] = "adamw_torch: the Trainer's AdamW (two fp32 moments per trained parameter)"
    return optim


def _memory_reason(parts: dict[str, float], work: memory.Workload | None, weights: str, optim: str,
                   on_gpu: bool) -> str:
    where = "of GPU memory" if on_gpu else "resident"
    shown = (f"weights {parts['weights']:.2f} ({weights}), gradients {parts['gradients']:.2f}, optimizer "
             f"{parts['optimizer']:.2f} ({optim}), ")
    if work is not None:
        shown += (f"activations {parts['activations']:.2f} (batch {work.batch_size} x {work.seq_len} tokens x "
                  f"{work.layers} layers), ")
    if parts.get("loading"):
        shown += f"quantization's unquantized read {parts['loading']:.2f}, "
    shown += f"{'CUDA context' if on_gpu else 'process'} {parts['process']:.2f}"
    return f"~{parts['total']:.1f} GB per worker {where}: {shown}"


#: a LoRA adapter's share of the base's parameters, for the disk estimate (r=16 on attention and MLP projections of
#: a 7B Llama: 40M of 6.7B)
ADAPTER_SHARE = 0.006


def checkpoint_disk(params: float, method: str, weights: str, config: TrainingConfig) -> dict[str, Any]:
    """What a checkpoint writes. Full fine-tune: the fp32 weights and Adam's two fp32 moments (12 bytes per
    parameter). LoRA: the adapter and its Adam moments (fp32), and in best and epoch-final the merged weights in
    the training precision (a QLoRA base merges unquantized, in its compute dtype)."""
    if method == "full":
        return {"each": round(params * 12.0 / GB, 3), "merged": 0.0, "keep": config.keep_checkpoints}
    merged_dtype = weights if weights in ("bf16", "fp16") else \
        (config.mixed_precision if config.mixed_precision in ("bf16", "fp16") else "fp32")
    return {"each": round(params * ADAPTER_SHARE * 12.0 / GB, 3),
            "merged": round(params * WEIGHT_BYTES[merged_dtype] / GB, 3), "keep": config.keep_checkpoints}


def _disk_reason(disk: dict[str, Any], method: str) -> str:
    keep = disk["keep"]
    kept = f"the last {keep} kept besides best and epoch-final" if keep else \
        "every checkpoint kept (keep_checkpoints: unset)"
    if method == "full":
        return f"each checkpoint ~{disk['each']:.3g} GB (fp32 weights and optimizer state); {kept}"
    return (f"each checkpoint is the adapter and its optimizer state (~{disk['each']:.3g} GB); best and epoch-final "
            f"add the merged weights (~{disk['merged']:.3g} GB each); {kept}")


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
