"""A worker's memory: what the plan expects it to hold at its peak (`per_worker`), and what it held (`peak`).

The estimate, per worker, in bytes (P: the model's parameters, T: the trainable ones, b: batch size, s: sequence
length (max_seq_length, the longest a row can be), L: decoder layers, h: hidden size, i: MLP size, a: attention
heads, V: vocabulary):

- weights: P x bytes of the dtype the weights load in (plan.weights_dtype: fp32 4, bf16/fp16 2; QLoRA's
  quantized linear layers 4-bit ~0.52 (nf4 + double-quantized scales) or 8-bit ~1.02, while its embeddings, head
  and norms stay unquantized and peft's prepare_model_for_kbit_training makes them fp32). A full fine-tune under
  mixed precision keeps fp32 master weights, and on a GPU autocast caches a 16-bit copy of each weight for the
  backward (+2 per parameter). QLoRA on CPU: each quantized layer is read unquantized first (4 bytes a weight),
  and the allocator keeps that memory resident, so the training's memory comes on top of it (on a GPU torch's
  caching allocator reuses it for the training's tensors).
- gradients: T x 4 (trained weights are fp32: a full fine-tune's master weights, LoRA's adapters).
- optimizer: T x the optimizer's state bytes (OPTIMIZER_STATE_BYTES: AdamW two fp32 moments 8, 8-bit AdamW 2,
  Adafactor's factored second moment ~0).
- activations: b x s x L x (11h + 4i + 2as) elements (what a Llama-shaped layer keeps for its backward: norms,
  q/k/v, rotary q/k, attention output, residuals, the MLP's gate/up/act/product; 2as: eager or CPU attention's
  scores and probabilities, which flash and memory-efficient attention on a GPU do not keep), plus, for LoRA, a
  dropout copy of each targeted layer's input. 2 bytes an element under 16-bit autocast, else 4. With gradient
  checkpointing a layer keeps only its input (b x s x L x h) and one layer's full set is live while it is
  recomputed. The logits: b x s x V x 4 x 3 (fp32 logits, their log-softmax and its gradient). The whole is
  multiplied by ACTIVATION_WORKING_SET: the backward's working set (gradients of the activations alive beside the
  saved ones, the allocator's slack), measured on CPU at 1.5.
- process: the fixed overhead. On CPU the resident size of Python with torch, transformers, peft and datasets
  imported (measured in the worker as it plans; CPU_PROCESS_BYTES where it is not, as in the pre-flight); on a
  GPU the CUDA context (CUDA_CONTEXT_BYTES), the device memory torch reserves before any tensor.

The measured peak: on CPU the worker process's peak resident size (getrusage's ru_maxrss), on a GPU
`torch.cuda.max_memory_reserved` plus the CUDA context (NVML's figure for this process where it has one).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from typing import Any

GB = 1e9
#: measured: Python 3.11 with torch 2.13, transformers 5.25, peft, datasets and the runtime imported (CPU)
CPU_PROCESS_BYTES = 0.55e9
#: the CUDA context with torch's kernels loaded lazily (CUDA 12, H100/H200 class)
CUDA_CONTEXT_BYTES = 0.6e9
ACTIVATION_WORKING_SET = 1.5
#: optimizer state bytes per trainable parameter (TrainingArguments `optim` names)
OPTIMIZER_STATE_BYTES = {
    "adamw_torch": 8.0, "adamw_torch_fused": 8.0, "paged_adamw_32bit": 8.0,
    "adamw_bnb_8bit": 2.0, "paged_adamw_8bit": 2.0, "adafactor": 0.0,
}
#: bytes per weight of a dtype the weights load in (plan.weights_dtype); 4/8-bit: quantized linear layers
WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "8bit": 1.02, "4bit": 0.52}


@dataclass
class Workload:
    """What the activations and QLoRA's unquantized layers depend on, read from the model and the job."""

    batch_size: int
    seq_len: int
    hidden: int
    layers: int
    intermediate: int
    heads: int
    vocab: int
    #: parameters outside the decoder's linear layers (embeddings, head, norms): never quantized
    unquantized_params: float
    #: LoRA's trainable parameters (lora_r on the targeted layers) and the targeted layers' inputs per layer
    adapter_params: float = 0.0
    adapter_inputs: float = 0.0


def workload(model: Any, tc: Any, batch_size: int) -> Workload:
    """The job's `Workload` from the model (a real or meta-device build: only shapes are read)."""
    from . import lora_targets

    cfg = getattr(model, "config", None)

    def get(*names: str, default: int = 0) -> int:
        for n in names:
            v = getattr(cfg, n, None)
            if isinstance(v, int) and v > 0:
                return v
        return default

    hidden = get("hidden_size", "n_embd", "d_model", default=1)
    linear = lora_targets.linear_modules(model)
    linear_params = 0.0
    modules = dict(model.named_modules())
    for name in linear:
        w = getattr(modules[name], "weight", None)
        linear_params += float(_numel(w)) if w is not None else 0.0
    total = float(sum(_numel(p) for p in model.parameters()))
    try:
        targets, _ = lora_targets.choose(model, tc.target_modules)
    except lora_targets.TargetModulesError:
        targets = lora_targets.ALL_LINEAR
    layers = get("num_hidden_layers", "n_layer", "num_layers", default=1)
    adapter = inputs = 0.0
    for name in linear:
        if targets == lora_targets.ALL_LINEAR or any(lora_targets.matches(name, t) for t in targets):
            fan_in, fan_out = _fans(modules[name])
            adapter += tc.lora_r * (fan_in + fan_out)
            inputs += fan_in
    return Workload(batch_size=batch_size, seq_len=tc.max_seq_length, hidden=hidden, layers=layers,
                    intermediate=get("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden),
                    heads=get("num_attention_heads", "n_head", default=1), vocab=get("vocab_size", default=0),
                    unquantized_params=total - linear_params, adapter_params=adapter,
                    adapter_inputs=inputs / max(1, layers))


def _numel(p: Any) -> int:
    # a 4-bit weight packs two values per stored byte
    return p.numel() * (2 if type(p).__name__ == "Params4bit" else 1)


def _fans(mod: Any) -> tuple[float, float]:
    if hasattr(mod, "in_features") and hasattr(mod, "out_features"):
        return float(mod.in_features), float(mod.out_features)
    rows, cols = mod.weight.shape  # GPT-2's Conv1D keeps (in, out)
    return float(rows), float(cols)


def per_worker(*, params: float, method: str, weights: str, precision: str, optim: str, gradient_checkpointing: bool,
               on_gpu: bool, work: Workload | None, attention: str | None = None,
               process_bytes: float | None = None) -> dict[str, float]:
    """The estimate's parts (weights, gradients, optimizer, activations, loading: QLoRA's unquantized read on CPU,
    process) and their `total`, in GB (the module's docstring gives each formula). Without a
    `work` (the model unknown) there are no activations and LoRA's adapter counts as 1% of the weights."""
    sixteen = precision in ("bf16", "fp16")
    loading = 0.0
    if method == "full":
        trainable = params
        weight_bytes = params * 4.0 + (params * 2.0 if on_gpu and sixteen else 0.0)
    else:
        trainable = work.adapter_params if work else 0.01 * params
        if method == "qlora" and weights in ("4bit", "8bit") and work:
            quantized = params - work.unquantized_params
            weight_bytes = quantized * WEIGHT_BYTES[weights] + work.unquantized_params * 4.0
            loading = 0.0 if on_gpu else quantized * 4.0  # read unquantized before quantizing, kept resident
        else:
            weight_bytes = params * WEIGHT_BYTES.get(weights, 4.0)
        weight_bytes += trainable * 4.0  # the adapters are fp32
    parts = {
        "weights": weight_bytes,
        "gradients": trainable * 4.0,
        "optimizer": trainable * OPTIMIZER_STATE_BYTES.get(optim, 8.0),
        "activations": _activations(work, method, sixteen, gradient_checkpointing, on_gpu, attention) if work else 0.0,
        "loading": loading,
        "process": CUDA_CONTEXT_BYTES if on_gpu else (process_bytes or CPU_PROCESS_BYTES),
    }
    out = {k: round(v / GB, 3) for k, v in parts.items()}
    out["total"] = round(sum(parts.values()) / GB, 3)
    return out


def _activations(w: Workload, method: str, sixteen: bool, checkpointing: bool, on_gpu: bool,
                 attention: str | None) -> float:
    tokens = float(w.batch_size * w.seq_len)
    scores = 0.0 if on_gpu and attention not in ("eager", None) else 2.0 * w.heads * w.seq_len
    per_layer = 11.0 * w.hidden + 4.0 * w.intermediate + scores
    if method in ("lora", "qlora"):
        per_layer += w.adapter_inputs  # LoRA's dropout copy of each targeted layer's input
    element = 2.0 if sixteen else 4.0
    kept = tokens * (w.layers * w.hidden + per_layer) if checkpointing else tokens * w.layers * per_layer
    logits = tokens * w.vocab * 4.0 * 3.0
    return ACTIVATION_WORKING_SET * (kept * element + logits)


def process_bytes() -> float | None:
    """This process's resident size now (the fixed overhead, measured before the model's tensors grow it)."""
    try:
        import psutil

        return float(psutil.Process().memory_info().rss)
    except Exception:  # noqa: BLE001 - the plan falls back to CPU_PROCESS_BYTES
        return None


def peak(torch: Any) -> dict[str, Any]:
    """The worker's peak memory so far: `peak_bytes` (what the plan's total is compared with: the process's peak
    resident size on CPU, the device memory on a GPU) and its sources."""
    out: dict[str, Any] = {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    out["peak_bytes"] = out["peak_rss_bytes"]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        dev = torch.cuda.current_device()
        allocated, reserved = int(torch.cuda.max_memory_allocated(dev)), int(torch.cuda.max_memory_reserved(dev))
        out.update(gpu_peak_allocated_bytes=allocated, gpu_peak_reserved_bytes=reserved)
        context = _nvml_context(dev, torch)
        out["gpu_context_bytes"] = int(context if context is not None else CUDA_CONTEXT_BYTES)
        out["peak_bytes"] = reserved + out["gpu_context_bytes"]
    return out


def _nvml_context(dev: int, torch: Any) -> float | None:
    """The CUDA context: NVML's device memory of this process less what torch's allocator holds (None without
    NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        v = visible[dev] if dev < len(visible) else str(dev)
        handle = pynvml.nvmlDeviceGetHandleByUUID(v) if v.startswith(("GPU-", "MIG-")) \
            else pynvml.nvmlDeviceGetHandleByIndex(int(v))
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory:
                return max(0.0, float(proc.usedGpuMemory) - float(torch.cuda.memory_reserved(dev)))
    except Exception:  # noqa: BLE001 - no NVML, or not allowed to list processes
        return None
    return None


def words(planned_gb: float | None, peak_bytes: float | None) -> str:
    """The job detail's line: "memory: planned 1.9 GB, peak 2.1 GB"."""
    parts = []
    if planned_gb is not None:
        parts.append(f"planned {planned_gb:.1f} GB")
    if peak_bytes is not None:
        parts.append(f"peak {peak_bytes / GB:.1f} GB")
    return "memory: " + ", ".join(parts) if parts else ""
