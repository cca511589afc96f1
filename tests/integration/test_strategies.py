"""Strategies on a real local Ray cluster, 2 CPU workers over gloo: DeepSpeed ZeRO-1 with optimizer offload,
ZeRO-3 with parameter offload (weights gathered for the checkpoint), FSDP2. (ZeRO-2 with optimizer offload:
examples/qlora_deepspeed.ipynb, run by test_notebooks.)

DeepSpeed JIT-builds its CPU ops (cpu_adam ~65 s, shm comm ~45 s on 2 cores) the first time: tests/conftest.py
keeps them in ~/.cache/cleverthis/torch_extensions/<environment key> (passed to the jobs as TORCH_EXTENSIONS_DIR),
the same folder for every test and notebook, so an environment builds them once.
"""

from __future__ import annotations

import json

import pytest

from .training_helpers import run_job  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]


def _run(tiny_model, dataset, job_name, config, *, workers=2, batch_size=8):
    return run_job(tiny_model, dataset, job_name, config, workers=workers, batch_size=batch_size, timeout=1100)


def _loads_and_trained(tiny_model, ckpt):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    sd, sd0 = model.state_dict(), base.state_dict()
    assert sd.keys() == sd0.keys()
    assert all(sd[k].shape == sd0[k].shape for k in sd)  # full tensors, not ZeRO-3 shards
    assert any(not torch.equal(sd[k], sd0[k]) for k in sd)  # and trained


# ZeRO-2 with optimizer offload runs in examples/qlora_deepspeed.ipynb (2 workers, checked by test_notebooks).
@pytest.mark.parametrize("stage,ds", [
    (1, {"zero_stage": 1, "offload_optimizer": True}),
    (3, {"zero_stage": 3, "offload_param": True}),
], ids=["zero1-offload-optimizer", "zero3-offload-param"])
def test_deepspeed_job(ray_cluster, tiny_arch, dataset, job_name, stage, ds):
    tiny_model = tiny_arch("falcon" if stage == 1 else "llama")  # a full fine-tune of Falcon, and of Llama
    final, evs = _run(tiny_model, dataset, job_name,
                      {"method": "full", "learning_rate": 1e-3, "deepspeed": ds})
    plan = [e for e in evs if e["type"] == "plan"][0]
    assert plan["strategy"] == f"deepspeed-zero{stage}"
    assert "offload" in plan["reasons"]["strategy"]
    steps = [e["loss"] for e in evs if e["type"] == "step"]
    assert len(steps) >= 5 and steps[-1] < steps[0], steps
    ckpt = dataset / "checkpoints" / "epoch-final"
    assert json.loads((ckpt / "checkpoint.json").read_text())["method"] == "full"
    _loads_and_trained(tiny_model, ckpt)


def test_fsdp2_job(ray_cluster, tiny_arch, dataset, job_name):
    tiny_model = tiny_arch("mixtral")  # a full fine-tune of a mixture of experts, sharded
    final, evs = _run(tiny_model, dataset, job_name, {"method": "full", "learning_rate": 1e-3, "strategy": "fsdp"})
    plan = [e for e in evs if e["type"] == "plan"][0]
    assert plan["strategy"] == "fsdp" and "FSDP" in plan["reasons"]["strategy"]
    strategy = [e for e in evs if e["type"] == "strategy"][0]
    assert strategy["fsdp2_sharded"] and strategy["wrapper"].startswith("FSDP")  # not DDP
    steps = [e["loss"] for e in evs if e["type"] == "step"]
    assert len(steps) >= 5 and steps[-1] < steps[0], steps
    _loads_and_trained(tiny_model, dataset / "checkpoints" / "epoch-final")
