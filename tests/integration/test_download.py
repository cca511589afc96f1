"""`%train download` on a real Ray cluster: one task per node, the cache-hit path, the offline error. Nothing
can be downloaded here: the Hub cache is made by hand (see tests/unit/test_model_cache.py), and
HF_HUB_OFFLINE=1 is set for the whole test run. (A job whose Hub model is cached starting without a download:
tests/integration/test_faults.py's disk-full job trains from a cached Hub id.)"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from jupyter_cleverthis.service.jobs import JobService

from .training_helpers import make_cached_model

pytestmark = pytest.mark.integration


@pytest.fixture
def hf_home(tmp_path, monkeypatch) -> Path:
    """HF_HOME travels with the jobs this test submits (the job service passes it through)."""
    home = tmp_path / "hf"
    home.mkdir()
    monkeypatch.setenv("HF_HOME", str(home))
    return home


def test_download_fans_out_per_node_cache_hit_and_offline_error(ray_cluster, tiny_model, hf_home, capsys):
    from jupyter_cleverthis.cli import main

    repo = f"cleverthis-test/tiny-{uuid.uuid4().hex[:8]}"
    snap = make_cached_model(hf_home, repo, Path(tiny_model))
    svc = JobService()
    res = svc.download("local", repo)
    assert res["ok"] is True and res["model"] == repo
    nodes = res["nodes"]
    assert len(nodes) >= 1 and all(n["status"] == "cached" and n["path"] == str(snap) for n in nodes)
    assert len({n["node_id"] for n in nodes}) == len(nodes) and nodes[0]["bytes"] > 0

    # The notebook widgets' "Pre-fetch model": the same download, answered from a thread (the kernel stays free).
    from jupyter_cleverthis.widgets import JobList

    w = JobList(service=svc)
    replies: list[dict] = []
    w.send = replies.append
    w._on_action(w, {"action": "download", "model": repo, "request_id": "p1"}, None)
    deadline = time.time() + 300
    while not replies and time.time() < deadline:
        time.sleep(0.2)
    assert replies and replies[0]["reply_to"] == "p1" and replies[0]["ok"], replies
    assert [(n["status"], n["path"]) for n in replies[0]["result"]["nodes"]] == [("cached", str(snap))] * len(nodes)

    missing = f"cleverthis-test/missing-{uuid.uuid4().hex[:8]}"
    rc = main(["download", missing])
    out = capsys.readouterr().out
    assert rc == 1
    assert f"{missing}: NOT available on every node" in out
    assert f"model '{missing}' is not in the model cache of node" in out
    assert f"`%train download {missing} --cluster C`" in out and "HF_HUB_OFFLINE=1" in out
