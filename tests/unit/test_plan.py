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


@pytest.mark.parametrize("on", [True, False])
def test_the_plans_checkpointing_reaches_the_trainer_under_its_current_name(tmp_path, on):
    """The plan's gradient checkpointing is the Trainer's `activation_checkpointing` (transformers 5's name; the
    old one, a deprecated alias, put a FutureWarning in every job's log)."""
    import types
    import warnings

    import torch

    from cleverthis_runtime import train
    from cleverthis_runtime.inputs import WorkerInputs
    from cleverthis_runtime.spec import JobSpec

    spec = JobSpec(name="gc", base_model="m", dataset_path=str(tmp_path), batch_size=2)
    inp = WorkerInputs(spec=spec, tc=TrainingConfig(report_to=["none"]), job="gc", ckpt_root=str(tmp_path), rank=0,
                       world=1, emit=lambda *a, **k: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        args = train._training_args(inp, types.SimpleNamespace(gradient_checkpointing=on, precision="fp32"), 1, torch)
    assert args.activation_checkpointing is on and args.gradient_checkpointing is on
