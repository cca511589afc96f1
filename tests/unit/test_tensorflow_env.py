"""framework tensorflow jobs run with the TensorFlow environment's python (jobs.py: tf_python, _runtime_env)."""

from __future__ import annotations

import pytest

from jupyter_cleverthis.errors import InvalidSpec
from jupyter_cleverthis.service import jobs
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import JobSpec


def spec(framework: str) -> JobSpec:
    return JobSpec(name="tf-env", base_model="/models/tiny-tf", dataset_path="/data", framework=framework,
                   training_config={"method": "full"})


def test_missing_tf_environment_is_a_clear_error_naming_framework(monkeypatch, tmp_path):
    monkeypatch.delenv(jobs.TF_PYTHON_ENV, raising=False)
    monkeypatch.setattr(jobs, "TF_VENV", tmp_path / "no-venv-tf")
    with pytest.raises(InvalidSpec, match="make install-tf") as e:
        JobService._runtime_env(None, spec("tensorflow"))
    assert e.value.details == {"field": "framework"}
    assert jobs.TF_PYTHON_ENV in e.value.message
    # torch jobs never need it
    env = JobService._runtime_env(None, spec("torch"))
    assert "py_executable" not in env and "TF_USE_LEGACY_KERAS" not in env["env_vars"]
    assert jobs._entrypoint(spec("torch")) == jobs.ENTRYPOINT


def test_tf_python_from_the_environment_variable_or_the_checkout(monkeypatch, tmp_path):
    monkeypatch.setenv(jobs.TF_PYTHON_ENV, "/opt/tf env/bin/python")
    env = JobService._runtime_env(None, spec("tensorflow"))
    assert env["py_executable"] == "/opt/tf env/bin/python"
    assert env["env_vars"]["TF_USE_LEGACY_KERAS"] == "1"
    assert jobs._entrypoint(spec("tensorflow")) == "'/opt/tf env/bin/python' -m cleverthis_runtime"

    monkeypatch.delenv(jobs.TF_PYTHON_ENV)
    py = tmp_path / ".venv-tf" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.touch()
    monkeypatch.setattr(jobs, "TF_VENV", tmp_path / ".venv-tf")
    assert JobService._runtime_env(None, spec("tensorflow"))["py_executable"] == str(py)


def test_tf_tokenization_learns_only_the_assistant_turns(tmp_path):
    """tf_train tokenizes without transformers: the default chat template, labels on the answer and its end token."""
    from cleverthis_runtime.data import INSTRUCTION
    from cleverthis_runtime.tf_tiny import train_tokenizer
    from cleverthis_runtime.tf_train import ChatTokenizer

    data = tmp_path / "train.jsonl"
    data.write_text('{"instruction": "Add the numbers", "input": "2 + 3", "output": "5"}\n')
    train_tokenizer(tmp_path, [str(data)], 300)
    tok = ChatTokenizer(str(tmp_path))
    (ids, labels), = tok.rows([{"instruction": "Add the numbers", "input": "2 + 3", "output": "5"}], INSTRUCTION, 512)[0]
    learned = tok.tok.decode([i for i, lab in zip(ids, labels, strict=True) if lab != -100], skip_special_tokens=False)
    assert learned == "5</s>\n"
    assert tok.tok.decode(ids, skip_special_tokens=False).startswith("<|user|>\nAdd the numbers\n\n2 + 3</s>\n<|assistant|>\n")


def test_tf_rejects_lora_and_deepspeed_from_the_merged_config():
    from cleverthis_runtime.spec import TrainingConfig
    from cleverthis_runtime.tf_train import unsupported_config

    assert unsupported_config(TrainingConfig(method="full")) == []
    fields = [f for f, _ in unsupported_config(TrainingConfig(method="qlora", quantization="4bit"))]
    assert fields == ["training_config.method", "training_config.quantization"]
    assert "does not support LoRA or DeepSpeed" in unsupported_config(TrainingConfig(deepspeed={}))[0][1]
