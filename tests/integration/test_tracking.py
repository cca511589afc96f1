"""Experiment tracking through the transformers Trainer's own integrations, read back with each tool: TensorBoard
event files (tensorboard's EventAccumulator), a real `mlflow server` on a free loopback port (MlflowClient), and
W&B in offline mode (its run folder). One job reports to all three; every job reports to TensorBoard by default."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from jupyter_cleverthis.service.clusters import free_port

from .training_helpers import run_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture
def mlflow_server(tmp_path):
    port = free_port()
    log = open(tmp_path / "mlflow.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
         "--default-artifact-root", str(tmp_path / "mlartifacts"), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.time() + 120
        while time.time() < end:
            try:
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None, (tmp_path / "mlflow.log").read_text()[-2000:]
            time.sleep(1)
        else:
            raise AssertionError("mlflow server did not answer: " + (tmp_path / "mlflow.log").read_text()[-2000:])
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_tensorboard_mlflow_and_wandb_read_back(ray_cluster, tiny_model, dataset, job_name, mlflow_server,
                                                 tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "cleverthis-tests")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "cleverthis-tests")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    (tmp_path / "wandb").mkdir()
    monkeypatch.setenv("WANDB_API_KEY", "secret-wandb-key-0123456789")  # a secret: must not reach the job record
    final, evs = run_job(tiny_model, dataset, job_name, {"report_to": ["tensorboard", "mlflow", "wandb"],
                                                         "validation_split": 0.2}, workers=1)
    steps = [e for e in evs if e["type"] == "step"]
    assert len(steps) >= 5
    tracking = final.tracking
    assert set(tracking) == {"tensorboard", "mlflow", "wandb"}, tracking

    # TensorBoard: runs/ in the checkpoint folder; its losses are the job's own step events.
    log_dir = tracking["tensorboard"]["log_dir"]
    assert log_dir.startswith(os.path.join(final.checkpoint_dir, "runs"))
    acc = EventAccumulator(log_dir)
    acc.Reload()
    tb = {e.step: e.value for e in acc.Scalars("train/loss")}
    ours = {e["step"]: e["loss"] for e in steps}
    assert tb.keys() == ours.keys()
    assert all(math.isclose(tb[k], ours[k], rel_tol=1e-5, abs_tol=1e-6) for k in ours)
    assert "eval/loss" in acc.Tags()["scalars"]

    # MLflow: the run, its params and its metrics, through the server's REST API.
    ml = tracking["mlflow"]
    assert ml["tracking_uri"] == mlflow_server and ml["url"].startswith(mlflow_server)
    client = MlflowClient(mlflow_server)
    run = client.get_run(ml["run_id"])
    assert run.info.run_name == job_name
    lr = json.loads((dataset / "training_config.json").read_text())["learning_rate"]  # the sample's own
    assert float(run.data.params["learning_rate"]) == pytest.approx(lr)
    history = client.get_metric_history(ml["run_id"], "loss")
    assert [round(m.value, 4) for m in sorted(history, key=lambda m: m.step)] == \
        [round(ours[k], 4) for k in sorted(ours)]
    assert client.get_experiment(ml["experiment_id"]).name == "cleverthis-tests"

    # W&B offline: the run folder holds the metrics (its .wandb record log: one history record per logged step,
    # each value as JSON text; wandb has no public reader for an offline run, `wandb sync` uploads it).
    wb = tracking["wandb"]
    assert wb["mode"] == "offline" and wb["dir"].startswith(str(tmp_path / "wandb"))
    records = list(Path(wb["dir"]).parent.glob("run-*.wandb"))
    assert len(records) == 1, list(Path(wb["dir"]).parent.iterdir())
    raw = records[0].read_bytes()
    assert raw.count(b"train/loss") >= len(steps)
    assert all(json.dumps(e["loss"]).encode() in raw for e in steps), "a step's loss is missing from the W&B run"

    # Validation points carry their perplexity.
    val = [e for e in evs if e["type"] == "validation"]
    assert val and all(v["perplexity"] == pytest.approx(math.exp(v["eval_loss"]), rel=1e-3) for v in val)

    # The settings went to the job, the secret did not (Ray keeps env_vars in its job records).
    from ray.job_submission import JobSubmissionClient

    info = JobSubmissionClient(ray_cluster.address, headers=ray_cluster.sdk_headers()).get_job_info(job_name)
    env = (info.runtime_env or {}).get("env_vars", {})
    assert env.get("MLFLOW_TRACKING_URI") == mlflow_server and env.get("WANDB_MODE") == "offline"
    assert "WANDB_API_KEY" not in env and "secret-wandb-key" not in json.dumps(info.runtime_env)
