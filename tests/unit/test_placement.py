"""Why queued, node by node (service/placement.explain): the placement strategies, what blocks a job, what would
let it start. (On the real cluster: test_finetune's queued job, test_multinode's STRICT_SPREAD job on two nodes.)"""

from __future__ import annotations

from jupyter_cleverthis.service.placement import capacity, explain


def node(name, cpu_free, cpu_total, gpu_free=None, gpu_total=None, used_by=(), head=False):
    n = {"node_id": name * 4, "name": name, "head": head, "CPU": {"free": cpu_free, "total": cpu_total},
         "used_by": list(used_by)}
    if gpu_total is not None:
        n["GPU"] = {"free": gpu_free, "total": gpu_total}
    return n


def test_the_issue_example_two_gpus_strict_spread():
    nodes = [node("A", 4, 8, 0, 2, used_by=[{"job": "X", "CPU": 2, "GPU": 2}], head=True), node("B", 4, 8, 1, 1)]
    r = explain(2, {"CPU": 1, "GPU": 1}, "STRICT_SPREAD", nodes)
    assert r["message"] == ("needs 2 workers \u00d7 1 CPU and 1 GPU with STRICT_SPREAD; "
                            "node A (head) has 4 free CPUs (2 used by job X) and 0 free GPUs (2 used by job X); "
                            "node B has 4 free CPUs and 1 free GPU")
    assert r["fits_now"] == 1 and r["fits_ever"] == 2
    assert r["suggestions"] == ["fewer workers: 1 would start now", "wait for job X to end: its workers hold what this job needs"]


def test_strategies_place_bundles_differently():
    nodes = [node("A", 3, 4), node("B", 1, 4)]
    per = {"CPU": 1}
    assert capacity(per, "PACK", nodes) == capacity(per, "SPREAD", nodes) == 4  # anywhere
    assert capacity(per, "STRICT_PACK", nodes) == 3  # all on one node
    assert capacity(per, "STRICT_SPREAD", nodes) == 2  # one per node
    assert capacity({"CPU": 2}, "PACK", nodes) == 1 and capacity({"CPU": 2}, "PACK", nodes, "total") == 4
    r = explain(3, per, "STRICT_SPREAD", nodes)
    assert "this cluster can never hold it (2 such workers at most" in r["suggestions"][0]
    assert "placement_strategy PACK (or SPREAD): the workers would start now" in r["suggestions"]


def test_a_smaller_request_is_offered_only_where_it_fits_and_rounded_down():
    nodes = [node("A", 1, 2), node("B", 1, 2)]
    r = explain(3, {"CPU": 1}, "PACK", nodes)
    assert r["suggestions"][:2] == ["fewer workers: 2 would start now",
                                   "a smaller request: 0.5 CPU per worker would start now"]
    assert capacity({"CPU": 0.5}, "PACK", nodes) >= 3
    five = explain(6, {"CPU": 1}, "PACK", [node("A", 5, 6)])  # 5/6 = 0.8333...: offered as 0.83, which fits
    assert "a smaller request: 0.83 CPU per worker would start now" in five["suggestions"]
    assert capacity({"CPU": 0.83}, "PACK", [node("A", 5, 6)]) >= 6
    gpu = explain(1, {"CPU": 1, "GPU": 1}, "PACK", [node("A", 4, 4)])  # no GPU anywhere
    assert "has 4 free CPUs and 0 free GPUs (it has none)" in gpu["message"]
    assert gpu["fits_ever"] == 0 and gpu["suggestions"][0].startswith("this cluster can never hold it (0 such workers")
    assert not any("smaller request" in s for s in gpu["suggestions"])


def test_waiting_is_suggested_only_for_jobs_whose_end_would_help():
    nodes = [node("A", 0, 2, used_by=[{"job": "big", "CPU": 2}]), node("B", 0, 1, used_by=[{"job": "small", "CPU": 1}])]
    r = explain(2, {"CPU": 1}, "STRICT_PACK", nodes, own_job="me")
    assert [s for s in r["suggestions"] if s.startswith("wait")] == [
        "wait for job big to end: its workers hold what this job needs"]
    roomy = explain(1, {"CPU": 1}, "PACK", [node("A", 2, 2)])
    assert roomy["suggestions"] == [] and "Ray is starting the workers" in roomy["message"]
