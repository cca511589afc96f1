"""The sharded optimizer state of a checkpoint (sharded_state.py), in one process: the staging folder, its move
into the checkpoint's training_state/, a failed write, the FSDP2 restore path and when a resume may use the shards.
(tests/integration/test_resume.py resumes real 2-worker ZeRO-2 and FSDP2 jobs.)"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from cleverthis_runtime import checkpoints, sharded_state


def _trainer(torch, seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return SimpleNamespace(model=model, optimizer=opt, lr_scheduler=sched)


def _steps(torch, t, n: int) -> None:
    for _ in range(n):
        t.model(torch.ones(2, 4)).sum().backward()
        t.optimizer.step()
        t.lr_scheduler.step()
        t.optimizer.zero_grad()


def test_fsdp2_shards_staged_moved_and_restored(tmp_path):
    import torch

    root = tmp_path / "checkpoints"
    root.mkdir()
    a = _trainer(torch)
    _steps(torch, a, 3)
    staging = sharded_state.write_shards(sharded_state.FSDP2, a, str(root), rank=0, world=1, torch=torch)
    assert Path(staging).parent == root and Path(staging).name.startswith(sharded_state.STAGING_PREFIX)

    def save(tmp: Path) -> None:  # what the callback's writer does inside the checkpoint's temporary folder
        st = tmp / checkpoints.STATE_DIR
        st.mkdir()
        sharded_state.move_into(staging, st)
        torch.save(a.lr_scheduler.state_dict(), st / "scheduler.pt")

    path = Path(checkpoints.write_checkpoint(str(root), "epoch-1-step-3", save, {}))
    assert not os.path.exists(staging)
    assert (path / checkpoints.STATE_DIR / sharded_state.FSDP2_DIR / ".metadata").is_file()
    assert sorted(x.name for x in root.iterdir()) == ["epoch-1-step-3"]  # nothing staged is left beside it

    # a fresh optimizer (no state yet, as the Trainer builds it before the first step) over the same weights
    b = _trainer(torch, seed=1)
    b.model.load_state_dict(a.model.state_dict())
    assert sharded_state.load_fsdp2(b, str(path / checkpoints.STATE_DIR))
    assert torch.equal(b.model[0].weight, a.model[0].weight)  # the state's initialisation moved no weight
    assert b.lr_scheduler.state_dict()["last_epoch"] == 3
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        for name in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(sa[k][name], sb[k][name]), (k, name)
    _steps(torch, a, 1)
    _steps(torch, b, 1)
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters(), strict=True))
    # a training_state/ without shards (DDP's) is the Trainer's to load
    assert not sharded_state.load_fsdp2(b, str(tmp_path))


def test_a_failed_shard_write_leaves_nothing(tmp_path, monkeypatch):
    import torch

    def full_disk(trainer, staging):
        os.makedirs(staging)
        (Path(staging) / "part").write_text("x")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sharded_state, "_save_fsdp2", full_disk)
    with pytest.raises(OSError, match="No space"):
        sharded_state.write_shards(sharded_state.FSDP2, _trainer(torch), str(tmp_path), rank=0, world=1, torch=torch)
    assert list(tmp_path.iterdir()) == []


def test_a_staging_folder_left_by_a_crash_is_removed(tmp_path):
    left = tmp_path / f"{sharded_state.STAGING_PREFIX}0123abcd" / "global_step4"
    left.mkdir(parents=True)
    assert checkpoints.cleanup_stale(str(tmp_path)) == [f"{sharded_state.STAGING_PREFIX}0123abcd"]


@pytest.mark.parametrize(("written", "written_world", "strategy", "world", "reason"), [
    (None, 2, "ddp", 2, None),
    ("deepspeed-zero2", 2, "deepspeed-zero2", 2, None),
    ("fsdp", 2, "fsdp", 2, None),
    ("deepspeed-zero2", 2, "deepspeed-zero2", 4, "sharded over 2 workers (deepspeed-zero2), this run has 4"),
    ("deepspeed-zero2", 2, "deepspeed-zero3", 2, "sharded by deepspeed-zero2, this run uses deepspeed-zero3"),
    ("fsdp", 2, "deepspeed-zero2", 2, "sharded by fsdp, this run uses deepspeed-zero2"),
    ("fsdp", 2, "ddp", 2, "is sharded (fsdp over 2 workers), this run's is not (ddp, 2 workers)"),
    ("fsdp", 2, "fsdp", 1, "this run's is not (fsdp, 1 worker)"),
    (None, 2, "fsdp", 2, "holds no sharded optimizer state for fsdp"),
    (None, 1, "deepspeed-zero1", 1, "holds no sharded optimizer state for deepspeed-zero1"),
])
def test_which_checkpoints_resume_exactly(written, written_world, strategy, world, reason):
    why = sharded_state.mismatch(written, written_world, strategy, world)
    assert (why is None) if reason is None else (why is not None and reason in why), why
