"""What the managed `local` cluster exposes: every listening socket of its processes, read with psutil while a job
with an actor and a placement group runs. Nothing here sends traffic to the machine's external address."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import requests
from ray.job_submission import JobStatus as RayStatus
from ray.job_submission import JobSubmissionClient

from jupyter_cleverthis.service.clusters import LocalCluster, loopback_interface

pytestmark = pytest.mark.integration

# A job whose driver is a Ray worker, with an actor of its own, a placement group (the worker gRPC ports the issue
# found on every interface) and a two-worker Ray Train torch group set up the way the runtime sets it up
# (compat.torch_config): torch's rendezvous store binds every interface unless it is handed its socket.
HOLD = """
import threading, time
import ray, torch, torch.distributed as dist
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer
from cleverthis_runtime.compat import torch_config
ray.init()
pg = ray.util.placement_group([{"CPU": 0.01}])
ray.get(pg.ready())

@ray.remote(num_cpus=0.01)
class A:
    def ping(self):
        return "pong"

a = A.remote()
assert ray.get(a.ping.remote()) == "pong"
print("ACTOR", "READY", flush=True)  # in two: Ray echoes the entrypoint into the logs

def loop():
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
    if ray.train.get_context().get_world_rank() == 0:
        print("TRAIN", "READY", flush=True)
    time.sleep(300)

trainer = TorchTrainer(loop, torch_config=torch_config(),
                       scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.01}))
threading.Thread(target=trainer.fit, daemon=True).start()
time.sleep(300)
"""


def _is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def _is_tensorflow_worker(p: psutil.Process) -> bool:
    return any("libtensorflow" in m.path for m in p.memory_maps())


def listeners(pid: int) -> list[tuple[str, str, int]]:
    """(process, ip, port) of every listening TCP socket in the process tree of `ray start` (pid).

    TensorFlow's workers are left out (other tests' jobs share the head): the gRPC server of
    MultiWorkerMirroredStrategy binds every interface and TensorFlow has no setting to change it (docs/clusters.md,
    "Security"); the pre-flight warns of it (test_tensorflow)."""
    out = []
    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            if _is_tensorflow_worker(p):
                continue
            name = p.name()
            out += [(name, s.laddr.ip, s.laddr.port) for s in p.net_connections(kind="inet")
                    if s.status == psutil.CONN_LISTEN]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # a worker that ended while we looked
    return out


def _hold_job(cfg) -> tuple[JobSubmissionClient, str]:
    client = JobSubmissionClient(cfg.address, headers=cfg.sdk_headers())
    sid = f"listeners-{uuid.uuid4().hex[:8]}"
    client.submit_job(entrypoint=f"{sys.executable} -c '{HOLD}'", submission_id=sid)
    end = time.time() + 180
    while time.time() < end:
        logs = client.get_job_logs(sid)
        if "ACTOR READY" in logs and "TRAIN READY" in logs:
            return client, sid
        assert client.get_job_status(sid) in (RayStatus.PENDING, RayStatus.RUNNING), client.get_job_logs(sid)
        time.sleep(0.5)
    raise AssertionError("the holding job did not get its actor and its train workers: " + client.get_job_logs(sid)[-2000:])


def _tokenless_gcs_refused(gcs_address: str) -> str:
    """A GCS client with no token (no token env, a HOME without ~/.ray), over 127.0.0.1: what it is told."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["HOME"] = "/nonexistent"
    code = ("from ray._raylet import GcsClient\n"
            "try:\n"
            f"    c = GcsClient(address={gcs_address!r})\n"
            "    c.internal_kv_get(b'x', None, timeout=10)\n"
            "    print('ALLOWED')\n"
            "except Exception as e:\n"
            "    print('REFUSED', type(e).__name__, e)\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                       cwd="/tmp")
    return r.stdout + r.stderr[-1000:]


def test_every_listener_of_the_managed_cluster_is_on_loopback(ray_cluster, cleverthis_home):
    local = LocalCluster("local", cleverthis_home)
    st = local.state()
    client, sid = _hold_job(ray_cluster)
    try:
        socks = listeners(int(st["pid"]))
    finally:
        client.stop_job(sid)
    ports = {port for _, _, port in socks}
    # the ones we placed are among them: GCS, dashboard, and the autoscaler's and dashboard's own metrics
    assert int(st["gcs_address"].rsplit(":", 1)[1]) in ports
    assert int(st["dashboard_url"].rsplit(":", 1)[1]) in ports
    assert set(st["component_metrics_ports"].values()) <= ports
    # the job's driver, its actor, the placement group's and the train group's workers are in the tree too
    assert len(socks) >= 14, socks
    assert any(name == "ray::RayTrainWorker" for name, _, _ in socks), "|".join(sorted({n for n, _, _ in socks}))
    # gloo joins its workers on the loopback interface too, whatever the host name resolves to
    raylet = next(p for p in psutil.Process(int(st["pid"])).children(recursive=True) if p.name() == "raylet")
    assert raylet.environ().get("GLOO_SOCKET_IFNAME") == loopback_interface() == "lo"
    # Ray's log monitor looks for new worker logs once a second, not ten times (clusters.LocalCluster._launch)
    monitor = next(p for p in psutil.Process(int(st["pid"])).children(recursive=True)
                   if any(a.endswith("log_monitor.py") for a in p.cmdline()))
    env = monitor.environ()
    assert (env.get("RAY_LOG_MONITOR_MANY_FILES_THRESHOLD"), env.get("LOG_NAME_UPDATE_INTERVAL_S")) == ("0", "1"), env
    exposed = [s for s in socks if not _is_loopback(s[1])]
    assert not exposed, f"listening beyond loopback: {exposed}"

    # Loopback is shared by every user of a machine (a JupyterHub host): the token still guards the two doors
    # a client uses. The dashboard refuses a request without it, and the GCS refuses a tokenless client.
    r = requests.get(f"{ray_cluster.address}/api/jobs/", timeout=10)
    assert r.status_code in (401, 403), r.status_code
    said = _tokenless_gcs_refused(st["gcs_address"])
    assert "REFUSED AuthenticationError" in said and "InvalidAuthToken" in said, said


def _serves_node_metrics(ports: set[int]) -> list[int]:
    """The loopback ports that answer /metrics with the node series of Ray's metrics export (ray_node_*)."""
    found = []
    for port in sorted(ports):
        try:
            r = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
        except requests.RequestException:
            continue
        if r.status_code == 200 and "ray_node_cpu_utilization" in r.text:
            found.append(port)
    return found


def test_metrics_export_only_when_asked(ray_cluster, cleverthis_home, tmp_path, monkeypatch):
    """On (the session's head, started with `metrics=True`): its exporter serves Ray's node metrics, on loopback.
    Off (the default, a head of its own): no port serves them."""
    on = LocalCluster("local", cleverthis_home).state()
    url = on["metrics_url"]
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    end = time.time() + 90
    while time.time() < end and not _serves_node_metrics({port}):
        time.sleep(2)
    assert _serves_node_metrics({port}) == [port]
    assert [(ip, p) for _, ip, p in listeners(int(on["pid"])) if p == port and _is_loopback(ip)]

    monkeypatch.delenv("CLEVERTHIS_LOCAL_METRICS", raising=False)
    off = LocalCluster("nometrics", tmp_path / "home")
    off.up(num_cpus=1)  # metrics unset: off unless CLEVERTHIS_LOCAL_METRICS=1
    try:
        st = off.state()
        assert st["metrics_url"] is None
        time.sleep(10)  # past the first report a running exporter would have served
        socks = listeners(int(st["pid"]))
        assert not _serves_node_metrics({p for _, _, p in socks})
        assert not [s for s in socks if not _is_loopback(s[1])], socks
        assert json.loads(Path(off.state_file).read_text())["metrics_url"] is None
    finally:
        off.down()
