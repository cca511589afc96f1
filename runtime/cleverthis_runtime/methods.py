"""Fine-tuning methods and data layouts beside the plain path of train.py: sequence packing and QLoRA.

QLoRA. The frozen base is loaded through bitsandbytes (`BitsAndBytesConfig`: 4-bit nf4 with double
quantization, or 8-bit), prepared with peft's `prepare_model_for_kbit_training` (fp32 norms and head,
input gradients for checkpointing), and LoRA adapters train on top in full precision. A checkpoint keeps
the adapter alone in `adapter_model/` and, at its root, MERGED weights in full precision: the merge is
never done into the quantized base (that would re-quantize the adapter's delta and lose it). Instead the
base is loaded again in fp32 (dequantized: the original weights), the trained adapter is copied into a
fresh peft model over it, and `merge_and_unload()` folds it in. `checkpoint.json`'s `base_model` is the
original (unquantized) base, so `PeftModel.from_pretrained(base, "<ckpt>/adapter_model")` also works.
"""

from __future__ import annotations

from typing import Any

from .data import PackedCollator, pack_rows
from .spec import TrainingConfig


def pack(train_rows: list[dict[str, Any]], val_rows: list[dict[str, Any]], max_len: int
         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Best-fit-decreasing packing of both sets (position_ids isolate the examples of a row)."""
    return pack_rows(train_rows, max_len), (pack_rows(val_rows, max_len) if val_rows else val_rows)


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


def load_quantized(path: str, tc: TrainingConfig, torch: Any, *, gradient_checkpointing: bool = False) -> Any:
    """The frozen base in 4 or 8 bits on this worker's device, prepared for k-bit training (LoRA goes on top)."""
    from peft import prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(path, quantization_config=bnb_config(tc, torch),
                                                 dtype=torch.float32, device_map={"": device})
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)


def merged_full_precision(base_path: str, peft_model: Any, torch: Any) -> Any:
    """The adapter merged into the base loaded in fp32 (never into the quantized weights)."""
    from peft import get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32, device_map={"": "cpu"})
    name = peft_model.active_adapter if isinstance(peft_model.active_adapter, str) else "default"
    cfg = peft_model.peft_config[name]
    fresh = get_peft_model(base, cfg)
    state = {k: v.detach().to("cpu", torch.float32) for k, v in get_peft_model_state_dict(peft_model).items()}
    set_peft_model_state_dict(fresh, state)
    return fresh.merge_and_unload()
