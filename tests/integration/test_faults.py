"""Faults through real Ray jobs: a worker SIGKILLed mid-epoch recovers from the last checkpoint (and ends
equal to an uninterrupted run); a full disk while writing a checkpoint fails the job at once with a
classified reason, earlier checkpoints intact (that job also shows a cached Hub model starting without a
download)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from cleverthis_runtime import checkpoints
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import JobSpec, JobStatus

from .training_helpers import (  # noqa: F401
    ADAPTER,
    delay_steps,
    make_cached_model,
    max_diff,
    straight_reference,
    wait_for,
    wait_for_step,
)

pytestmark = pytest.mark.integration


def test_sigkilled_worker_recovers_from_the_last_checkpoint(ray_cluster, tiny_model, dataset, tmp_path, job_name,
                                                           monkeypatch):
    # 0.8 s per step: the kill must land before epoch 2's 20 steps end, and a step's event reaches the test
    # through the workers' log, the driver and Ray's job log (seconds on a loaded machine)
    delay_steps(monkeypatch, 0.8)
    svc = JobService()
    out = tmp_path / "checkpoints"
    t0 = time.time()
    svc.create(JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(dataset), epochs=2, batch_size=8,
                       workers=1, output_dir=str(out), training_config={"max_failures": 1}), check=False)
    wait_for_step(svc, job_name, 21)  # epoch 1 is checkpointed (its event comes before step 21's), epoch 2 runs
    evs = svc.events("local", job_name)
    assert [e["name"] for e in evs if e["type"] == "checkpoint"] == ["epoch-1"]
    worker = [e for e in evs if e["type"] == "worker" and e["rank"] == 0][0]
    assert worker["attempt"] == 1
    os.kill(int(worker["pid"]), signal.SIGKILL)
    t_kill = time.time()
    # the uninterrupted run, computed here while the job recovers (computed before the kill, on a loaded machine it
    # can take longer than the whole job, and the kill would come after the last step)
    straight = straight_reference(tiny_model, dataset, tmp_path / "straight")

    d = svc.wait("local", job_name, poll=1.0, timeout=400)
    assert d.status == JobStatus.SUCCEEDED, (d.error, d.traceback)
    evs = svc.events("local", job_name)
    rec = [e for e in evs if e["type"] == "recovery"]
    assert len(rec) == 1 and rec[0]["attempt"] == 2 and rec[0]["checkpoint_name"] == "epoch-1", rec
    assert "continue from epoch-1" in rec[0]["message"]
    again = [e for e in evs if e["type"] == "worker" and e["attempt"] == 2]
    assert again and again[0]["pid"] != worker["pid"], [(e["src"], e["seq"], e["type"]) for e in evs
                                                         if e["src"].endswith("-a2")][:8]
    assert [c.name for c in d.checkpoints] == ["epoch-1", "epoch-2"]
    steps = [e["step"] for e in evs if e["type"] == "step" and e["src"] == "rank0-a2"]
    assert steps[0] == 21  # the retry continues after epoch 1, not from step 1
    assert d.error is None and os.readlink(out / "epoch-final") == "epoch-2"
    # Recovery uses the exact resume: the result equals an uninterrupted run.
    assert (out / "epoch-2" / ADAPTER).exists(), (sorted(os.listdir(out / "epoch-2")), [
        (e["type"], e.get("base_loaded"), e.get("method"), e.get("exact")) for e in evs
        if e["type"] in ("resume", "plan", "warning")])
    assert max_diff(straight / "epoch-2" / ADAPTER, out / "epoch-2" / ADAPTER) <= 1e-4
    print(f"sigkill test: killed after {t_kill - t0:.0f}s, recovered and done {time.time() - t_kill:.0f}s later")


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    """A real 8 MiB tmpfs when this machine lets us mount one; otherwise the runtime's test-only fault hook
    makes the epoch-2 write fail with ENOSPC."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode == 0:
        try:
            yield mnt, True
        finally:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        return
    orig = JobService._runtime_env

    def env(self, spec):
        out = orig(self, spec)
        out["env_vars"][checkpoints.FAULT_ENV] = "epoch-2:ENOSPC"
        return out

    monkeypatch.setattr(JobService, "_runtime_env", env)
    yield mnt, False


def _fill(folder: Path) -> None:
    with open(folder / f"filler-{uuid.uuid4().hex[:6]}", "wb") as f:
        try:
            while True:
                f.write(b"\0" * (256 * 1024))
                f.flush()
        except OSError:
            pass


def test_disk_full_fails_classified_and_keeps_earlier_checkpoints(ray_cluster, tiny_model, dataset, job_name,
                                                                  small_disk, tmp_path, monkeypatch):
    # Epoch 2 takes at least 20 x 0.6 s: the disk is filled once epoch-1's checkpoint has been seen. At 0.3 s per
    # step a loaded machine let epoch 2 finish, and its checkpoint be written, before the fill.
    delay_steps(monkeypatch, 0.6)
    mnt, real = small_disk
    out = mnt / "checkpoints"
    # The base model is a Hub id found in the node's cache (HF_HOME travels with the job; HF_HUB_OFFLINE=1):
    # the job starts without downloading.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    repo = f"cleverthis-test/tiny-{uuid.uuid4().hex[:8]}"
    make_cached_model(tmp_path / "hf", repo, Path(tiny_model))
    svc = JobService()
    # report_to none: the subject is the checkpoint write (with TensorBoard's runs/ on the same full disk its
    # writer may hit ENOSPC first: still disk_full, see docs/tracking.md).
    svc.create(JobSpec(name=job_name, base_model=repo, dataset_path=str(dataset), epochs=2, batch_size=8,
                       workers=1, output_dir=str(out), training_config={"report_to": ["none"]}), check=False)
    evs = wait_for(svc, job_name, lambda evs: any(e["type"] == "checkpoint" and e["name"] == "epoch-1" for e in evs),
                   what="the epoch-1 checkpoint")
    phases = [e["phase"] for e in evs if e["type"] == "phase"]
    assert "loading_model" in phases and "downloading" not in phases
    if real:
        _fill(mnt)
    t = time.time()
    d = svc.wait("local", job_name, poll=1.0, timeout=300)
    assert d.status == JobStatus.FAILED
    assert d.error_kind == "disk_full", (d.error, d.error_kind)
    assert "cannot write checkpoint epoch-2" in d.error and "No space left on device" in d.error
    assert "earlier checkpoints are intact (latest: epoch-1)" in d.error
    assert "Free space under the checkpoint folder" in d.advice
    assert time.time() - t < 60  # failed at once: a full disk is not retried max_failures times
    assert not [e for e in svc.events("local", job_name) if e["type"] == "recovery"]
    visible = sorted(p.name for p in out.iterdir())
    assert visible == [".cleverthis-owner.json", "epoch-1", "latest"], visible
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(str(out / "epoch-1"))  # intact and loadable
    assert checkpoints.read_meta(str(out / "epoch-1"))["base_model"] == repo


def test_out_of_memory_fails_classified_with_fixes_the_cluster_accepts(ray_cluster, tiny_model, dataset, job_name,
                                                                      monkeypatch):
    """torch's out-of-memory error raised in a worker's step (injected: a CPU has no CUDA allocator to exhaust)
    fails the job as out_of_memory, by its type, and the detail offers the page's four fixes; the QLoRA one,
    opened in the create form, is a spec the pre-flight on the cluster accepts."""
    from jupyter_cleverthis.text import detail_text

    orig = JobService._runtime_env

    def env(self, spec):
        out = orig(self, spec)
        out["env_vars"]["CLEVERTHIS_TEST_OOM_AT_STEP"] = "2"
        return out

    monkeypatch.setattr(JobService, "_runtime_env", env)
    svc = JobService()
    svc.create(JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(dataset), epochs=1, batch_size=8,
                       workers=1, training_config={"method": "lora", "report_to": ["none"]}), check=False)
    d = svc.wait("local", job_name, poll=1.0, timeout=300)
    assert d.status == JobStatus.FAILED and d.error_kind == "out_of_memory", (d.error, d.error_kind)
    assert "CUDA out of memory" in d.error and "QLoRA" in d.advice
    assert [f.label for f in d.fixes] == ["Retry with QLoRA", "Retry with half the batch size",
                                         "Retry with gradient checkpointing", "Retry with ZeRO-3"]
    assert d.fixes[1].spec["batch_size"] == 4 and d.fixes[1].spec["name"] == job_name
    assert "  fix: Retry with QLoRA (4-bit base weights" in detail_text(d)  # %train show
    monkeypatch.setattr(JobService, "_runtime_env", orig)
    # the failed job owns its checkpoint folder: the retry writes to one of its own (the form asks for it)
    qlora = svc.validate({**d.fixes[0].spec, "name": f"{job_name[:40]}-qlora",
                          "output_dir": str(dataset.parent / "qlora-checkpoints")})
    assert qlora.training_config.method == "qlora" and qlora.batch_size == 8
    assert svc.preflight(qlora, quick=True)["errors"] == []
