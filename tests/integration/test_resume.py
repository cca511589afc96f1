"""Cancel and exact resume through real Ray jobs (tiny model, 1 worker, CPU, fixed seed).

2 epochs straight vs a cancel in the middle of epoch 2 + `resume`: the final weights are equal within 1e-4.
(1 epoch + resume 1 epoch, the epoch-boundary case, is checked in tests/unit/test_training_state.py with the
same training code, in seconds.)
"""

from __future__ import annotations

import os
import time

import pytest

from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import JobSpec, JobStatus

from .training_helpers import (  # noqa: F401
    ADAPTER,
    delay_steps,
    max_diff,
    slow_steps,
    straight_reference,
    wait_for_step,
)

pytestmark = pytest.mark.integration


@pytest.mark.usefixtures("slow_steps")
def test_cancel_mid_epoch_then_resume_equals_straight_run(ray_cluster, tiny_model, dataset, tmp_path, job_name,
                                                          monkeypatch):
    delay_steps(monkeypatch, 0.2)  # numerics unchanged; the cancel lands in epoch 2 however fast the steps are
    svc = JobService()
    cut = tmp_path / "cut"
    t0 = time.time()
    svc.create(JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(dataset), epochs=2, batch_size=8,
                       workers=1, output_dir=str(cut)), check=False)

    # 20 steps per epoch: cancel in the middle of epoch 2.
    seen = wait_for_step(svc, job_name, 23)
    t_seen = time.time()
    assert seen < 40
    svc.cancel("local", job_name)
    cancelled = svc.wait("local", job_name, poll=1.0, timeout=120)
    t_cancel = time.time()
    assert cancelled.status == JobStatus.CANCELLED, cancelled.error
    assert cancelled.phase == "cancelled"
    partial = [c for c in cancelled.checkpoints if "-step-" in c.name]
    assert [c.name for c in cancelled.checkpoints][:1] == ["epoch-1"] and len(partial) == 1, cancelled.checkpoints
    p = partial[0]
    step = int(p.name.rsplit("-", 1)[1])
    assert p.name == f"epoch-2-step-{step}" and 20 < step < 40 and p.epoch == 1
    from cleverthis_runtime import checkpoints

    meta = checkpoints.read_meta(p.path)
    assert meta["partial"] is True and meta["global_step"] == step
    assert not [x for x in os.listdir(cut) if x.startswith(".tmp")] and not (cut / "epoch-final").exists()
    assert os.readlink(cut / "latest") == p.name
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(p.path)  # intact and loadable

    # `%train resume NAME`: the remaining epoch, from the exact position.
    resumed = svc.resume("local", job_name)
    straight = straight_reference(tiny_model, dataset, tmp_path / "straight")  # while the resumed job runs
    assert resumed.name.endswith("-resume-1") and resumed.epochs == 1
    r = svc.wait("local", resumed.name, poll=1.0, timeout=300)
    assert r.status == JobStatus.SUCCEEDED, r.error
    assert [c.name for c in r.checkpoints] == ["epoch-2"]
    ev = [e for e in svc.events("local", resumed.name) if e["type"] == "resume"][0]
    assert ev["exact"] and ev["global_step"] == step and ev["base_loaded"] == "original"
    # the default on CPU: length-grouped batches, in an order seeded per epoch, so the resume continues it exactly
    plans = [e for n in (job_name, resumed.name) for e in svc.events("local", n) if e["type"] == "plan"]
    assert [p["batching"] for p in plans] == ["grouped", "grouped"], plans
    assert "attention needs a block-diagonal mask" in plans[0]["reasons"]["batching"]
    first = [e for e in svc.events("local", resumed.name) if e["type"] == "step"][0]
    assert first["step"] == step + 1  # continues at the next step, not from the epoch start
    assert r.serving.base_model == tiny_model  # the adapter applies to the original base

    ref = straight / "epoch-2"
    assert max_diff(ref / ADAPTER, cut / "epoch-2" / ADAPTER) <= 1e-4
    assert max_diff(ref / "model.safetensors", cut / "epoch-2" / "model.safetensors") <= 1e-4
    assert os.readlink(cut / "epoch-final") == "epoch-2"
    print(f"cancel+resume test: step {seen} after {t_seen - t0:.0f}s, cancelled after {t_cancel - t_seen:.0f}s, "
          f"{time.time() - t0:.0f}s total")


def test_cancel_before_training_ends_quickly(ray_cluster, tiny_model, dataset, job_name):
    """A cancel while the job is still initializing has nothing to save: it ends without waiting the grace."""
    svc = JobService()
    svc.create(JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(dataset), epochs=1, batch_size=8,
                       workers=1), check=False)
    end = time.time() + 120
    while svc.get("local", job_name).phase not in ("starting_workers", "loading_data", "loading_model") \
            and time.time() < end:
        time.sleep(0.2)
    t = time.time()
    svc.cancel("local", job_name)
    d = svc.wait("local", job_name, poll=0.3, timeout=120)
    assert d.status == JobStatus.CANCELLED
    assert time.time() - t < 15
