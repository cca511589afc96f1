from __future__ import annotations

import pytest
from pydantic import ValidationError

from jupyter_cleverthis.spec import JobSpec, JobStatus, TrainingConfig, error_list, merge_training_config


def test_defaults_are_the_product_pages():
    s = JobSpec(name="llama2-customer-support-v1")
    assert s.base_model == "meta-llama/Llama-2-7b-hf"
    assert s.dataset_path == "/datasets/training"
    assert (s.framework, s.epochs, s.batch_size) == ("torch", 3, 32)
    assert s.job_type == "finetune"


@pytest.mark.parametrize("bad", ["a/b", "..", "a..b", "-x", "x-", "", "a" * 65, "naïve", "a b"])
def test_unsafe_names_rejected(bad):
    with pytest.raises(ValidationError) as e:
        JobSpec(name=bad)
    assert error_list(e.value)[0]["field"] == "name"


def test_unknown_key_suggests_the_close_one():
    with pytest.raises(ValidationError) as e:
        TrainingConfig.model_validate({"lora_rank": 8})
    assert "did you mean 'lora_r'" in str(e.value)


@pytest.mark.parametrize(
    "cfg,needle",
    [
        ({"lora_r": 2}, "lora_r"),
        ({"lora_dropout": 0.5}, "lora_dropout"),
        ({"method": "qlora"}, "quantization"),
        ({"method": "lora", "quantization": "4bit"}, "qlora"),
        ({"method": "sgd"}, "method"),
        ({"deepspeed": {"zero_stage": 5}}, "zero_stage"),
        ({"deepspeed": {"zero_stage": 2, "offload_param": True}}, "zero_stage 3"),
    ],
)
def test_training_config_errors_name_the_key(cfg, needle):
    with pytest.raises(ValidationError) as e:
        TrainingConfig.model_validate(cfg)
    assert needle in str(e.value)


def test_tensorflow_rejects_lora_and_deepspeed():
    with pytest.raises(ValidationError, match="does not support LoRA or DeepSpeed"):
        JobSpec(name="tf", framework="tensorflow", training_config={"method": "lora"})


def test_merge_spec_overrides_file_key_by_key():
    tc = merge_training_config({"method": "lora", "lora_r": 8}, TrainingConfig(lora_r=32))
    assert (tc.method, tc.lora_r) == ("lora", 32)
    assert tc.effective_lora_alpha == 64


def test_status_terminality():
    assert [s.value for s in JobStatus if s.is_terminal()] == ["succeeded", "failed", "cancelled"]


def test_page_examples_validate():
    TrainingConfig.model_validate(
        {"method": "qlora", "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05,
         "target_modules": ["q_proj", "v_proj"], "quantization": "4bit"}
    )
    TrainingConfig.model_validate({"mixed_precision": "bf16"})
    TrainingConfig.model_validate({"deepspeed": {"zero_stage": 2, "offload_optimizer": False, "fp16": True}})
    TrainingConfig.model_validate({"gradient_checkpointing": True})
