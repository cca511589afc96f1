"""framework tensorflow jobs run with the TensorFlow environment's python (runtime_env.py: tfenv.python, job_runtime_env)."""

from __future__ import annotations

import pytest

from jupyter_cleverthis.errors import InvalidSpec
from jupyter_cleverthis.service import runtime_env, tfenv
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import JobSpec


def spec(framework: str) -> JobSpec:
    return JobSpec(name="tf-env", base_model="/models/tiny-tf", dataset_path="/data", framework=framework,
                   training_config={"method": "full"})


def test_missing_tf_environment_is_a_clear_error_naming_framework(monkeypatch, tmp_path):
    monkeypatch.delenv(tfenv.PYTHON_ENV, raising=False)
    monkeypatch.setenv("CLEVERTHIS_HOME", str(tmp_path))
    with pytest.raises(InvalidSpec, match="cleverthis-train setup tensorflow") as e:
        JobService._runtime_env(None, spec("tensorflow"))
    assert e.value.details == {"field": "framework"}
    assert tfenv.PYTHON_ENV in e.value.message
    # torch jobs never need it
    env = JobService._runtime_env(None, spec("torch"))
    assert "py_executable" not in env and "TF_USE_LEGACY_KERAS" not in env["env_vars"]
    assert runtime_env.entrypoint(spec("torch")) == runtime_env.ENTRYPOINT


def test_tf_python_from_the_environment_variable_or_cleverthis_home(monkeypatch, tmp_path):
    monkeypatch.setenv(tfenv.PYTHON_ENV, "/opt/tf env/bin/python")
    env = JobService._runtime_env(None, spec("tensorflow"))
    assert env["py_executable"] == "/opt/tf env/bin/python"
    assert env["env_vars"]["TF_USE_LEGACY_KERAS"] == "1"
    assert runtime_env.entrypoint(spec("tensorflow")) == "'/opt/tf env/bin/python' -m cleverthis_runtime"

    monkeypatch.delenv(tfenv.PYTHON_ENV)
    monkeypatch.setenv("CLEVERTHIS_HOME", str(tmp_path))  # where `cleverthis-train setup tensorflow` puts it
    py = tmp_path / "envs" / "tensorflow" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.touch()
    assert JobService._runtime_env(None, spec("tensorflow"))["py_executable"] == str(py)


def test_a_tf_environment_with_another_ray_is_refused_before_submit(tmp_path):
    """Ray needs one version across a cluster: the environment's Ray (read from its metadata) must be the cluster's."""
    meta = tmp_path / "env" / "lib" / "python3.11" / "site-packages" / "ray-2.59.0.dist-info" / "METADATA"
    meta.parent.mkdir(parents=True)
    meta.write_text("Metadata-Version: 2.1\nName: ray\nVersion: 2.59.0\n")
    py = str(tmp_path / "env" / "bin" / "python")
    assert tfenv.ray_version_of(py) == "2.59.0"
    tfenv.check_ray_version(py, "2.59.0")  # the same: fine
    tfenv.check_ray_version("/on/the/nodes/bin/python", "2.60.0")  # not on this machine: nothing to read
    with pytest.raises(InvalidSpec, match="has Ray 2.59.0, but the cluster runs Ray 2.60.0") as e:
        tfenv.check_ray_version(py, "2.60.0")
    assert e.value.details == {"field": "framework"} and "setup tensorflow" in e.value.message


def test_setup_tensorflow_is_idempotent(tmp_path, monkeypatch):
    """A second setup with the same Python, Ray, pydantic and requirements installs nothing."""
    import subprocess

    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    env = tmp_path / "tf"
    tfenv.setup(env, out=lambda s: None)
    assert calls[0][1:3] == ["-m", "venv"] and "-r" in calls[1] and any(c.startswith("ray[default,train]==")
                                                                          for c in calls[1])
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").touch()
    calls.clear()
    said = []
    assert tfenv.setup(env, out=said.append) == env / "bin" / "python"
    assert calls == [] and "up to date" in said[0]


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


def test_tf_refuses_what_it_does_not_honour_from_tracking_and_templates():
    from cleverthis_runtime.spec import TrainingConfig
    from cleverthis_runtime.tf_train import unsupported_config

    assert unsupported_config(TrainingConfig(method="full", chat_template="default", report_to=["none"])) == []
    fields = [f for f, _ in unsupported_config(TrainingConfig(method="full", chat_template="chatml",
                                                              report_to=["tensorboard", "mlflow"]))]
    assert fields == ["training_config.chat_template", "training_config.report_to"]
