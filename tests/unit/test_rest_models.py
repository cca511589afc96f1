"""The REST bodies are models of service/models.py: JobDetail's typed parts (plan, tracking, serving, queued_reason,
utilisation) built from events, the pre-flight answer, and the spec served as the JobSpec it was submitted as."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from jupyter_cleverthis import schemas
from jupyter_cleverthis.service.detail import detail_of, why_queued
from jupyter_cleverthis.service.models import ClusterInfo, Preflight
from jupyter_cleverthis.service.runtime_env import spec_json
from jupyter_cleverthis.spec import JobSpec

ROOT = Path(__file__).resolve().parents[2]


def _info(spec: JobSpec, status: str = "SUCCEEDED") -> SimpleNamespace:
    return SimpleNamespace(status=status, metadata={"owner": "ann"}, runtime_env={"env_vars": {"CLEVERTHIS_SPEC":
                           spec_json(spec)}}, start_time=1000, end_time=9000, submission_id=spec.name, job_id=None,
                           message=None)


def _events() -> list[dict]:
    evs = [
        {"type": "config", "checkpoint_dir": "/ckpt", "training_config": {}, "original_base_model": "tiny"},
        {"type": "plan", "method": "lora", "precision": "fp32", "strategy": "ddp", "reasons": {"method": "asked"},
         "memory_estimate_gb": {"lora": 0.1}, "future_key": 1},
        {"type": "tracking", "tensorboard": {"log_dir": "/nowhere/runs/j"},
         "mlflow": {"run_id": "r", "experiment_id": "1", "tracking_uri": "file:/m", "url": None, "extra": "kept"}},
        {"type": "utilisation", "rank": 1, "cpu_percent": 50.0, "i": 4},
        {"type": "utilisation", "rank": 0, "cpu_percent": 10.0, "i": 5},
        {"type": "utilisation", "rank": 1, "cpu_percent": 70.0, "i": 6},
        {"type": "checkpoint", "name": "epoch-1", "path": "/ckpt/epoch-1", "epoch": 1, "adapter_path": "/a"},
    ]
    return [{"src": "driver", "seq": n, "t": 1.0, **e} for n, e in enumerate(evs, 1)]


def test_detail_parts_are_typed_and_served_as_before():
    spec = JobSpec(name="j", dataset_path="/d", training_config={"learning_rate": 0.1})
    d = detail_of("local", _info(spec), _events(), log_url="http://x/#/jobs/j")
    body = json.loads(d.model_dump_json())
    assert body["plan"]["method"] == "lora" and body["plan"]["reasons"] == {"method": "asked"}
    assert "future_key" not in body["plan"]  # PLAN_KEYS pick what the detail shows
    assert body["tracking"]["tensorboard"] == {"log_dir": "/nowhere/runs/j", "viewer": False}
    assert body["tracking"]["mlflow"]["extra"] == "kept" and body["tracking"]["wandb"] is None
    assert [(u["rank"], u["cpu_percent"], u["i"]) for u in body["utilisation"]] == [(0, 10.0, 5), (1, 70.0, 6)]
    assert body["serving"] == {"model_path": "/ckpt/epoch-final", "lora_adapter_path": "/ckpt/epoch-final/adapter_model",
                               "base_model": "tiny"}
    # the spec as submitted: its training_config holds what the user set, and it is a valid JobSpec
    assert body["spec"]["training_config"] == {"learning_rate": 0.1}
    assert JobSpec.model_validate(body["spec"]).name == "j"


def test_memory_is_the_plans_estimate_beside_the_highest_worker_peak():
    spec = JobSpec(name="j", dataset_path="/d")
    evs = [{"type": "plan", "method": "full", "precision": "no", "strategy": "ddp",
            "memory_per_worker_gb": {"weights": 0.1, "total": 1.93}},
           {"type": "memory", "rank": 1, "planned_gb": 1.93, "peak_bytes": 2_100_000_000},
           {"type": "memory", "rank": 0, "planned_gb": 1.93, "peak_bytes": 1_800_000_000}]
    d = detail_of("local", _info(spec), [{"src": "w", "seq": n, "t": 1.0, **e} for n, e in enumerate(evs, 1)],
                  log_url="")
    assert d.plan.memory_per_worker_gb["total"] == 1.93
    assert (d.memory.rank, d.memory.peak_bytes, d.memory.text) == (1, 2_100_000_000,
                                                                   "memory: planned 1.9 GB, peak 2.1 GB")
    assert detail_of("local", _info(spec), [], log_url="").memory is None


def test_queued_reason_says_what_is_short():
    nodes = [{"node_id": "n1", "name": "10.0.0.1", "head": True, "CPU": {"total": 4, "free": 1},
              "used_by": [{"job": "other", "CPU": 3}]}]
    reason = why_queued({"workers": 2, "cpus_per_worker": 2}, nodes)
    assert reason.message == ("needs 2 workers \u00d7 2 CPUs with PACK; node 10.0.0.1 (head) has 1 free CPU "
                              "(3 used by job other)")
    assert reason.requested.total == {"CPU": 4.0} and reason.nodes[0].CPU.free == 1
    assert reason.free == {"CPU": 1.0} and reason.fits_now == 0 and reason.fits_ever == 2
    assert reason.suggestions == ["a smaller request: 0.5 CPU per worker would start now",
                                  "wait for job other to end: its workers hold what this job needs"]
    unknown = why_queued({}, None)  # the cluster does not say what it has
    assert unknown.free == {} and unknown.nodes is None and unknown.fits_now is None
    assert unknown.message == "needs 1 worker \u00d7 1 CPU with PACK; the cluster does not say what its nodes have free"


def test_cluster_info_keeps_the_resources_it_is_given():
    info = ClusterInfo.model_validate({"name": "local", "address": "http://h", "managed": True, "status": "running",
                                       "resources": {"CPU": {"total": 2, "free": 1}, "nodes": []}})
    assert info.model_dump(mode="json")["resources"] == {"CPU": {"total": 2.0, "free": 1.0}, "GPU": None,
                                                          "memory": None, "nodes": []}


def test_preflight_answer_validates_and_keeps_what_the_model_lacks(tmp_path):
    from cleverthis_runtime.preflight import preflight

    data = tmp_path / "data"
    shutil.copytree(ROOT / "examples" / "data", data)
    out = preflight(JobSpec(name="t", dataset_path=str(data)), quick=True)
    answer = Preflight.model_validate({**out, "newer_fact": 1}).model_dump(mode="json")
    assert answer["errors"] == out["errors"] and answer["dataset"]["examples"] == out["dataset"]["examples"]
    assert answer["newer_fact"] == 1
    assert set(out) <= set(answer)


def test_served_models_have_every_field_required():
    defs = schemas.api_schema()["$defs"]
    for name in ("ClusterList", "ClusterInfo", "JobPage", "EventsPage", "LogsPage", "Curves", "Preflight", "Plan",
                 "Tracking", "Serving", "QueuedReason", "TensorBoardLink", "UtilisationEvent"):
        assert set(defs[name]["required"]) == set(defs[name]["properties"]), name
    assert {"$ref": "#/$defs/JobSpec"} in defs["JobDetail"]["properties"]["spec"]["anyOf"]


def test_record_parts_read_as_mappings_too():
    """JobDetail's typed parts were dicts once: `plan["method"]` and `.get` keep working, for fields and for the
    extra keys a Plan allows; a method name or an unknown key is no key."""
    from jupyter_cleverthis.service.models import Plan, ResourceUsage

    plan = Plan.model_validate({"method": "lora", "reasons": {"method": "default"}, "added_later": 7})
    assert plan["method"] == plan.get("method") == plan.method == "lora"
    assert plan["added_later"] == 7 and plan.get("added_later") == 7
    with pytest.raises(KeyError):
        plan["model_dump"]
    assert plan.get("model_dump") is None and plan.get("nothing", "d") == "d"
    usage = ResourceUsage(total=4, free=1)
    assert usage["free"] == 1 and usage.get("total") == 4
    with pytest.raises(KeyError):
        usage["used"]
