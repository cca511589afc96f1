"""The plan's strategy/method/packing reasons and the DeepSpeed dict built from training_config (no Ray)."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from cleverthis_runtime.plan import GB, Device, make_plan
from cleverthis_runtime.spec import TrainingConfig
from cleverthis_runtime.strategies import deepspeed_config, torch_extensions_dir

CPU = [Device("cpu", 64 * GB)]


def plan(**cfg):
    return make_plan(params=1e6, devices=CPU, workers=2, config=TrainingConfig(**cfg))


def test_fsdp_when_set_and_says_so():
    p = plan(strategy="fsdp")
    assert p.strategy == "fsdp" and "FSDP2" in p.reasons["strategy"] and "training_config" in p.reasons["strategy"]


def test_deepspeed_reason_names_stage_and_offload():
    p = plan(deepspeed={"zero_stage": 3, "offload_param": True, "offload_optimizer": True})
    assert p.strategy == "deepspeed-zero3"
    assert "ZeRO-3" in p.reasons["strategy"] and "optimizer states and parameters" in p.reasons["strategy"]


def test_strategy_and_deepspeed_exclude_each_other():
    with pytest.raises(ValidationError, match="exclude each other"):
        TrainingConfig(strategy="fsdp", deepspeed={"zero_stage": 2})


@pytest.mark.parametrize("bits,word", [("4bit", "nf4"), ("8bit", "8bit")])
def test_qlora_and_packing_reasons(bits, word):
    p = plan(method="qlora", quantization=bits, packing=True)
    assert p.method == "qlora" and word in p.reasons["method"] and "bitsandbytes" in p.reasons["method"]
    assert p.batching == "packed" and p.reasons["batching"].startswith("packed: set in training_config")


def test_deepspeed_dict():
    assert deepspeed_config(TrainingConfig()) is None
    z2 = deepspeed_config(TrainingConfig(deepspeed={"zero_stage": 2, "offload_optimizer": True}))
    assert z2["zero_optimization"]["stage"] == 2 and z2["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert z2["optimizer"]["type"] == "AdamW"  # DeepSpeed's CPU Adam steps offloaded states
    z3 = deepspeed_config(TrainingConfig(deepspeed={"zero_stage": 3, "offload_param": True}))
    assert z3["zero_optimization"]["offload_param"]["device"] == "cpu" and "optimizer" not in z3
    assert z3["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True


def test_extension_cache_dir(monkeypatch, tmp_path):
    """One op cache per Python environment: a second venv (another checkout) gets its own folder."""
    import sys

    monkeypatch.setenv("CLEVERTHIS_HOME", str(tmp_path))
    mine = torch_extensions_dir()
    assert os.path.dirname(mine) == str(tmp_path / "torch_extensions")
    assert os.path.basename(mine).startswith(f"py{sys.version_info.major}.{sys.version_info.minor}-")
    from importlib import metadata

    real_version = metadata.version
    monkeypatch.setattr(metadata, "version", lambda d: "0.0-other" if d == "torch" else real_version(d))
    assert torch_extensions_dir() != mine  # the same venv with another torch: ops built against other headers
    monkeypatch.setattr(metadata, "version", real_version)
    assert torch_extensions_dir() == mine
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "another-venv"))
    assert torch_extensions_dir() != mine and os.path.dirname(torch_extensions_dir()) == os.path.dirname(mine)
    monkeypatch.delenv("CLEVERTHIS_HOME")
    assert os.path.dirname(torch_extensions_dir()).endswith(".cache/cleverthis/torch_extensions")
