"""`framework: tensorflow` through real Ray jobs: TensorflowTrainer, 2 workers (MultiWorkerMirroredStrategy) on CPU,
in the TensorFlow environment (.venv-tf, `make install-tf`), with a tiny tf-keras model made by tf_tiny.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from jupyter_cleverthis.errors import InvalidSpec
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.service.tfenv import python as tf_python
from jupyter_cleverthis.spec import JobSpec, JobStatus

from .training_helpers import delay_steps, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DATA = ROOT / "examples" / "data"
# The sample data's training_config.json asks for LoRA: a tensorflow job says method full.
FULL = {"method": "full", "learning_rate": 0.01, "max_seq_length": 128}


def tf(code: str, timeout: float = 120) -> str:
    """Run Python code in the TensorFlow environment (TensorFlow is not in the test's own environment)."""
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": str(ROOT / "runtime")}
    p = subprocess.run([tf_python(), "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.fixture(scope="module")
def tf_model(cleverthis_home: Path) -> str:
    """Built once per run: the xdist workers that run this module's tests take turns (a file lock)."""
    from filelock import FileLock

    out = cleverthis_home / "models" / "tiny-tf"
    with FileLock(str(cleverthis_home / "tiny-tf.lock")):
        tf(f"from cleverthis_runtime.tf_tiny import build_tf_tiny_model as b; b({str(out)!r}, [{str(EXAMPLE_DATA)!r}])")
    return str(out)


def retry(call, *args, **kw):
    """A loaded machine: the head's job agent may not answer at once (as training_helpers.run_job)."""
    for attempt in range(6):
        try:
            return call(*args, **kw)
        except Exception as e:  # noqa: BLE001
            if attempt == 5 or not any(s in str(e) for s in ("No available agent", "Connection aborted")):
                raise
            time.sleep(5)


def weights_diff(a: str, b: str) -> float:
    """max |a - b| over the weights of two saved tf-keras models (each also proves the file loads)."""
    return float(tf(
        "import tf_keras, numpy as np\n"
        f"a = tf_keras.models.load_model({a!r}, compile=False); b = tf_keras.models.load_model({b!r}, compile=False)\n"
        "print(max(float(np.abs(x - y).max()) for x, y in zip(a.get_weights(), b.get_weights(), strict=True)))"
    ).strip().splitlines()[-1])


def test_two_workers_train_checkpoint_and_resume(ray_cluster, tf_model, dataset, job_name, tmp_path):
    svc = JobService()
    t0 = time.time()
    retry(svc.create, JobSpec(name=job_name, base_model=tf_model, dataset_path=str(dataset), framework="tensorflow",
                              epochs=2, batch_size=8, workers=2, training_config=FULL), owner="tester")
    d = svc.wait("local", job_name, poll=1.0, timeout=600)
    evs = svc.events("local", job_name)
    assert d.status == JobStatus.SUCCEEDED, (d.error, [e for e in evs if e["type"] in ("error", "worker_error")])
    t_train = time.time() - t0

    # Two workers, one strategy; 158 examples / (8 x 2) = 10 steps an epoch.
    assert sorted(e["rank"] for e in evs if e["type"] == "worker") == [0, 1]
    assert [e["strategy"] for e in evs if e["type"] == "strategy"] == ["multi_worker_mirrored"]
    steps = [e for e in evs if e["type"] == "step"]
    assert [e["step"] for e in steps] == list(range(1, 21))
    assert all(e["tokens_per_s"] and e["eta_s"] is not None and e["total_steps"] == 20 for e in steps)
    epochs = [e for e in evs if e["type"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [1, 2] and epochs[1]["train_loss"] < epochs[0]["train_loss"]
    assert sum(e["loss"] for e in steps[-3:]) < sum(e["loss"] for e in steps[:3])
    assert d.metrics.loss == steps[-1]["loss"] and d.plan.strategy == "multi_worker_mirrored"

    # The page's layout: epoch-1/, epoch-2/, epoch-final and latest -> epoch-2; Keras files + training state.
    root = Path(d.checkpoint_dir)
    assert [c.name for c in d.checkpoints] == ["epoch-1", "epoch-2"]
    assert os.readlink(root / "epoch-final") == "epoch-2" and os.readlink(root / "latest") == "epoch-2"
    for name in ("epoch-1", "epoch-2"):
        for f in ("model.keras", "tokenizer.json", "checkpoint.json", "training_state/optimizer.npz",
                  "training_state/state.json"):
            assert (root / name / f).is_file(), (name, f)
        # the native TF-Keras format its name promises (a zip), not legacy HDF5 under a .keras name
        assert zipfile.is_zipfile(root / name / "model.keras"), (root / name / "model.keras").read_bytes()[:8]
    assert not [p for p in os.listdir(root) if p.startswith(".tmp")]
    assert "HDF5" not in svc.logs("local", job_name)["text"]
    state = json.loads((root / "epoch-1" / "training_state" / "state.json").read_text())
    assert state["global_step"] == 10 and state["epoch"] == 1 and state["optimizer_step"] == 10
    straight = tmp_path / "straight-epoch-2.keras"
    shutil.copy(root / "epoch-2" / "model.keras", straight)
    assert weights_diff(str(root / "epoch-1" / "model.keras"), str(straight)) > 0  # both load; training moved them

    # Resume from epoch-1: epoch numbering continues (epoch-2), from the exact position, equal to the straight run.
    t1 = time.time()
    r = retry(svc.resume, "local", job_name, checkpoint="epoch-1", epochs=1, owner="tester")
    r = svc.wait("local", r.name, poll=1.0, timeout=600)
    revs = svc.events("local", r.name)
    assert r.status == JobStatus.SUCCEEDED, (r.error, [e for e in revs if e["type"] in ("error", "worker_error")])
    assert [c.name for c in r.checkpoints] == ["epoch-2"]
    resume = [e for e in revs if e["type"] == "resume"][0]
    assert resume["exact"] and resume["global_step"] == 10 and resume["completed_epochs"] == 1
    assert [e["step"] for e in revs if e["type"] == "step"] == list(range(11, 21))
    assert weights_diff(str(straight), str(root / "epoch-2" / "model.keras")) <= 1e-4
    assert json.loads((root / "epoch-2" / "checkpoint.json").read_text())["resumed_from"] == str(root / "epoch-1")
    print(f"tensorflow: 2 epochs on 2 workers {t_train:.0f}s, resume {time.time() - t1:.0f}s")


def test_killed_worker_recovers_then_cancel_keeps_a_loadable_checkpoint(ray_cluster, tf_model, dataset, job_name,
                                                                          monkeypatch):
    # 1 s per step: after the recovery, the cancel must land within epoch 2's 10 steps, and a step's event reaches
    # the test through the workers' log, the driver and Ray's job log (seconds on a loaded machine: with 0.4 s
    # per step the job can finish before the cancel comes)
    delay_steps(monkeypatch, 1.0)
    svc = JobService()
    retry(svc.create, JobSpec(name=job_name, base_model=tf_model, dataset_path=str(dataset), framework="tensorflow",
                              epochs=2, batch_size=8, workers=2, training_config={**FULL, "max_failures": 1}),
          check=False)
    # A worker SIGKILLed in epoch 2 (10 steps an epoch): Ray restarts the group, which continues from epoch-1.
    evs = wait_for(svc, job_name, lambda evs: any(e["type"] == "step" and e["step"] >= 12 for e in evs), 300,
                   "step 12")
    rank1 = [e for e in evs if e["type"] == "worker" and e["rank"] == 1][0]
    os.kill(int(rank1["pid"]), signal.SIGKILL)
    evs = wait_for(svc, job_name, lambda evs: any(e["type"] == "step" and e["src"] == "rank0-a2" for e in evs), 300,
                   "a step after the recovery")
    rec = [e for e in evs if e["type"] == "recovery"]
    assert len(rec) == 1 and rec[0]["checkpoint_name"] == "epoch-1" and rec[0]["attempt"] == 2, rec
    assert [e["step"] for e in evs if e["type"] == "step" and e["src"] == "rank0-a2"][0] == 11

    # Cancel in the middle of epoch 2: a checkpoint of the exact step, then `cancelled`.
    svc.cancel("local", job_name)
    d = svc.wait("local", job_name, poll=1.0, timeout=120)
    assert d.status == JobStatus.CANCELLED and d.phase == "cancelled", d.error
    names = [c.name for c in d.checkpoints]
    assert names[0] == "epoch-1" and len(names) == 2 and names[1].startswith("epoch-2-step-"), names
    root = Path(d.checkpoint_dir)
    step = int(names[1].rsplit("-", 1)[1])
    assert 10 < step < 20 and os.readlink(root / "latest") == names[1] and not (root / "epoch-final").exists()
    meta = json.loads((root / names[1] / "checkpoint.json").read_text())
    assert meta["partial"] is True and meta["global_step"] == step and meta["epoch"] == 1
    assert weights_diff(str(root / "epoch-1" / "model.keras"), str(root / names[1] / "model.keras")) > 0


def test_lora_and_deepspeed_are_rejected(ray_cluster, tf_model, dataset, job_name):
    # In the spec: refused by validation, with the page's words.
    for tc in ({"method": "lora"}, {"method": "full", "deepspeed": {"zero_stage": 2}}):
        with pytest.raises(InvalidSpec, match="does not support LoRA or DeepSpeed"):
            JobService.validate({"name": job_name, "base_model": tf_model, "dataset_path": str(dataset),
                                 "framework": "tensorflow", "training_config": tc})
    # In the dataset's training_config.json (the sample asks for LoRA): refused by the pre-flight at create.
    svc = JobService()
    with pytest.raises(InvalidSpec, match="does not support LoRA or DeepSpeed") as e:
        svc.create(JobSpec(name=job_name, base_model=tf_model, dataset_path=str(dataset), framework="tensorflow",
                           epochs=1, batch_size=8, workers=2))
    assert e.value.details["errors"][0]["field"] == "training_config.method"
    # The full pre-flight of a good spec: token lengths and the plan, computed without TensorFlow.
    pf = retry(svc.preflight, JobSpec(name=job_name, base_model=tf_model, dataset_path=str(dataset),
                                      framework="tensorflow", epochs=1, batch_size=8, workers=2,
                                      training_config=FULL))
    assert pf["errors"] == [] and pf["plan"]["strategy"] == "multi_worker_mirrored", pf
    assert pf["token_lengths"]["max"] > 0 and pf["parameters"] > 0
    # two workers: the gRPC servers of MultiWorkerMirroredStrategy listen on every interface, and the user is told
    assert any("every network interface" in w for w in pf["warnings"]), pf["warnings"]
    # A Hugging Face model is not a TF base model.
    with pytest.raises(InvalidSpec, match="model.keras"):
        svc.create(JobSpec(name=job_name, base_model="meta-llama/Llama-2-7b-hf", dataset_path=str(dataset),
                           framework="tensorflow", epochs=1, batch_size=8, workers=2, training_config=FULL))
