"""Ray metrics gauges (throttled, rank 0) and per-worker utilisation events, without Ray."""

from __future__ import annotations

import json

import torch

from cleverthis_runtime import events
from cleverthis_runtime.train import RayMetrics, Utilisation


class FakeGauge:
    def __init__(self) -> None:
        self.values: list[tuple[float, dict]] = []

    def set(self, value: float, tags: dict | None = None) -> None:
        self.values.append((value, tags))


def test_gauges_are_set_with_the_job_tag_and_throttled():
    m = RayMetrics("job-a")
    m.gauges = {k: FakeGauge() for k in RayMetrics.FIGURES}
    assert m.publish(now=100.0, loss=2.5, learning_rate=0.01, tokens_per_s=None, step=1, epoch=0.05)
    assert m.gauges["loss"].values == [(2.5, {"job": "job-a"})]
    assert m.gauges["tokens_per_s"].values == []  # unknown figures are left as they were
    assert not m.publish(now=100.5, loss=2.4, step=2)  # at most once a second
    assert m.publish(now=101.0, loss=2.3, step=3)
    assert m.publish(now=101.2, force=True, loss=2.2, step=4)  # an epoch end
    assert [v for v, _ in m.gauges["loss"].values] == [2.5, 2.3, 2.2]
    assert [v for v, _ in m.gauges["step"].values] == [1.0, 3.0, 4.0]


def test_gauge_names_are_the_documented_ones():
    assert sorted(f"cleverthis_train_{k}" for k in RayMetrics.FIGURES) == [
        "cleverthis_train_epoch", "cleverthis_train_learning_rate", "cleverthis_train_loss",
        "cleverthis_train_step", "cleverthis_train_tokens_per_s"]


def test_without_ray_nothing_is_exported_and_training_goes_on():
    import ray

    assert not ray.is_initialized()
    m = RayMetrics("job-b")
    assert not m.publish(loss=1.0) and m.failed and m.gauges is None
    assert not m.publish(force=True, loss=1.0)


def test_a_failing_gauge_disables_metrics_quietly():
    class Broken:
        def set(self, *a, **k):
            raise RuntimeError("no metrics agent")

    m = RayMetrics("job-c")
    m.gauges = {k: Broken() for k in RayMetrics.FIGURES}
    assert not m.publish(loss=1.0) and m.failed


def test_utilisation_event_has_rank_cpu_and_rss(capsys):
    u = Utilisation(3, torch, interval_s=10.0)
    sum(i * i for i in range(200_000))  # some CPU time to measure
    assert u.maybe_emit(step=1) is None  # not 10 s yet
    ev = u.maybe_emit(force=True, step=2, epoch=1)
    assert ev["type"] == "utilisation" and ev["rank"] == 3 and ev["epoch"] == 1
    assert ev["rss_bytes"] > 10_000_000 and ev["cpu_percent"] >= 0
    assert "gpu_util_percent" not in ev  # no CUDA here
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith(events.PREFIX)][-1]
    assert json.loads(line[len(events.PREFIX):])["rss_bytes"] == ev["rss_bytes"]
    u.interval_s = 0.0
    assert u.maybe_emit(step=3)["rank"] == 3
