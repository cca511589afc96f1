"""report_to: the choices, the package check at pre-flight, and which environment settings reach a job."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_report_to_choices():
    from pydantic import ValidationError

    from cleverthis_runtime.spec import TrainingConfig

    assert TrainingConfig().report_to == ["tensorboard"]
    assert TrainingConfig(report_to=["mlflow", "mlflow", "wandb"]).report_to == ["mlflow", "wandb"]
    for bad in (["none", "mlflow"], ["comet"]):
        with pytest.raises(ValidationError) as e:
            TrainingConfig(report_to=bad)
        assert e.value.errors()[0]["loc"][0] == "report_to"


def test_preflight_names_a_missing_tracker_package(tmp_path, monkeypatch):
    import importlib.util

    from cleverthis_runtime.preflight import preflight
    from cleverthis_runtime.spec import JobSpec

    data = tmp_path / "data"
    shutil.copytree(ROOT / "examples" / "data", data)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    out = preflight(JobSpec(name="t", dataset_path=str(data), training_config={"report_to": ["wandb"]}), quick=True)
    errs = {e["field"]: e["message"] for e in out["errors"]}
    assert "pip install wandb" in errs["training_config.report_to"]


def test_tracking_settings_reach_jobs_and_secrets_do_not(monkeypatch):
    from jupyter_cleverthis.service.runtime_env import passthrough_env as _passthrough_env

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://alice:hunter2@mlflow.example.com:5000/base")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "exp")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "hunter2")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok")
    monkeypatch.setenv("WANDB_API_KEY", "key")
    monkeypatch.setenv("WANDB_MODE", "offline")
    env = _passthrough_env()
    assert env["MLFLOW_TRACKING_URI"] == "https://mlflow.example.com:5000/base"
    assert env["MLFLOW_EXPERIMENT_NAME"] == "exp" and env["WANDB_MODE"] == "offline"
    assert not {"MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "WANDB_API_KEY"} & set(env)
    assert "hunter2" not in str(env)
