"""Cancel and exact resume through real Ray jobs (tiny model, CPU, fixed seed).

DDP, 1 worker: 2 epochs straight vs a cancel in the middle of epoch 2 + `resume`: the final weights are equal
within 1e-4. (1 epoch + resume 1 epoch, the epoch-boundary case, is checked in tests/unit/test_training_state.py
with the same training code, in seconds.) DeepSpeed ZeRO-2 and FSDP2, 2 workers: the same within one epoch, each
rank's optimizer shard written into the cancel checkpoint and restored by the resume.
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


@pytest.mark.timeout(900)
@pytest.mark.parametrize("config", [
    {"method": "full", "learning_rate": 1e-3, "deepspeed": {"zero_stage": 2}},
    {"method": "full", "learning_rate": 1e-3, "strategy": "fsdp"},
], ids=["zero2", "fsdp2"])
def test_sharded_cancel_mid_epoch_then_resume_equals_straight_run(ray_cluster, tiny_model, dataset, tmp_path,
                                                                  job_name, monkeypatch, config):
    """2 workers, each holding a shard of the optimizer: a cancel in the middle of the job's one epoch (10 steps),
    `resume`, and the weights equal a straight 2-worker run's."""
    delay_steps(monkeypatch, 1.0)  # the cancel lands mid-epoch however loaded the machine is
    svc = JobService()
    cut = tmp_path / "cut"
    t0 = time.time()
    svc.create(JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(dataset), epochs=1, batch_size=8,
                       workers=2, output_dir=str(cut), training_config=config), check=False)
    wait_for_step(svc, job_name, 3)
    svc.cancel("local", job_name)
    cancelled = svc.wait("local", job_name, poll=1.0, timeout=180)
    assert cancelled.status == JobStatus.CANCELLED, cancelled.error
    [p] = cancelled.checkpoints
    step = int(p.name.rsplit("-", 1)[1])
    assert p.name == f"epoch-1-step-{step}" and 3 <= step < 10, p.name
    state = cut / p.name / "training_state"
    if "deepspeed" in config:  # the engine's own checkpoint: each rank's optimizer partition
        assert (state / "latest").read_text().strip() == f"global_step{step}"
        assert sorted(f.name for f in (state / f"global_step{step}").glob("*optim_states.pt")) == \
            [f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)]
    else:  # torch.distributed.checkpoint: one file per rank
        assert sorted(f.name for f in (state / "fsdp2_optimizer").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert not (state / "optimizer.pt").exists()
    assert not [x for x in os.listdir(cut) if x.startswith(".tmp")]  # the staged shards moved into the checkpoint

    delay_steps(monkeypatch, 0)
    resumed = svc.resume("local", job_name)
    straight = straight_reference(tiny_model, dataset, tmp_path / "straight", epochs=1, workers=2,
                                  training_config=config, name=f"{job_name}-straight")  # while the resumed job runs
    r = svc.wait("local", resumed.name, poll=1.0, timeout=300)
    assert r.status == JobStatus.SUCCEEDED, r.error
    evs = svc.events("local", resumed.name)
    assert [e for e in evs if e["type"] == "resume"][0]["exact"], [e for e in evs if e["type"] == "warning"]
    assert [e for e in evs if e["type"] == "step"][0]["step"] == step + 1
    diff = max_diff(straight / "epoch-1" / "model.safetensors", cut / "epoch-1" / "model.safetensors")
    assert diff <= 1e-4
    print(f"{job_name}: cancelled at step {step}, weights within {diff:.1e} of the straight run, "
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
