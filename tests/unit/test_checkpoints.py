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


def test_each_file_and_each_folder_is_fsynced_once_and_the_rename_too(tmp_path, monkeypatch):
    synced_dirs: list[str] = []
    real = checkpoints.fsync_path
    monkeypatch.setattr(checkpoints, "fsync_path", lambda d: (synced_dirs.append(os.path.basename(d)), real(d)))

    def save(d):
        (d / "model.safetensors").write_bytes(b"w")
        (d / "training_state").mkdir()
        (d / "training_state" / "optimizer.pt").write_bytes(b"o")

    checkpoints.write_checkpoint(str(tmp_path), "epoch-1", save, {"epoch": 1})
    tmp_name = [n for n in synced_dirs if n.startswith(".tmp-epoch-1-")]
    assert sorted(synced_dirs) == sorted(["training_state", *tmp_name, tmp_path.name]) and len(tmp_name) == 1
    assert synced_dirs[-1] == tmp_path.name  # the root last: its entry is the rename


def test_tokenizer_files_are_serialised_once_per_run_and_copied_into_each_checkpoint(tmp_path):
    writes = []

    def write(d):
        writes.append(d)
        (d / "tokenizer.json").write_text('{"v": 1}')
        (d / "sub").mkdir()
        (d / "sub" / "chat_template.jinja").write_text("{{ x }}")

    checkpoints.claim(str(tmp_path), "job")
    for name in ("epoch-1", "epoch-2"):
        checkpoints.write_checkpoint(
            str(tmp_path), name, lambda d: checkpoints.add_job_files(str(tmp_path), "job-ab12", d, write), {})
    assert len(writes) == 1
    one, two = tmp_path / "epoch-1" / "tokenizer.json", tmp_path / "epoch-2" / "tokenizer.json"
    assert one.read_text() == two.read_text() == '{"v": 1}'
    assert (tmp_path / "epoch-2" / "sub" / "chat_template.jinja").read_text() == "{{ x }}"
    assert os.stat(one).st_ino != os.stat(two).st_ino  # copies: editing one checkpoint leaves the other
    assert not (tmp_path / "epoch-1" / checkpoints.DONE_MARK).exists()
    assert [c["name"] for c in checkpoints.list_checkpoints(str(tmp_path))] == ["epoch-1", "epoch-2"]
    # a crashed run's folder is removed by the next claim; a finished run removes its own
    assert (tmp_path / ".job-files-job-ab12").is_dir()
    checkpoints.claim(str(tmp_path), "job")
    assert not list(tmp_path.glob(".job-files-*"))
    checkpoints.add_job_files(str(tmp_path), "job-cd34", tmp_path / "epoch-1", write)
    checkpoints.remove_job_files(str(tmp_path), "job-cd34")
    assert not list(tmp_path.glob(".job-files-*")) and len(writes) == 2
