"""Two Ray nodes on this machine: the session's head plus a second `ray start --address …` node with its own
resources (1 CPU, a `node2` resource) and its own model cache. A 2-worker job runs one worker per node
(STRICT_SPREAD), reading the dataset from the same path on both, is cancelled mid-epoch and resumed across
both nodes; `%train download` answers per node. A second STRICT_SPREAD job, while one holds the second node's
only CPU, is queued and says so node by node, naming the job that holds it."""

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

from jupyter_cleverthis.service.clusters import LocalCluster, free_ports
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.service.probes import cluster_resources
from jupyter_cleverthis.spec import JobSpec, JobStatus

from .training_helpers import delay_steps, make_cached_model, wait_for_step

pytestmark = [pytest.mark.integration, pytest.mark.serial]


@pytest.fixture(scope="module")
def second_node(ray_cluster, cleverthis_home, tmp_path_factory):
    """`ray start --address <gcs> --block` with 1 CPU and HF_HOME of its own; stopped by its pid."""
    local = LocalCluster("local", cleverthis_home)
    st = local.state()
    tmp_path = tmp_path_factory.mktemp("node2")
    hf_home = tmp_path / "node2-hf"
    hf_home.mkdir()
    # the head listens on loopback only; Ray would send a joining node to the machine's address (see the script)
    node_manager, object_manager, metrics, agent, agent_grpc, runtime_env = free_ports(6)
    cmd = [
        sys.executable, str(Path(__file__).with_name("loopback_ray_node.py")), "start", f"--address={st['gcs_address']}", "--block", "--disable-usage-stats",
        "--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=0", f"--resources={json.dumps({'node2': 1})}",
        "--object-store-memory=100000000", f"--node-manager-port={node_manager}",
        f"--object-manager-port={object_manager}", f"--metrics-export-port={metrics}",
        f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--runtime-env-agent-port={runtime_env}",
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


def test_two_nodes_one_worker_each_cancel_resume_and_per_node_model_cache(ray_cluster, tiny_model, dataset,
                                                                         job_name, second_node, monkeypatch):
    # Each node keeps its own cache: the job must not impose one HF_HOME on both.
    monkeypatch.delenv("HF_HOME", raising=False)
    delay_steps(monkeypatch, 0.6)  # 10 steps per epoch with 2 workers: room for a cancel in epoch 2
    svc = JobService()
    t0 = time.time()
    svc.create(JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(dataset), epochs=2, batch_size=8,
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

    wait_for_step(svc, job_name, 11)  # epoch 2 under way
    workers = [e for e in svc.events("local", job_name) if e["type"] == "worker"]
    assert sorted(w["rank"] for w in workers) == [0, 1]
    assert len({w["node_id"] for w in workers}) == 2, workers  # one worker per node
    svc.cancel("local", job_name)
    d = svc.wait("local", job_name, poll=1.0, timeout=120)
    assert d.status == JobStatus.CANCELLED, (d.error, d.traceback)
    names = [c.name for c in d.checkpoints]
    assert names[0] == "epoch-1" and len(names) == 2 and names[1].startswith("epoch-2-step-"), names
    step = int(names[1].rsplit("-", 1)[1])
    cut = dataset / "checkpoints" / names[1]
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(os.listdir(cut / "training_state"))  # every rank's RNG

    r = svc.resume("local", job_name)
    done = svc.wait("local", r.name, poll=1.0, timeout=400)
    assert done.status == JobStatus.SUCCEEDED, (done.error, done.traceback)
    evs = svc.events("local", r.name)
    assert len({w["node_id"] for w in evs if w["type"] == "worker"}) == 2
    assert [e for e in evs if e["type"] == "resume"][0]["exact"] is True
    steps = [e["step"] for e in evs if e["type"] == "step"]
    assert steps[0] == step + 1 and steps[-1] == 20  # 158 examples / (8 x 2 workers) = 10 steps per epoch
    assert [c.name for c in done.checkpoints] == ["epoch-2"]
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(str(dataset / "checkpoints" / "epoch-final"))
    print(f"2-node test: {time.time() - t0:.0f}s")


def test_a_job_blocked_by_another_says_which_node_and_job(ray_cluster, tiny_model, dataset, job_name, second_node):
    """needs 2 workers x 1 CPU with STRICT_SPREAD; the second node's one CPU is held by the first job's worker."""
    svc = JobService()
    holder, blocked = f"{job_name}-a", f"{job_name}-b"
    spread = {"placement_strategy": "STRICT_SPREAD"}
    spec = dict(base_model=tiny_model, dataset_path=str(dataset), epochs=50, batch_size=8, workers=2,
                cpus_per_worker=1, training_config=spread)
    svc.create(JobSpec(name=holder, **spec), check=False)
    try:
        wait_for_step(svc, holder, 1)
        svc.create(JobSpec(name=blocked, **{**spec, "epochs": 1}, output_dir=str(dataset.parent / "b-checkpoints")),
                   check=False)
        for _ in range(240):
            d = svc.get("local", blocked)
            if d.phase == "starting_workers":
                break
            time.sleep(0.5)
        assert d.status == JobStatus.QUEUED and d.phase == "starting_workers", (d.status, d.error)
        r = d.queued_reason
        assert r.message.startswith("needs 2 workers \u00d7 1 CPU with STRICT_SPREAD; node 127.0.0.1 (")
        head, other = r.nodes
        assert head.head and not other.head and other.CPU.total == 1
        assert f"has 0 free CPUs (1 used by job {holder})" in r.message, r.message
        assert r.fits_now == 1 and r.fits_ever == 2
        assert r.suggestions == ["fewer workers: 1 would start now",
                                 "placement_strategy PACK (or SPREAD): the workers would start now",
                                 f"wait for job {holder} to end: its workers hold what this job needs"]
    finally:
        for name in (blocked, holder):
            svc.cancel("local", name)
    for name in (blocked, holder):
        assert svc.wait("local", name, poll=1.0, timeout=120).status == JobStatus.CANCELLED
