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


def test_tokens_per_s_far_below_the_plan_is_named_with_both_figures():
    # 2 workers measured at 50 GFLOP/s each, a 100M-weight model (LoRA: ~4e8 FLOPs per token): 100 tokens/s
    plan = [{"type": "strategy", "device_flops": 50e9, "flops_per_token": 4e8, "expected_tokens_per_s": 100.0}]

    def run(tps: float, step_s: float = 1.0) -> list[dict]:
        return plan + [dict(e, tokens_per_s=tps) for e in steps(0.0, step_s)]

    slow = hints(detail(), run(20.0))  # 20 tokens/s: a fifth of the plan's
    assert [h.kind for h in slow] == ["below_plan"]
    assert slow[0].message.startswith("Training runs at 20 tokens/s, under a quarter of the 100 tokens/s the plan "
                                      "expects from these workers (50 GFLOP/s each, measured at start).")
    assert "increase batch_size" in slow[0].message and "packing" in slow[0].message
    assert hints(detail(), run(30.0)) == []  # 30 %: not far below
    # a toy model's step (10 tokens per worker x 4e7 FLOPs = 0.4 GFLOP): all overhead, nothing to compare
    toy = [dict(plan[0], flops_per_token=4e7, expected_tokens_per_s=1000.0)]
    assert hints(detail(), toy + [dict(e, tokens_per_s=20.0) for e in steps(0.0, 1.0)]) == []
    assert hints(detail(), steps(0.0, 1.0)) == []  # no plan (the TensorFlow runtime states none): no claim


def test_the_runtime_measures_the_speed_it_expects():
    """monitoring.expected_speed on a real (tiny) model: FLOPs per token from its weights, and the matmul rate of
    this machine; LoRA's frozen weights get no gradient FLOPs, gradient checkpointing adds a forward."""
    import types

    import torch

    from cleverthis_runtime.monitoring import EXPECTED_SHARE, expected_speed

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    n = sum(p.numel() for p in model.parameters())
    rng = torch.get_rng_state()
    full = expected_speed(model, types.SimpleNamespace(gradient_checkpointing=False), 2, torch)
    assert torch.equal(torch.get_rng_state(), rng)  # the seeded run's dropout and data order stay as they were
    assert full["flops_per_token"] == 6 * n and full["device_flops"] > 1e8
    assert full["expected_tokens_per_s"] == round(2 * EXPECTED_SHARE * full["device_flops"] / (6 * n), 1)
    model[0].requires_grad_(False)
    frozen = expected_speed(model, types.SimpleNamespace(gradient_checkpointing=True), 1, torch)
    assert frozen["flops_per_token"] == 4 * n + 2 * model[1].weight.numel() + 2 * model[1].bias.numel() + 2 * n
    assert expected_speed(None, None, 1, torch) == {}
