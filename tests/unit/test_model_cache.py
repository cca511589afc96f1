"""The model cache without Ray: cache hits from a locally made Hub cache, the offline error, download progress.

Nothing can be downloaded here, so the Hub cache layout is made by hand (models--org--name/refs/main +
snapshots/<commit>/), exactly what huggingface_hub's snapshot_download reads.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cleverthis_runtime import checkpoints, download

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def make_cached_model(hf_home: Path, repo_id: str, files_from: Path | None = None) -> Path:
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / COMMIT
    if files_from is not None:
        shutil.copytree(files_from, snap)
    else:
        snap.mkdir(parents=True)
        (snap / "config.json").write_text("{}")
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return snap


@pytest.fixture
def hf_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


def test_cached_model_resolves_without_network(hf_home):
    snap = make_cached_model(hf_home, "acme/tiny-llama")
    assert download.cache_dir() == str(hf_home / "hub")
    assert download.cached_snapshot("acme/tiny-llama") == str(snap)
    events = []
    assert download.ensure_model("acme/tiny-llama", lambda t, **kw: events.append((t, kw))) == str(snap)
    assert events == []  # a cache hit starts without any download phase


def test_uncached_model_offline_names_the_model_and_the_prefetch(hf_home):
    with pytest.raises(download.ModelNotCached) as e:
        download.ensure_model("acme/not-here")
    msg = str(e.value)
    assert "'acme/not-here'" in msg and "%train download acme/not-here --cluster C" in msg
    assert "HF_HUB_OFFLINE=1" in msg and str(hf_home / "hub") in msg
    from cleverthis_runtime.control import is_fatal
    from cleverthis_runtime.triage import classify

    assert classify(f"ModelNotCached: {msg}")[0] == "model_not_cached" and is_fatal(e.value)


def test_uncached_model_online_downloads_with_progress(hf_home, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    seen = []

    def fake_download(repo_id, revision=None, emit=None):  # the Hub is unreachable here: stand in for it
        bar = download._progress_class(emit, repo_id)(total=2_000_000, unit="B", desc="Downloading bytes")
        bar.update(1_000_000)
        bar.update(1_000_000)
        bar.close()
        return str(make_cached_model(hf_home, repo_id))

    monkeypatch.setattr(download, "download", fake_download)
    path = download.ensure_model("acme/fresh", lambda t, **kw: seen.append((t, kw)))
    assert path.endswith(COMMIT)
    kinds = [t for t, _ in seen]
    assert kinds[0] == "phase" and seen[0][1]["phase"] == "downloading" and kinds[-1] == "download_done"
    progress = [kw for t, kw in seen if t == "download_progress"]
    assert progress and progress[-1]["downloaded"] == 2_000_000 and progress[-1]["total"] == 2_000_000


@pytest.mark.parametrize("name,hub", [("meta-llama/Llama-2-7b-hf", True), ("gpt2", True), ("/models/x", False),
                                      ("./x", False), ("a/b/c", False), ("~/m", False)])
def test_hub_ids_and_paths(name, hub):
    assert download.is_hub_id(name) is hub


@pytest.mark.parametrize("model,method,expected", [
    ("meta-llama/Llama-2-7b-hf", "lora", 300),
    ("meta-llama/Llama-2-7b-hf", "full", 860),
    ("mistralai/Mixtral-8x7B-v0.1", "lora", 2260),
    ("tiiuae/falcon-40b", "full", 3600),
    ("some/unknown-model", None, 300),
])
def test_stop_grace_rule(model, method, expected):
    assert checkpoints.stop_grace_seconds(model, method) == expected


def test_stop_grace_of_a_local_model_reads_its_config(tiny_model):
    tiny = tiny_model
    assert checkpoints.estimate_parameters(tiny) < 1e6
    assert checkpoints.stop_grace_seconds(tiny, "lora") == checkpoints.GRACE_FLOOR_S
    assert checkpoints.stop_grace_seconds(tiny, "lora", override=90) == 90


def test_stale_temporary_folders_are_removed_and_lineage_resolves(tmp_path):
    root = tmp_path / "c"
    (root / ".tmp-epoch-2-abcd1234").mkdir(parents=True)
    (root / "epoch-1").mkdir()
    (root / "epoch-1" / "checkpoint.json").write_text('{"epoch": 1, "job": "a", "base_model": "/models/base"}')
    (root / "epoch-2-step-30").mkdir()
    (root / "epoch-2-step-30" / "checkpoint.json").write_text(
        f'{{"epoch": 1, "global_step": 30, "partial": true, "job": "a", "base_model": "{root / "epoch-1"}"}}')
    checkpoints.claim(str(root), "a")
    assert not (root / ".tmp-epoch-2-abcd1234").exists()
    assert checkpoints.latest_of_job(str(root), "a")["name"] == "epoch-2-step-30"
    assert checkpoints.latest_of_job(str(root), "b") is None
    assert checkpoints.original_base(str(root / "epoch-2-step-30")) == "/models/base"
    assert checkpoints.partial_name(2, 37) == "epoch-2-step-37"
