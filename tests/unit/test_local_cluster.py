"""The managed cluster's start-up on a busy machine: Ray's raylet has 30 s to register ("The current node timed out
during startup"), so `up` starts again; any other failure is reported with what `ray start` said."""

from __future__ import annotations

import pytest

from jupyter_cleverthis.errors import ClusterError
from jupyter_cleverthis.service import clusters
from jupyter_cleverthis.service.clusters import ClusterConfig, LocalCluster


class _Proc:
    def __init__(self, alive: bool) -> None:
        self.alive = alive

    def poll(self):  # noqa: ANN201
        return None if self.alive else 1


def _fake(monkeypatch, tmp_path, outcomes):  # noqa: ANN001
    cluster = LocalCluster("local", tmp_path)
    launches = []

    def launch(num_cpus, metrics=False):  # noqa: ANN001
        said, alive = outcomes[len(launches)]
        launches.append(num_cpus)
        cluster.dir.mkdir(parents=True, exist_ok=True)
        with open(cluster.log_file, "a") as f:
            f.write(said)
        return ClusterConfig("local", f"http://127.0.0.1:{len(launches)}", managed=True), _Proc(alive)

    monkeypatch.setattr(cluster, "_launch", launch)
    monkeypatch.setattr(cluster, "down", lambda *a, **k: True)
    monkeypatch.setattr(clusters, "ping", lambda cfg, timeout=3.0: True)
    monkeypatch.setattr(clusters, "node_registered", lambda cfg: cfg.address.endswith(":2"))
    monkeypatch.setattr(clusters, "jobs_api_ready", lambda cfg: True)
    monkeypatch.setattr(clusters, "cluster_resources", lambda cfg: {"CPU": {"total": 1, "free": 1}})
    return cluster, launches


def test_a_node_that_timed_out_during_startup_is_started_again(monkeypatch, tmp_path):
    cluster, launches = _fake(monkeypatch, tmp_path, [
        ("Exception: The current node timed out during startup. This could happen because ...\n", False),
        ("Ray runtime started.\n", True),
    ])
    cfg = cluster.up(num_cpus=2, timeout=2)
    assert cfg.address == "http://127.0.0.1:2" and launches == [2, 2]


def test_other_start_failures_are_reported_with_what_ray_said(monkeypatch, tmp_path):
    cluster, launches = _fake(monkeypatch, tmp_path, [("OSError: [Errno 98] Address already in use\n", False)])
    with pytest.raises(ClusterError, match="Address already in use"):
        cluster.up(timeout=2)
    assert launches == [None]


def test_free_ports_are_distinct_and_bindable() -> None:
    """`ray start` refuses one port given to two of its components; ports closed one by one can repeat."""
    import socket

    ports = clusters.free_ports(40)
    assert len(set(ports)) == 40
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
