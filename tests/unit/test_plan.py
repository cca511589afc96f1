from __future__ import annotations

import pytest

from cleverthis_runtime.plan import GB, Device, make_plan
from cleverthis_runtime.spec import TrainingConfig

A100_40 = Device("cuda", 40 * GB, 8.0)
A100_80 = Device("cuda", 80 * GB, 8.0)
V100 = Device("cuda", 32 * GB, 7.0)


def test_7b_weights_gradients_and_optimizer_per_method():
    """A full fine-tune keeps fp32 master weights, fp32 gradients, AdamW's two fp32 moments and, under bf16
    autocast, a bf16 copy of each weight: 18 bytes a parameter. LoRA reads the frozen base in bf16 (2 bytes) and
    trains ~1% of it (fp32 weight, gradient and two moments: 16 bytes each); QLoRA's base is 4-bit."""
    plan = make_plan(params=7e9, devices=[A100_40], workers=1, config=TrainingConfig())
    assert plan.memory_estimate_gb["full"] == pytest.approx(7 * 18, rel=0.01)
    assert plan.memory_estimate_gb["lora"] == pytest.approx(7 * (2 + 0.01 * 16), rel=0.01)
    assert plan.memory_estimate_gb["qlora"] == pytest.approx(7 * (0.52 + 0.01 * 16), rel=0.01)
    assert plan.method == "lora"
    assert "more than the 40.0 GB" in plan.reasons["method"]
    assert plan.precision == "bf16"
    # with the model unknown: no activations, the CUDA context as the fixed cost
    assert plan.memory_per_worker_gb["activations"] == 0 and plan.memory_per_worker_gb["process"] == 0.6
    assert plan.reasons["memory"].startswith(f"~{plan.memory_per_worker_gb['total']:.1f} GB per worker of GPU memory")


def _llama_workload(method: str, batch: int = 8, seq: int = 128, r: int = 16):
    from cleverthis_runtime.memory import Workload

    h, i, layers, vocab = 512, 1024, 8, 512
    return Workload(batch_size=batch, seq_len=seq, hidden=h, layers=layers, intermediate=i, heads=4, vocab=vocab,
                    unquantized_params=2 * vocab * h + (2 * layers + 1) * h,
                    adapter_params=layers * r * (4 * 2 * h + 3 * (h + i)) if method != "full" else 0.0,
                    adapter_inputs=4 * h + 2 * h + i if method != "full" else 0.0)


def test_per_worker_memory_parts_follow_the_formulas():
    """memory.py's formulas on a 21.5M-parameter Llama shape (the model test_memory_peaks measures)."""
    from cleverthis_runtime.memory import per_worker

    params = 21.5e6
    full = per_worker(params=params, method="full", weights="fp32", precision="no", optim="adamw_torch",
                      gradient_checkpointing=False, on_gpu=False, work=_llama_workload("full"), process_bytes=0.5e9)
    assert (full["weights"], full["gradients"], full["optimizer"]) == (0.086, 0.086, 0.172)
    tokens, per_layer = 8 * 128, 11 * 512 + 4 * 1024 + 2 * 4 * 128
    assert full["activations"] == pytest.approx(1.5 * (tokens * 8 * per_layer * 4 + tokens * 512 * 12) / 1e9, abs=1e-3)
    assert full["process"] == 0.5 and full["total"] == pytest.approx(sum(v for k, v in full.items() if k != "total"),
                                                                     abs=2e-3)
    checkpointed = per_worker(params=params, method="full", weights="fp32", precision="no", optim="adamw_torch",
                              gradient_checkpointing=True, on_gpu=False, work=_llama_workload("full"))
    assert checkpointed["activations"] < full["activations"] / 3  # only each layer's input is kept
    eight_bit = per_worker(params=params, method="full", weights="fp32", precision="no", optim="adamw_bnb_8bit",
                           gradient_checkpointing=False, on_gpu=False, work=_llama_workload("full"))
    assert eight_bit["optimizer"] == pytest.approx(full["optimizer"] / 4, abs=1e-3)
    lora = per_worker(params=params, method="lora", weights="bf16", precision="bf16", optim="adamw_torch",
                      gradient_checkpointing=False, on_gpu=True, work=_llama_workload("lora"), attention="sdpa")
    adapter = _llama_workload("lora").adapter_params
    assert lora["gradients"] == pytest.approx(adapter * 4 / 1e9, abs=1e-3)  # the adapter's only
    assert lora["weights"] == pytest.approx((params * 2 + adapter * 4) / 1e9, abs=1e-3)
    assert lora["process"] == 0.6  # the CUDA context
    qlora = per_worker(params=params, method="qlora", weights="4bit", precision="no", optim="adamw_torch",
                       gradient_checkpointing=False, on_gpu=False, work=_llama_workload("qlora"))
    assert qlora["weights"] < lora["weights"] / 2 and qlora["loading"] > 0


def test_optimizer_defaults_and_choices():
    cpu, gpu = [Device("cpu", 64 * GB)], [A100_40]
    q = {"method": "qlora", "quantization": "4bit"}
    assert make_plan(params=1e8, devices=gpu, workers=1, config=TrainingConfig(**q)).optim == "paged_adamw_8bit"
    on_cpu = make_plan(params=1e8, devices=cpu, workers=1, config=TrainingConfig(**q))
    assert on_cpu.optim == "adamw_torch" and "does not do on CPU" in on_cpu.reasons["optim"]
    assert make_plan(params=1e8, devices=cpu, workers=1, config=TrainingConfig()).optim == "adamw_torch"
    chosen = make_plan(params=1e8, devices=cpu, workers=1, config=TrainingConfig(optim="paged_adamw_8bit"))
    assert chosen.optim == "paged_adamw_8bit" and "unpaged" in chosen.reasons["optim"]
    adafactor = make_plan(params=1e8, devices=cpu, workers=1, config=TrainingConfig(method="full", optim="adafactor"))
    assert adafactor.memory_per_worker_gb["optimizer"] == 0


def test_flash_attention_and_liger_are_refused_where_they_cannot_run():
    from cleverthis_runtime.plan import PlanError

    cpu = [Device("cpu", 64 * GB)]
    with pytest.raises(PlanError, match=r"training_config.attn_implementation: flash_attention_2 runs on CUDA"):
        make_plan(params=1e8, devices=cpu, workers=1, config=TrainingConfig(attn_implementation="flash_attention_2"))
    import importlib.util

    if importlib.util.find_spec("flash_attn") is None:
        with pytest.raises(PlanError, match=r"attn_implementation: flash_attention_2 needs the flash-attn package"):
            make_plan(params=1e8, devices=[A100_40], workers=1,
                      config=TrainingConfig(attn_implementation="flash_attention_2"))
    with pytest.raises(PlanError, match=r"training_config.use_liger_kernel: "):
        make_plan(params=1e8, devices=cpu, workers=1, config=TrainingConfig(use_liger_kernel=True))
    eager = make_plan(params=1e8, devices=cpu, workers=1, config=TrainingConfig(attn_implementation="eager"))
    assert eager.attn_implementation == "eager" and "set in training_config" in eager.reasons["attn_implementation"]
    assert make_plan(params=1e8, devices=cpu, workers=1, config=TrainingConfig()).attn_implementation is None


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
        args = train._training_args(inp, types.SimpleNamespace(gradient_checkpointing=on, precision="fp32",
                                                               optim="adafactor"), 1, torch)
    assert args.activation_checkpointing is on and args.gradient_checkpointing is on
    assert args.optim == "adafactor" and args.use_liger_kernel is False  # the plan's optimizer reaches the Trainer
