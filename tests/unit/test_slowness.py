"""Slow and stuck jobs: the thresholds of service/slowness.py on synthetic events (a real job's step timing is
checked in test_finetune's CLI job)."""

from __future__ import annotations

from jupyter_cleverthis.service.models import JobDetail
from jupyter_cleverthis.service.slowness import hints, stuck_hint


def detail(**kw) -> JobDetail:
    return JobDetail(**{"name": "j", "cluster": "local", "status": "running", "ray_status": "RUNNING", "workers": 2,
                        "base_model": "org/big",
                        **kw})


def steps(data_s: float, compute_s: float, n: int = 10) -> list[dict]:
    return [{"type": "step", "step": i, "data_s": data_s, "compute_s": compute_s} for i in range(1, n + 1)]


def test_data_loading_dominating_the_step_is_named_with_its_share():
    found = hints(detail(), steps(0.4, 0.6))
    assert [h.kind for h in found] == ["data_loading"]
    assert found[0].message.startswith("Data loading takes 40% of each step (0.40 s of 1.00 s): the dataset may be "
                                       "on slow storage (NFS with high latency).")
    assert hints(detail(), steps(0.2, 0.8)) == []  # 20 %: under the 30 % threshold
    assert hints(detail(), steps(0.9, 0.1, n=4)) == []  # too few steps to tell
    assert hints(detail(status="succeeded"), steps(0.9, 0.1)) == []  # only while it runs


def test_one_worker_and_idle_gpus():
    one = hints(detail(workers=1), steps(0.0, 1.0))
    assert [h.kind for h in one] == ["one_worker"] and "data parallelism" in one[0].message
    util = [{"type": "utilisation", "src": f"rank{r}", "seq": 1, "rank": r, "gpu_util_percent": p, "t": 1.0}
            for r, p in ((0, 40.0), (1, 60.0))]
    busy = hints(detail(utilisation=util), steps(0.0, 1.0))
    assert [h.kind for h in busy] == ["gpu_utilisation"]
    assert busy[0].message.startswith("GPU utilisation is 50% (under 80%): increase batch_size")


def test_initializing_too_long_says_what_it_is_doing():
    start = [{"type": "phase", "phase": "initializing", "t": 1000.0}]
    dl = [{"type": "phase", "phase": "downloading", "t": 1001.0},
          {"type": "download_progress", "model": "org/big", "downloaded": 3_200_000_000, "total": 13_000_000_000}]
    d = detail(status="initializing", phase="downloading")
    assert stuck_hint(d, start + dl, now=1000 + 599) is None  # under 10 minutes
    h = stuck_hint(d, start + dl, now=1000 + 900)
    assert h.message == ("Initializing for 15m 00s: downloading org/big (3.2 of 13.0 GB). For repeated jobs on this "
                         "cluster, pre-fetch the model once on every node: %train download org/big (or "
                         "cleverthis-train download org/big).")
    big = [{"type": "download_progress", "model": "org/big", "downloaded": 1, "total": 140_000_000_000}]
    assert stuck_hint(d, start + big, now=1000 + 900) is None  # 140 GB: allowed 140 minutes
    loading = stuck_hint(detail(status="initializing", phase="loading_model"), start, now=1000 + 700)
    assert "loading org/big (very large models take 10 minutes or more)" in loading.message
    assert stuck_hint(detail(status="running", phase="running"), start, now=1000 + 900) is None
