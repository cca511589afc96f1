"""Methods and data layouts on a real local Ray cluster: packing and QLoRA (4-bit nf4, 8-bit), 2 workers, CPU."""

from __future__ import annotations

import json

import pytest

from .training_helpers import assert_memory_as_planned, run_job  # noqa: E402

pytestmark = pytest.mark.integration


def _run(tiny_model, dataset, job_name, config, *, workers=2, batch_size=8):
    return run_job(tiny_model, dataset, job_name, config, workers=workers, batch_size=batch_size, timeout=900)


def test_packed_job_trains(ray_cluster, tiny_model, dataset, job_name):
    # An example of its own, so that no earlier job on this node has tokenized this data: of the 2 workers, one
    # tokenizes and the other reads the node's cache.
    train = sorted(dataset.glob("*.jsonl"))[0]
    with open(train, "a") as f:
        f.write(json.dumps({"instruction": f"Say {job_name}", "input": "", "output": job_name}) + "\n")
    # Packed rows hold several examples each: a smaller batch keeps enough steps to see the loss fall. With
    # gradient checkpointing (LoRA's frozen embeddings: the Trainer must still get gradients through them).
    final, evs = _run(tiny_model, dataset, job_name,
                      {"packing": True, "max_seq_length": 128, "gradient_checkpointing": True}, batch_size=2)
    from jupyter_cleverthis.service.jobs import JobService

    log = JobService().logs("local", job_name)["text"]
    made = [ln for ln in log.splitlines() if ": tokenized " in ln and "cached for this node" in ln]
    read = [ln for ln in log.splitlines() if "tokenized examples from this node's cache" in ln]
    assert len(made) == 1 and len(read) == 1, (made, read)  # each line once (Ray Train's print patch is off)
    recomputing = [e["activation_checkpointing"] for e in evs if e["type"] == "strategy"]
    assert recomputing and all(r is True for r in recomputing), recomputing  # what the model really runs
    assert [e["gradient_checkpointing"] for e in evs if e["type"] == "plan"] == [True]
    packing = [e for e in evs if e["type"] == "packing"]
    dataset_ev = [e for e in evs if e["type"] == "dataset"][0]
    assert packing and packing[0]["rows"] < dataset_ev["examples"]  # fewer, fuller rows
    plan = [e for e in evs if e["type"] == "plan"][0]
    assert plan["batching"] == "packed" and plan["reasons"]["batching"].startswith("packed: set in training_config")
    assert_memory_as_planned(evs, workers=2)
    steps = [e["loss"] for e in evs if e["type"] == "step"]
    assert len(steps) >= 5
    assert sum(steps[-2:]) / 2 < sum(steps[:2]) / 2, steps
    root = dataset / "checkpoints" / "epoch-final"
    assert (root / "model.safetensors").exists() and (root / "adapter_model").is_dir()


# 4-bit on Falcon (one fused query_key_value) and Mixtral (MoE experts), 8-bit on Llama; target_modules
# unset, so each family gets its own (the sample's training_config.json names Llama's modules).
@pytest.mark.parametrize("bits,arch,targets", [
    ("4bit", "falcon", ["query_key_value"]), ("4bit", "mixtral", ["q_proj", "v_proj"]),
    ("8bit", "llama", ["q_proj", "v_proj"]),
])
def test_qlora_job_trains_and_adapter_loads(ray_cluster, tiny_arch, dataset, job_name, bits, arch, targets):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    tiny_model = tiny_arch(arch)
    cfg = json.loads((dataset / "training_config.json").read_text())
    cfg.pop("target_modules")
    (dataset / "training_config.json").write_text(json.dumps(cfg))
    final, evs = _run(tiny_model, dataset, job_name, {"method": "qlora", "quantization": bits})
    plan = [e for e in evs if e["type"] == "plan"][0]
    assert plan["method"] == "qlora" and bits in plan["reasons"]["method"]
    assert plan["lora_target_modules"] == targets
    steps = [e["loss"] for e in evs if e["type"] == "step"]
    assert len(steps) >= 5 and steps[-1] < steps[0], steps
    assert_memory_as_planned(evs, workers=2)  # the 4/8-bit base, measured in each Ray worker

    ckpt = dataset / "checkpoints" / "epoch-final"
    assert json.loads((ckpt / "checkpoint.json").read_text())["method"] == "qlora"
    # The adapter applies to the original (full-precision) base ...
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, str(ckpt / "adapter_model"))
    reference = peft_model.merge_and_unload()
    # ... and the root holds that merge, dequantized: plain fp32 weights, no quantization config.
    merged = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32)
    assert "quantization_config" not in json.loads((ckpt / "config.json").read_text())
    changed = 0
    for (k, v), (k2, v2) in zip(merged.state_dict().items(), reference.state_dict().items(), strict=True):
        assert k == k2 and torch.allclose(v, v2, atol=1e-5), k
    base2 = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    for (_k, v), (_, v0) in zip(merged.state_dict().items(), base2.state_dict().items(), strict=True):
        changed += int(not torch.equal(v, v0))
    assert changed > 0  # the adapter trained and was merged
