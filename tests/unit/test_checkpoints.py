from __future__ import annotations

import os

import pytest

from cleverthis_runtime import checkpoints


def test_atomic_write_and_links(tmp_path):
    root = str(tmp_path / "checkpoints")
    checkpoints.claim(root, "job-a")

    def save(d):
        (d / "model.safetensors").write_bytes(b"x")

    p = checkpoints.write_checkpoint(root, "epoch-1", save, {"epoch": 1})
    checkpoints.point(root, "epoch-final", "epoch-1")
    assert os.readlink(os.path.join(root, "epoch-final")) == "epoch-1"
    assert [c["name"] for c in checkpoints.list_checkpoints(root)] == ["epoch-1"]
    assert checkpoints.read_meta(p)["epoch"] == 1


def test_failed_save_leaves_nothing_visible(tmp_path):
    root = str(tmp_path)

    def save(d):
        (d / "half").write_bytes(b"x")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        checkpoints.write_checkpoint(root, "epoch-1", save, {})
    assert os.listdir(root) == []


def test_other_jobs_folder_is_refused_unless_resuming(tmp_path):
    root = str(tmp_path / "c")
    checkpoints.claim(root, "job-a")
    with pytest.raises(checkpoints.CheckpointError, match="belongs to job 'job-a'.*output_dir"):
        checkpoints.claim(root, "job-b")
    checkpoints.claim(root, "job-b", resuming_from=os.path.join(root, "epoch-1"))
    assert checkpoints.owner_of(root) == "job-b"
