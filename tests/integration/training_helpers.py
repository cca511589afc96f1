"""Shared by the resume, fault and multi-node tests: the in-process reference run and small waits."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import JobSpec, JobStatus

ADAPTER = "adapter_model/adapter_model.safetensors"


def delay_steps(monkeypatch, seconds: float) -> None:
    """Jobs submitted in the test sleep `seconds` per step (numerics unchanged) so a cancel or a kill lands
    mid-epoch (20 steps per epoch with the sample data, batch size 8 and 1 worker)."""
    orig = JobService._runtime_env

    def env(self, spec):
        out = orig(self, spec)
        out["env_vars"]["CLEVERTHIS_TEST_STEP_DELAY_S"] = str(seconds)
        return out

    monkeypatch.setattr(JobService, "_runtime_env", env)


@pytest.fixture
def slow_steps(monkeypatch):
    delay_steps(monkeypatch, 0.3)


def straight_reference(tiny_model: str, dataset: Path, out: Path, epochs: int = 2, *, workers: int = 1,
                       training_config: dict | None = None, name: str = "reference") -> Path:
    """The uninterrupted run, computed in this process by the same training code (world size 1, seconds):
    Ray adds nothing to the numerics of one worker (per-step losses are identical), so it is the reference.
    With several workers (a sharded strategy) it is a Ray job of its own, `name`, writing into `out`."""
    if workers > 1:
        run_job(tiny_model, dataset, name, training_config or {}, workers=workers, epochs=epochs, output_dir=str(out))
        return out
    from cleverthis_runtime import checkpoints
    from cleverthis_runtime.data import read_training_config
    from cleverthis_runtime.spec import TrainingConfig
    from cleverthis_runtime.train import run

    cfg, _ = read_training_config(str(dataset))
    spec = JobSpec(name="reference", base_model=tiny_model, dataset_path=str(dataset), epochs=epochs, batch_size=8,
                   workers=1, output_dir=str(out))
    checkpoints.claim(str(out), "reference")
    run({"spec": spec.model_dump(mode="json"), "training_config": TrainingConfig.model_validate(cfg).model_dump(),
         "checkpoint_dir": str(out), "job": "reference"})
    return out


def max_diff(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    x, y = load_file(str(a)), load_file(str(b))
    assert x.keys() == y.keys()
    return max(float((x[k] - y[k]).abs().max()) for k in x)


def wait_for(svc: JobService, name: str, pred, timeout: float = 300, what: str = "") -> list[dict]:
    """Poll the job's events until pred(events) is true; fails early if the job ends first."""
    end = time.time() + timeout
    while time.time() < end:
        evs = svc.events("local", name)
        if pred(evs):
            return evs
        d = svc.get("local", name)
        assert not d.status.is_terminal(), (what, d.status, d.error)
        time.sleep(0.5)
    raise AssertionError(f"{name}: timed out waiting for {what}")


def wait_for_step(svc: JobService, name: str, step: int, timeout: float = 300) -> int:
    evs = wait_for(svc, name, lambda evs: any(e["type"] == "step" and e["step"] >= step for e in evs), timeout,
                   f"step {step}")
    return max(e["step"] for e in evs if e["type"] == "step")


def make_cached_model(hf_home: Path, repo_id: str, files_from: Path) -> Path:
    """A Hub cache entry made by hand (models--org--name/refs/main + snapshots/<commit>/), as
    huggingface_hub's snapshot_download reads it: nothing can be downloaded here."""
    import shutil

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    shutil.copytree(files_from, snap)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


def run_job(tiny_model, dataset, job_name, config, *, workers=2, batch_size=8, timeout=900, epochs=1, **fields):
    """Create a job (1 epoch unless told) with this training_config (and other spec `fields`) and wait for it to
    succeed; returns (detail, events)."""
    svc = JobService()
    spec = JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(dataset), epochs=epochs,
                   batch_size=batch_size, workers=workers, training_config=config, **fields)
    t0 = time.time()
    for attempt in range(6):  # a loaded machine: the head's job agent may not answer at once
        try:
            svc.create(spec, owner="tester")
            break
        except Exception as e:  # noqa: BLE001
            if attempt == 5 or not any(s in str(e) for s in ("No available agent", "Connection aborted")):
                raise
            time.sleep(5)
    final = svc.wait("local", job_name, poll=1.0, timeout=timeout)
    evs = svc.events("local", job_name)
    assert final.status == JobStatus.SUCCEEDED, (final.error, [e for e in evs if e["type"] in ("error", "worker_error")])
    print(f"{job_name}: {time.time() - t0:.1f} s")
    return final, evs


def assert_memory_as_planned(evs: list[dict], workers: int, tolerance: float = 0.25) -> None:
    """Every worker reported its measured peak at the end of its run (`memory` event), within `tolerance` of the
    plan's per-worker estimate (the process's resident size on CPU)."""
    plan = [e for e in evs if e["type"] == "plan"][0]["memory_per_worker_gb"]
    mem = [e for e in evs if e["type"] == "memory"]
    assert sorted(e["rank"] for e in mem) == list(range(workers)), mem
    for e in mem:
        # each rank plans with its own measured process size: rank 0's plan event is one of them
        assert abs(e["planned_gb"] - plan["total"]) <= 0.05 * plan["total"], (e, plan)
        assert abs(e["planned_gb"] - e["peak_bytes"] / 1e9) <= tolerance * e["peak_bytes"] / 1e9, (e, plan)
