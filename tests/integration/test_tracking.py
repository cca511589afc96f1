"""Experiment tracking through the transformers Trainer's own integrations, read back with each tool: TensorBoard
event files (tensorboard's EventAccumulator), a real `mlflow server` on a free loopback port (MlflowClient), and
W&B in offline mode (its run folder). One job reports to all three; every job reports to TensorBoard by default.
The same job checks evaluation: `eval_steps` and early stopping (a learning rate too high to improve)."""

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
from jupyter_cleverthis.service.jobs import JobService

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
    # The same job checks evaluation (one job start less): validation every EVAL_STEPS steps as well as at epoch
    # ends, and a learning rate far too high to improve, so that it stops early.
    final, evs = run_job(tiny_model, dataset, job_name, {"report_to": ["tensorboard", "mlflow", "wandb"],
                                                         **EVALUATION}, workers=1, epochs=3)
    steps = [e for e in evs if e["type"] == "step"]
    assert len(steps) >= 5
    tracking = final.tracking.model_dump(exclude_none=True)
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
    assert float(run.data.params["learning_rate"]) == pytest.approx(EVALUATION["learning_rate"])
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

    check_eval_steps_and_early_stop(final, evs, job_name)
    # TensorBoard has each validation at its step
    assert [e.step for e in acc.Scalars("eval/loss")] == [e["step"] for e in evs if e["type"] == "validation"]


EVAL_STEPS, PATIENCE = 3, 2
EVALUATION = {"validation_split": 0.2, "eval_steps": EVAL_STEPS, "early_stopping_patience": PATIENCE,
              "early_stopping_threshold": 0.01, "learning_rate": 0.5}


def check_eval_steps_and_early_stop(final, evs, job_name):
    """Validation every EVAL_STEPS steps and at each epoch's end; the job stopped after PATIENCE validations
    without improvement, wrote its checkpoint, points `best` at the lowest validation loss and `epoch-final` at
    where it stopped, and ended succeeded with the reason in its detail."""
    val = [e for e in evs if e["type"] == "validation"]
    steps = [e for e in evs if e["type"] == "step"]
    per_epoch = steps[-1]["total_steps"] // 3
    expected = [s for s in range(1, steps[-1]["step"] + 1) if s % EVAL_STEPS == 0 or s % per_epoch == 0]
    assert [v["step"] for v in val] == expected, (per_epoch, [v["step"] for v in val])
    assert any(v["epoch"] != int(v["epoch"]) for v in val), "no validation between epochs"

    losses = [v["eval_loss"] for v in val]
    assert all(x >= min(losses[:-PATIENCE]) - 0.01 for x in losses[-PATIENCE:]), losses
    assert steps[-1]["step"] < steps[-1]["total_steps"], "the job ran to its planned end"
    assert final.stopped_early is True and final.message == final.stop_reason
    assert "did not improve" in final.stop_reason and f"lowest {min(losses):.4f}" in final.stop_reason
    stop = next(e for e in evs if e["type"] == "early_stop")
    assert stop["step"] == val[-1]["step"] == steps[-1]["step"]

    root = Path(final.checkpoint_dir)
    final_dir = Path(os.path.realpath(root / "epoch-final"))
    assert final_dir == Path(stop["checkpoint"]).resolve()
    meta = json.loads((final_dir / "checkpoint.json").read_text())
    assert meta["global_step"] == stop["step"] and meta["eval_loss"] == pytest.approx(losses[-1])
    best = json.loads((root / "best" / "checkpoint.json").read_text())
    assert best["eval_loss"] == pytest.approx(min(losses))

    m = JobService().metrics("local", job_name)  # the curves put each validation at its step
    assert [v["step"] for v in m["validation"]] == [v["step"] for v in val]
    assert all(v["perplexity"] for v in m["validation"])
