"""Sweeps on the real cluster (cleverthis_runtime/sweep.py on Ray Tune, service/sweeps.py): a 3-trial sweep of the
tiny model runs as one Ray job whose trials are child jobs with their own events, curves and checkpoint folders;
the comparison names the trial Ray Tune found best, and "Create from best" is that trial's spec. A cancelled
sweep leaves every trial cancelled with a checkpoint that loads."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from tornado.httpclient import HTTPClientError

from cleverthis_runtime.spec import JobSpec
from jupyter_cleverthis.errors import JobConflict
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import JobStatus

from .training_helpers import delay_steps, wait_for

pytestmark = pytest.mark.integration


def sweep_spec(job_name, tiny_model, dataset, epochs=1, **sweep):
    return JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(dataset), epochs=epochs, batch_size=8,
                   workers=1, training_config={"validation_split": 0.2}, sweep=sweep)


async def test_three_trial_sweep_compares_trials_and_prefills_create_from_best(jp_fetch, ray_cluster, tiny_model,
                                                                               dataset, job_name):
    svc = JobService()
    rates = [1e-4, 1e-3, 3e-3]
    spec = sweep_spec(job_name, tiny_model, dataset, parameters={"learning_rate": {"values": rates}}, concurrent=2)
    api = ("cleverthis", "api", "clusters", "local", "jobs")
    resp = await jp_fetch(*api, method="POST", body=spec.model_dump_json(exclude_none=True), request_timeout=180)
    assert resp.code == 201 and json.loads(resp.body)["trials"] == 3
    # two at once: while the first trials train, the third says it waits for its turn
    for _ in range(600):
        first = await asyncio.to_thread(svc.get, "local", f"{job_name}-t1")
        if first.status in (JobStatus.INITIALIZING, JobStatus.RUNNING) or first.status.is_terminal():
            break
        await asyncio.sleep(0.5)
    third = await asyncio.to_thread(svc.get, "local", f"{job_name}-t3")
    assert third.status == JobStatus.QUEUED and third.parent == job_name
    assert third.queued_reason.message.startswith(f"Waiting for its turn: sweep {job_name} runs 2 trials at once")
    done = await asyncio.to_thread(svc.wait, "local", job_name, poll=1, timeout=900)
    assert done.status == JobStatus.SUCCEEDED, done.error
    evs = svc.events("local", job_name)
    result = next(e for e in evs if e["type"] == "sweep_result")

    cmp = svc.sweep("local", job_name)
    names = [f"{job_name}-t{i}" for i in (1, 2, 3)]
    assert [t.name for t in cmp.trials] == names and cmp.metric == "eval_loss" and cmp.parameters == ["learning_rate"]
    assert [t.values["learning_rate"] for t in cmp.trials] == rates
    assert all(t.status == JobStatus.SUCCEEDED and t.epochs_done == 1 for t in cmp.trials)
    # the best is the lowest final validation loss, and the one Ray Tune chose
    assert cmp.best == result["best"] == min(cmp.trials, key=lambda t: t.final_eval_loss).name
    assert [round(t.objective, 6) for t in cmp.trials] == [round(t["objective"], 6) for t in result["trials"]]

    for i, name in enumerate(names):
        d = svc.get("local", name)  # a child job: its own status, spec, checkpoints and curve
        assert d.status == JobStatus.SUCCEEDED and d.parent == job_name
        assert d.spec["training_config"]["learning_rate"] == rates[i] and "sweep" not in d.spec
        assert {c.name for c in d.checkpoints} >= {"epoch-1"}
        assert all(c.path.startswith(os.path.join(cmp.checkpoint_dir, name) + "/") for c in d.checkpoints)
        curve = svc.metrics("local", name)
        assert curve["count"] > 5 and len(curve["validation"]) == 1, curve.keys()
        own = svc.events("local", name)
        assert own[0]["i"] == 1 and {e.get("trial") for e in own} == {name}
        assert name in svc.logs("local", name)["text"]
    sweep = svc.get("local", job_name)  # the sweep's own detail: its trials' steps and checkpoints are theirs
    assert sweep.trials == 3 and sweep.checkpoints == [] and svc.metrics("local", job_name)["count"] == 0
    listed = [j.name for j in svc.list("local") if j.name == job_name or j.parent == job_name]
    assert listed == [job_name, *names]

    best = svc.best_spec("local", job_name)
    assert best["training_config"]["learning_rate"] == rates[names.index(cmp.best)]
    assert "sweep" not in best and "output_dir" not in best and best["name"] == f"{job_name}-best"
    JobSpec.model_validate(best)  # what the form opens with is a valid job
    with pytest.raises(JobConflict, match="cancel the sweep"):
        svc.cancel("local", names[0])

    # the same through REST: the comparison, Create from best, and a chat with the best trial's final checkpoint
    body = json.loads((await jp_fetch(*api, job_name, "sweep")).body)
    assert body["best"] == cmp.best and [t["name"] for t in body["trials"]] == names
    assert json.loads((await jp_fetch(*api, job_name, "sweep", "best")).body)["spec"] == best
    chat = await jp_fetch(*api, cmp.best, "chat", method="POST", request_timeout=300,
                          body=json.dumps({"prompt": "Tell me about rivers", "max_new_tokens": 12}))
    assert chat.headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in chat.body.decode().splitlines()]
    pieces = [x["text"] for x in lines if x["type"] == "text"]
    (answer,) = lines[-1]["answers"]
    assert "".join(pieces) == answer["text"] and answer["new_tokens"] >= 1 and answer["label"] == "epoch-1"
    with pytest.raises(HTTPClientError) as e:  # a bad setting is named before anything runs
        await jp_fetch(*api, cmp.best, "chat", method="POST", body=json.dumps({"prompt": "hi", "top_p": 0}))
    assert e.value.code == 400 and json.loads(e.value.response.body)["details"]["field"] == "top_p"


def test_cancelled_sweep_leaves_each_trial_cancelled_with_a_loadable_checkpoint(ray_cluster, tiny_model, dataset,
                                                                               job_name, monkeypatch):
    delay_steps(monkeypatch, 0.3)
    svc = JobService()
    spec = sweep_spec(job_name, tiny_model, dataset, epochs=2, parameters={"lora_r": {"values": [4, 8]}}, concurrent=2)
    svc.create(spec, owner="tester")
    names = [f"{job_name}-t1", f"{job_name}-t2"]
    for name in names:  # both trials are training
        wait_for(svc, name, lambda evs: any(e["type"] == "step" for e in evs), what="a training step", timeout=600)
    svc.cancel("local", job_name, user="tester")
    assert svc.wait("local", job_name, poll=1, timeout=300).status == JobStatus.CANCELLED
    from transformers import AutoModelForCausalLM

    for name in names:
        d = svc.get("local", name)
        assert d.status == JobStatus.CANCELLED, (name, d.phase, d.error)
        cancel_ckpt = d.checkpoints[-1]
        meta = json.loads(open(os.path.join(cancel_ckpt.path, "checkpoint.json")).read())
        assert meta["job"] == name
        AutoModelForCausalLM.from_pretrained(cancel_ckpt.path)  # the merged weights load
