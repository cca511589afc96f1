"""Which modules LoRA adapts, per architecture: the same rule on the cluster (the real model) and at pre-flight
(a meta-device build from the config, no weights read).

- unset: peft's own per-model-type default where peft has the model type, else every linear layer of the
  attention blocks;
- `"all-linear"`: every linear layer but the output head, as peft does;
- a list: each name must match a linear module of the model (peft's rule: the module's name, or its last
  components); otherwise pre-flight names `target_modules` and lists the model's linear module names.
"""

from __future__ import annotations

from typing import Any

ALL_LINEAR = "all-linear"
_ATTENTION = ("attn", "attention")


class TargetModulesError(ValueError):
    """`target_modules` names a module the model does not have."""


def linear_modules(model: Any) -> dict[str, str]:
    """Full name -> short name of every linear layer (torch Linear, GPT-2's Conv1D, bitsandbytes' Linear4bit/8bit)
    except the output head."""
    import torch
    from transformers.pytorch_utils import Conv1D

    out: dict[str, str] = {}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for name, mod in model.named_modules():
        if mod is head or name.split(".")[-1] == "lm_head":
            continue
        if isinstance(mod, (torch.nn.Linear, Conv1D)) or type(mod).__name__ in ("Linear4bit", "Linear8bitLt"):
            out[name] = name.split(".")[-1]
    return out


def matches(full: str, target: str) -> bool:
    return full == target or full.endswith("." + target)


def _in_attention(full: str) -> bool:
    return any(a in part.lower() for part in full.split(".")[:-1] for a in _ATTENTION)


def choose(model: Any, requested: list[str] | str | None) -> tuple[list[str] | str, str]:
    """(target_modules for peft's LoraConfig, the reason in words). Raises TargetModulesError for a list that
    names a module the model lacks."""
    linear = linear_modules(model)
    names = sorted(set(linear.values()))
    model_type = getattr(getattr(model, "config", None), "model_type", None) or "this model"
    if requested == ALL_LINEAR or requested == [ALL_LINEAR]:
        return ALL_LINEAR, f"all-linear, as asked: every linear layer but the output head ({', '.join(names)})"
    if requested:
        missing = [t for t in requested if not any(matches(f, t) for f in linear)]
        if missing:
            raise TargetModulesError(
                f"{model_type} has no linear module named {', '.join(repr(m) for m in missing)}; "
                f"its linear modules are {', '.join(names)} (or use \"all-linear\")"
            )
        return list(requested), "as asked in training_config"
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS

    default = PEFT_DEFAULTS.get(model_type)
    if default and all(any(matches(f, t) for f in linear) for t in default):
        return list(default), f"peft's default for {model_type}"
    attention = sorted({short for full, short in linear.items() if _in_attention(full)})
    if attention:
        return attention, f"every linear layer of the attention blocks (peft has no default for {model_type})"
    return ALL_LINEAR, f"every linear layer ({model_type} has no attention block peft knows)"


def lora_config(model: Any, targets: list[str] | str, *, r: int, alpha: float, dropout: float) -> Any:
    """peft's LoraConfig for `targets` of `model`, with `fan_in_fan_out` set when the targeted layers keep their
    weight as (in, out), as GPT-2's Conv1D does (peft corrects a wrong value per layer, with a warning each)."""
    from peft import LoraConfig
    from transformers.pytorch_utils import Conv1D

    conv1d = any(isinstance(mod, Conv1D) and (targets == ALL_LINEAR or any(matches(name, t) for t in targets))
                 for name, mod in model.named_modules())
    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, task_type="CAUSAL_LM",
                      fan_in_fan_out=conv1d)


def meta_model(base_model: str, trust_remote_code: bool = False) -> Any:
    """The model built on the meta device from its config: module names and shapes, no weights read."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(base_model, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg, trust_remote_code=trust_remote_code)
