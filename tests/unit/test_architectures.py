"""Every family the product page lists, as tiny models built from their transformers configs: which modules LoRA
adapts and what pre-flight refuses (a wrong `target_modules`, packing a model cannot isolate); packed loss ==
unpacked loss for each family: test_packing.py. Training each family on the real cluster: tests/integration/test_architectures.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cleverthis_runtime.tiny import ARCHITECTURES

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data"

# peft's per-model-type default where peft has one; Phi-3 has none there: every linear layer of its attention.
EXPECTED = {"llama": ["q_proj", "v_proj"], "mistral": ["q_proj", "v_proj"], "mixtral": ["q_proj", "v_proj"],
            "gemma": ["q_proj", "v_proj"], "qwen2": ["q_proj", "v_proj"], "falcon": ["query_key_value"],
            "gpt2": ["c_attn"], "phi3": ["o_proj", "qkv_proj"]}


@pytest.fixture(scope="module")
def models(tiny_arch):
    # the run's tiny models (tests/conftest.py: built once per run, shared with the integration tests)
    return {a: tiny_arch(a) for a in ARCHITECTURES}


@pytest.fixture
def data(tmp_path):
    dst = tmp_path / "data"
    shutil.copytree(DATA, dst, ignore=shutil.ignore_patterns("checkpoints", "training_config.json"))
    return dst


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_default_targets_fit_each_family(models, arch):
    import warnings

    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from cleverthis_runtime.lora_targets import choose, lora_config, meta_model

    targets, why = choose(meta_model(models[arch]), None)  # pre-flight's view: config only, no weights
    assert targets == EXPECTED[arch], (targets, why)
    assert ("peft's default" in why) == (arch != "phi3")
    model = AutoModelForCausalLM.from_pretrained(models[arch], dtype=torch.float32)
    assert choose(model, None) == (targets, why)  # the runtime's view of the real model: the same choice
    config = lora_config(model, targets, r=4, alpha=8, dropout=0.0)  # the job's own LoraConfig
    assert config.fan_in_fan_out is (arch == "gpt2")  # GPT-2's Conv1D keeps its weight as (in, out)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        peft_model = get_peft_model(model, config)
    assert not [str(w.message) for w in seen if "fan_in_fan_out" in str(w.message)]  # nothing for peft to correct
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert all(any(f".{t}." in n for t in targets) for n in trainable)


def test_a_missing_module_is_refused_with_the_models_names(models):
    from cleverthis_runtime.lora_targets import TargetModulesError, choose, meta_model

    with pytest.raises(TargetModulesError) as e:
        choose(meta_model(models["gpt2"]), ["q_proj", "c_attn"])
    msg = str(e.value)
    assert "'q_proj'" in msg and "c_attn" in msg and "c_proj" in msg and "c_fc" in msg and "all-linear" in msg
    assert "lm_head" not in msg


def test_all_linear_is_accepted_as_peft_does(models):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from cleverthis_runtime.lora_targets import choose
    from cleverthis_runtime.spec import TrainingConfig

    assert TrainingConfig(target_modules=["all-linear"]).target_modules == "all-linear"
    model = AutoModelForCausalLM.from_pretrained(models["falcon"], dtype=torch.float32)
    targets, why = choose(model, "all-linear")
    assert targets == "all-linear" and "dense_4h_to_h" in why
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=targets, task_type="CAUSAL_LM"))
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n, p in peft_model.named_parameters() if p.requires_grad}
    assert adapted == {"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"}


def test_bad_target_lists_are_field_errors():
    from pydantic import ValidationError

    from cleverthis_runtime.spec import TrainingConfig

    for bad in ([], [""], ["all-linear", "q_proj"]):
        with pytest.raises(ValidationError) as e:
            TrainingConfig(target_modules=bad)
        assert e.value.errors()[0]["loc"][0] == "target_modules"


def _quick(base_model, data, tc):
    from cleverthis_runtime.preflight import preflight
    from cleverthis_runtime.spec import JobSpec

    spec = JobSpec(name="arch-check", base_model=base_model, dataset_path=str(data), training_config=tc)
    return preflight(spec, quick=True)  # what create runs


def test_create_refuses_target_modules_the_model_lacks(models, data):
    out = _quick(models["falcon"], data, {"method": "lora", "target_modules": ["q_proj", "v_proj"]})
    errs = {e["field"]: e["message"] for e in out["errors"]}
    assert "training_config.target_modules" in errs, out["errors"]
    assert "query_key_value" in errs["training_config.target_modules"]
    ok = _quick(models["falcon"], data, {"method": "lora", "target_modules": ["query_key_value"]})
    assert ok["errors"] == [] and ok["lora_target_modules"]["modules"] == ["query_key_value"]
    # the full pre-flight says which modules, and why, in the plan
    from cleverthis_runtime.preflight import preflight
    from cleverthis_runtime.spec import JobSpec

    full = preflight(JobSpec(name="arch-check", base_model=models["gpt2"], dataset_path=str(data),
                             training_config={"method": "lora"}))
    assert full["errors"] == []
    assert full["plan"]["lora_target_modules"] == ["c_attn"]
    assert "peft's default for gpt2" in full["plan"]["reasons"]["lora_target_modules"]


def test_packing_is_refused_where_position_ids_cannot_isolate(tmp_path, data):
    """BLOOM (ALiBi, no position_ids): packed examples would attend to each other, so pre-flight refuses."""
    import transformers as tf

    from cleverthis_runtime.lora_targets import meta_model
    from cleverthis_runtime.methods import packing_refusal

    bloom = tmp_path / "tiny-bloom"
    tf.BloomForCausalLM(tf.BloomConfig(vocab_size=128, hidden_size=32, n_layer=1, n_head=4)).save_pretrained(bloom)
    out = _quick(str(bloom), data, {"packing": True})
    errs = {e["field"]: e["message"] for e in out["errors"]}
    assert "position_ids" in errs.get("training_config.packing", ""), out
    assert packing_refusal(meta_model(str(bloom)))
