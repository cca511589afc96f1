"""Two Ray nodes on this machine: the session's head plus a second `ray start --address …` node with its own
resources (1 CPU, a `node2` resource) and its own model cache. A 2-worker job runs one worker per node
(STRICT_SPREAD), reading the dataset from the same path on both; `%train download` answers per node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from jupyter_cleverthis.service.clusters import LocalCluster, cluster_resources, free_port
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import JobSpec, JobStatus

from .training_helpers import make_cached_model

pytestmark = pytest.mark.integration


@pytest.fixture
def second_node(ray_cluster, cleverthis_home, tmp_path):
    """`ray start --address <gcs> --block` with 1 CPU and HF_HOME of its own; stopped by its pid."""
    local = LocalCluster("local", cleverthis_home)
    st = local.state()
    hf_home = tmp_path / "node2-hf"
    hf_home.mkdir()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    cmd = [
        ray_bin, "start", f"--address={st['gcs_address']}", "--block", "--disable-usage-stats",
        "--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=0", f"--resources={json.dumps({'node2': 1})}",
        "--object-store-memory=100000000", f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}", f"--metrics-export-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
    ]  # fmt: skip
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(local.token_file), HF_HOME=str(hf_home),
               RAY_USAGE_STATS_ENABLED="0", PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("RAY_ADDRESS", None)
    log = open(tmp_path / "node2.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            stdin=subprocess.DEVNULL)
    try:
        end = time.time() + 120
        while time.time() < end:
            res = cluster_resources(ray_cluster) or {}
            if len(res.get("nodes") or []) >= 2 and (res.get("CPU") or {}).get("total", 0) >= 3:
                break
            assert proc.poll() is None, (tmp_path / "node2.log").read_text()[-2000:]
            time.sleep(1)
        else:
            raise AssertionError("the second node did not join: " + (tmp_path / "node2.log").read_text()[-2000:])
        yield {"hf_home": hf_home, "pid": proc.pid}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_two_nodes_one_worker_each_and_per_node_model_cache(ray_cluster, tiny_model, dataset, job_name,
                                                             second_node, monkeypatch):
    # Each node keeps its own cache: the job must not impose one HF_HOME on both.
    monkeypatch.delenv("HF_HOME", raising=False)
    svc = JobService()
    t0 = time.time()
    svc.create(JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(dataset), epochs=1, batch_size=8,
                       workers=2, cpus_per_worker=1, training_config={"placement_strategy": "STRICT_SPREAD"}),
               check=False)

    # Meanwhile: a model cached on the second node only (nothing can be downloaded: HF_HUB_OFFLINE=1).
    repo = f"cleverthis-test/tiny-{uuid.uuid4().hex[:8]}"
    snap = make_cached_model(second_node["hf_home"], repo, Path(tiny_model))
    res = svc.download("local", repo)
    by_status = {n["status"]: n for n in res["nodes"]}
    assert len(res["nodes"]) == 2 and res["ok"] is False, res
    assert by_status["cached"]["path"] == str(snap)
    assert f"model '{repo}' is not in the model cache" in by_status["error"]["error"]

    d = svc.wait("local", job_name, poll=0.5, timeout=400)
    assert d.status == JobStatus.SUCCEEDED, (d.error, d.traceback)
    workers = [e for e in svc.events("local", job_name) if e["type"] == "worker"]
    assert sorted(w["rank"] for w in workers) == [0, 1]
    assert len({w["node_id"] for w in workers}) == 2, workers  # one worker per node
    assert [c.name for c in d.checkpoints] == ["epoch-1"]
    steps = [e for e in svc.events("local", job_name) if e["type"] == "step"]
    assert steps and steps[-1]["total_steps"] == 10  # 158 examples / (8 x 2 workers)
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(str(dataset / "checkpoints" / "epoch-final"))
    print(f"2-node test: {time.time() - t0:.0f}s")
