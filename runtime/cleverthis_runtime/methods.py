"""Fine-tuning methods and data layouts beside the plain path of train.py: sequence packing and QLoRA.

QLoRA. The frozen base is loaded through bitsandbytes (`BitsAndBytesConfig`: 4-bit nf4 with double
quantization, or 8-bit), prepared with peft's `prepare_model_for_kbit_training` (fp32 norms and head,
input gradients for checkpointing), and LoRA adapters train on top in full precision. A checkpoint keeps
the adapter alone in `adapter_model/` and, at its root, MERGED weights in full precision: the merge is
never done into the quantized base (that would re-quantize the adapter's delta and lose it). Instead the
base is loaded again unquantized in the training precision (the original weights), the trained adapter is
copied into a fresh peft model over it, and `merge_and_unload()` folds it in. `checkpoint.json`'s `base_model` is the
original (unquantized) base, so `PeftModel.from_pretrained(base, "<ckpt>/adapter_model")` also works.
"""

from __future__ import annotations

from typing import Any

from .data import PackedCollator
from .spec import TrainingConfig


def packing_refusal(model: Any) -> str | None:
    """Why packing cannot keep this model's examples apart, or None when it can.

    Packed rows carry no attention mask, only `position_ids` restarting at 0 per example; transformers'
    `masking_utils.create_causal_mask` turns those restarts into a block-diagonal mask. That needs a model whose
    forward takes `position_ids` and whose modeling code builds its mask there (tested: packed loss == unpacked
    loss for Llama, Mistral, Mixtral, Gemma, Falcon, GPT-2, Qwen2 and Phi-3)."""
    import inspect
    import sys

    model_type = getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__
    base = getattr(model, "get_base_model", lambda: model)()
    if "position_ids" not in inspect.signature(base.forward).parameters:
        return (f"packing needs a model that takes position_ids to keep packed examples apart; {model_type} does "
                "not (it uses ALiBi or learned offsets): set packing to false")
    module = sys.modules.get(type(base).__module__)
    try:
        source = inspect.getsource(module) if module else ""
    except (OSError, TypeError):
        source = ""
    if "create_causal_mask" not in source:
        return (f"packing needs transformers' packed-sequence mask, which {model_type}'s modeling code does not "
                "use, so packed examples would attend to each other: set packing to false")
    return None


def attention(model: Any, devices: list[Any]) -> str | None:
    """The attention implementation packed rows would run with: flash_attention_2 where it can (every device a
    CUDA GPU of compute capability >= 8.0, and the flash_attn package installed), else the model's own."""
    import importlib.util

    cuda = bool(devices) and all(d.kind == "cuda" and (d.compute_capability or 0) >= 8.0 for d in devices)
    if cuda and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return getattr(getattr(model, "config", None), "_attn_implementation", None)


def grouped_sampler(lengths: list[int], batch_size: int, seed: int, world: int = 1) -> Any:
    """The training order of length-grouped batches, decided by (seed, epoch) alone so that a resume is exact.

    Like transformers' `LengthGroupedSampler`, a seeded permutation is cut into mega-batches of 50 batches, each
    sorted by length and cut into batches of similar length (little padding). Unlike it, the batches are then
    shuffled (in steps of `world` batches, one per worker, so the workers of a step get similar lengths): the loss
    curve shows no saw-tooth from long to short within each mega-batch. The Trainer calls `set_epoch` each epoch
    (through accelerate's wrappers), and its resume skips the batches already seen."""
    import torch
    from torch.utils.data import Sampler

    class GroupedSampler(Sampler[int]):
        def __init__(self) -> None:
            self.lengths, self.epoch = list(lengths), 0

        def set_epoch(self, epoch: int) -> None:
            self.epoch = int(epoch)

        def __len__(self) -> int:
            return len(self.lengths)

        def __iter__(self) -> Any:
            return iter(grouped_order(self.lengths, batch_size, seed, self.epoch, world, torch))

    return GroupedSampler()


def grouped_order(lengths: list[int], batch_size: int, seed: int, epoch: int, world: int, torch: Any) -> list[int]:
    """The indices of one epoch of `grouped_sampler`."""
    g = torch.Generator()
    g.manual_seed(seed * 100_003 + epoch)
    unit = max(1, batch_size) * max(1, world)
    mega = unit * max(1, min(len(lengths) // (unit * 4), 50))
    perm = torch.randperm(len(lengths), generator=g).tolist()
    chunks: list[list[int]] = []
    for start in range(0, len(perm), mega):
        group = sorted(perm[start:start + mega], key=lambda i: -lengths[i])
        chunks.extend(group[k:k + unit] for k in range(0, len(group), unit))
    full = [c for c in chunks if len(c) == unit]  # a short chunk (the data's end) stays last: batches stay aligned
    order = torch.randperm(len(full), generator=g).tolist()
    return [i for k in order for i in full[k]] + [i for c in chunks if len(c) < unit for i in c]


def packed_collator(tokenizer: Any) -> PackedCollator:
    return PackedCollator(tokenizer.pad_token_id)


def is_quantized(tc: TrainingConfig) -> bool:
    return tc.method == "qlora" and tc.quantization is not None


def bnb_config(tc: TrainingConfig, torch: Any) -> Any:
    from transformers import BitsAndBytesConfig

    if tc.quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    compute = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(tc.mixed_precision or "", torch.float32)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=compute)


def torch_dtype(weights: str, torch: Any) -> Any:
    """The torch dtype of a plan's `weights_dtype`; a quantized base's other layers (embeddings, norms, head) and
    its merged copy use the compute dtype, which is the training precision."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(weights, torch.float32)


def compute_weights(tc: TrainingConfig) -> str:
    """The dtype a QLoRA job's unquantized weights and merged checkpoints take: its compute precision."""
    return tc.mixed_precision if tc.mixed_precision in ("bf16", "fp16") else "fp32"


def load_options(weights: str, torch: Any) -> dict[str, Any]:
    """The `from_pretrained` keywords every load of the model shares: the dtype the plan chose (plan.weights_dtype)."""
    return {"dtype": torch_dtype(weights, torch)}


def load_quantized(path: str, tc: TrainingConfig, torch: Any, *, gradient_checkpointing: bool = False) -> Any:
    """The frozen base in 4 or 8 bits on this worker's device, prepared for k-bit training (LoRA goes on top)."""
    from peft import prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(path, quantization_config=bnb_config(tc, torch),
                                                 **load_options(compute_weights(tc), torch), device_map={"": device})
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)


def merged_unquantized(base_path: str, peft_model: Any, weights: str, torch: Any) -> Any:
    """The adapter merged into the base loaded unquantized, in `weights` (the training precision), never into the
    quantized weights: that would re-quantize the adapter's delta and lose it."""
    from peft import get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_path, **load_options(weights, torch), device_map={"": "cpu"})
    name = peft_model.active_adapter if isinstance(peft_model.active_adapter, str) else "default"
    cfg = peft_model.peft_config[name]
    fresh = get_peft_model(base, cfg)
    state = {k: v.detach().to("cpu", torch.float32) for k, v in get_peft_model_state_dict(peft_model).items()}
    set_peft_model_state_dict(fresh, state)
    return fresh.merge_and_unload()
