from __future__ import annotations

import pytest

from cleverthis_runtime.plan import GB, Device, make_plan
from cleverthis_runtime.spec import TrainingConfig

A100_40 = Device("cuda", 40 * GB, 8.0)
A100_80 = Device("cuda", 80 * GB, 8.0)
V100 = Device("cuda", 32 * GB, 7.0)


def test_page_numbers_7b():
    plan = make_plan(params=7e9, devices=[A100_40], workers=1, config=TrainingConfig())
    assert 55 <= plan.memory_estimate_gb["full"] <= 65  # "7B full ~60 GB"
    assert 15 <= plan.memory_estimate_gb["lora"] <= 20  # "LoRA ~18 GB"
    assert 6 <= plan.memory_estimate_gb["qlora"] <= 9  # "QLoRA ~8 GB"
    assert plan.method == "lora"
    assert "more than the 40.0 GB" in plan.reasons["method"]
    assert plan.precision == "bf16"


def test_70b_needs_fsdp():
    plan = make_plan(params=70e9, devices=[A100_80] * 8, workers=8, config=TrainingConfig(method="full"))
    assert plan.strategy == "fsdp"


@pytest.mark.parametrize("dev,prec", [(A100_40, "bf16"), (V100, "fp16"), (Device("cpu", 64 * GB), "no")])
def test_precision_by_device(dev, prec):
    assert make_plan(params=1e8, devices=[dev], workers=1, config=TrainingConfig()).precision == prec


def test_configured_choices_win_and_say_so():
    tc = TrainingConfig(method="full", mixed_precision="fp16", gradient_checkpointing=True,
                        deepspeed={"zero_stage": 3})
    plan = make_plan(params=7e9, devices=[A100_40], workers=2, config=tc)
    assert (plan.method, plan.precision, plan.gradient_checkpointing, plan.strategy) == (
        "full", "fp16", True, "deepspeed-zero3")
    assert all("training_config" in plan.reasons[k] for k in ("method", "precision", "gradient_checkpointing"))
