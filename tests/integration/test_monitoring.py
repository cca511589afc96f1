"""Monitoring on the real Ray cluster: the main figures in the Ray metrics export (the node's Prometheus
endpoint, as the dashboard reads it) and per-worker `utilisation` events kept in the job detail."""

from __future__ import annotations

import time

import pytest
import requests

from jupyter_cleverthis.service.clusters import LocalCluster
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import JobSpec, JobStatus

from .training_helpers import delay_steps

pytestmark = pytest.mark.integration

FIGURES = ("loss", "learning_rate", "tokens_per_s", "step", "epoch")


def metrics_port(home) -> int:
    """The head's metrics export port (`ray start --metrics-export-port`, chosen free by LocalCluster)."""
    pid = LocalCluster("local", home).state()["pid"]
    args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    return int(next(a for a in args if a.startswith(b"--metrics-export-port=")).split(b"=")[1])


def scrape(port: int, job: str) -> dict[str, float]:
    try:
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except requests.RequestException:
        return {}
    found = {}
    for line in text.splitlines():
        for fig in FIGURES:
            if line.startswith(f"ray_cleverthis_train_{fig}{{") and f'job="{job}"' in line:
                found[fig] = float(line.rsplit(" ", 1)[1])
    return found


def test_ray_metrics_and_utilisation(ray_cluster, tiny_model, dataset, job_name, cleverthis_home, monkeypatch):
    delay_steps(monkeypatch, 0.6)  # ~25 s of training: a few Ray metrics reports (every ~10 s)
    port = metrics_port(cleverthis_home)
    svc = JobService()
    svc.create(JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(dataset), epochs=2, batch_size=8,
                       workers=1), owner="tester")
    seen: dict[str, float] = {}
    end = time.time() + 900
    while time.time() < end:
        seen.update(scrape(port, job_name))
        d = svc.get("local", job_name)
        if d.status.is_terminal() or set(seen) == set(FIGURES):
            break
        time.sleep(2)
    final = svc.wait("local", job_name, poll=0.5, timeout=600)
    assert final.status == JobStatus.SUCCEEDED, final.error
    for _ in range(15):  # the last report may come after the job ended
        if set(seen) == set(FIGURES):
            break
        seen.update(scrape(port, job_name))
        time.sleep(2)
    assert set(seen) == set(FIGURES), seen
    assert seen["loss"] > 0 and seen["step"] >= 1

    evs = svc.events("local", job_name)
    util = [e for e in evs if e["type"] == "utilisation"]
    assert len([u for u in util if u.get("epoch") is not None]) == 2  # one at each epoch end
    assert all(u["rank"] == 0 and u["rss_bytes"] > 50_000_000 and u["cpu_percent"] >= 0 for u in util)
    assert [u.rank for u in final.utilisation] == [0]
    assert final.utilisation[0].seq == util[-1]["seq"]
