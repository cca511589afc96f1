"""What one `JobService.create` costs, against an in-memory Ray client that runs the pre-flight helper job in
process: the dataset is loaded once (by the pre-flight), the runtime_env is built once, and the answer is built
from the submission (no re-read of Ray's record, the job's log or the cluster's resources). On the managed local
cluster the pre-flight runs as a process of this machine (`run_helper_here`, run in process here too); on any
other cluster as a helper job."""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
from types import SimpleNamespace

import pytest

import cleverthis_runtime.data as data
import cleverthis_runtime.preflight as runtime_preflight
from cleverthis_runtime.events import parse_events
from jupyter_cleverthis.errors import ClusterError, InvalidSpec
from jupyter_cleverthis.service import jobs as jobs_module
from jupyter_cleverthis.service.helper_jobs import preflight_entrypoint, run_helper_here
from jupyter_cleverthis.service.jobs import MARK, JobService
from jupyter_cleverthis.service.runtime_env import job_runtime_env
from jupyter_cleverthis.service.store import EventStore
from jupyter_cleverthis.spec import JobStatus


def run_preflight(entrypoint: str, runtime_env: dict) -> str:
    """The pre-flight's entrypoint run in this process; its printed events."""
    os.environ["CLEVERTHIS_SPEC"] = runtime_env["env_vars"]["CLEVERTHIS_SPEC"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runtime_preflight.main(entrypoint.split()[3:])
    return out.getvalue()


class InProcessRay:
    """The Job API calls create makes; a pre-flight helper job runs in this process, a training job stays PENDING."""

    def __init__(self, calls: collections.Counter[str]) -> None:
        self.calls = calls
        self.jobs: dict[str, dict] = {}

    def get_job_info(self, name):
        self.calls["get_job_info"] += 1
        if name not in self.jobs:
            raise RuntimeError(f"Job {name} does not exist")
        return self.jobs[name]["info"]

    def submit_job(self, *, entrypoint, submission_id, runtime_env, metadata):
        logs, status = "", "PENDING"
        if "cleverthis_runtime.preflight" in entrypoint:
            self.calls["preflight jobs"] += 1
            logs, status = run_preflight(entrypoint, runtime_env), "SUCCEEDED"
        else:
            self.calls["training jobs"] += 1
        info = SimpleNamespace(status=status, metadata=metadata, runtime_env=runtime_env, start_time=1, end_time=None,
                               submission_id=submission_id, job_id=None, message=None)
        self.jobs[submission_id] = {"info": info, "logs": logs}
        return submission_id

    def get_job_status(self, sid):
        return self.jobs[sid]["info"].status

    def get_job_logs(self, sid):
        self.calls["helper log reads" if sid.startswith("cleverthis-") else "job log reads"] += 1
        return self.jobs[sid]["logs"]

    def stop_job(self, sid):
        pass

    def delete_job(self, sid):
        self.jobs.pop(sid, None)


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """A JobService on InProcessRay, with counters on what create must do only once (or not at all)."""
    calls: collections.Counter[str] = collections.Counter()
    monkeypatch.setenv("CLEVERTHIS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLEVERTHIS_SPEC", raising=False)

    def counting(module, name, key):
        orig = getattr(module, name)

        def wrapper(*a, **kw):
            calls[key] += 1
            return orig(*a, **kw)

        monkeypatch.setattr(module, name, wrapper)

    counting(data, "load_dataset", "dataset loads")
    counting(runtime_preflight, "load_dataset", "dataset loads")
    counting(JobService, "_runtime_env", "runtime_env builds")
    monkeypatch.setattr(jobs_module, "cluster_nodes", lambda cfg: calls.update(["cluster resources"]) or [])
    ray = InProcessRay(calls)

    def here(*, entrypoint, runtime_env, answer, timeout, what):  # helper_jobs.run_helper_here, in this process
        calls["preflight here"] += 1
        assert entrypoint.endswith("--quick") and answer == "preflight" and "py_executable" not in runtime_env
        found = [e for e in parse_events(run_preflight(entrypoint, runtime_env).splitlines()) if e["type"] == answer]
        return {k: v for k, v in found[-1].items() if k not in ("src", "seq", "t", "type")}

    monkeypatch.setattr(jobs_module, "run_helper_here", here)
    svc = JobService(store=EventStore())
    monkeypatch.setattr(svc, "client", lambda cluster: ray)
    monkeypatch.setattr(svc, "ensure_running", lambda cluster: svc.cluster(cluster))
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps({"instruction": f"q{i}", "output": f"a{i}"}) + "\n"
                                                for i in range(20)))
    return svc, ray, calls, folder


def test_create_loads_the_dataset_once_and_answers_from_the_submission(counted):
    svc, ray, calls, folder = counted
    spec = svc.validate({"name": "counted-1", "dataset_path": str(folder), "base_model": "gpt2", "epochs": 1,
                         "workers": 1, "training_config": {"method": "full"}})
    d = svc.create(spec, owner="alice")

    assert svc.cluster("local").managed  # its nodes are this machine: the pre-flight runs here, not as a Ray job
    assert calls["preflight here"] == 1 and calls["preflight jobs"] == 0 and calls["training jobs"] == 1
    assert calls["dataset loads"] == 1, calls  # the pre-flight's; the answer does not re-check anything
    assert calls["runtime_env builds"] == 1, calls  # one runtime_env for the pre-flight and the job
    assert calls["get_job_info"] == 1, calls  # the name check; nothing re-read after submitting
    assert calls["job log reads"] == 0 and calls["cluster resources"] == 0, calls

    info = ray.jobs["counted-1"]["info"]
    assert info.metadata == {MARK: "1", "owner": "alice", "job_type": "finetune", "framework": "torch"}
    assert (d.name, d.cluster, d.owner, d.status, d.ray_status) == ("counted-1", "local", "alice", JobStatus.QUEUED,
                                                                   "PENDING")
    assert (d.base_model, d.dataset_path, d.epochs, d.workers) == ("gpt2", str(folder), 1, 1)
    assert d.spec == json.loads(info.runtime_env["env_vars"]["CLEVERTHIS_SPEC"])
    assert d.log_url and d.log_url.endswith("/#/jobs/counted-1")

    # What get says of the same job, before its first event, is what create answered.
    got = svc.get("local", "counted-1")
    keep = set(type(d).model_fields) - {"created_at", "elapsed_s", "queued_reason"}
    assert got.model_dump(include=keep) == d.model_dump(include=keep)


def test_create_refuses_what_the_preflight_refuses_without_submitting(counted):
    svc, ray, calls, folder = counted
    spec = svc.validate({"name": "counted-2", "dataset_path": str(folder / "missing"), "base_model": "gpt2",
                         "workers": 1})
    with pytest.raises(InvalidSpec, match="dataset_path"):
        svc.create(spec)
    assert calls["training jobs"] == 0 and "counted-2" not in ray.jobs


def test_on_a_cluster_that_is_not_managed_the_preflight_is_a_helper_job(counted, monkeypatch):
    """A configured cluster's nodes may be other machines: create's pre-flight runs there, as a Ray job."""
    import dataclasses

    svc, ray, calls, folder = counted
    remote = dataclasses.replace(svc.cluster("local"), name="remote", address="http://127.0.0.1:1", managed=False)
    monkeypatch.setattr(svc, "cluster", lambda name: remote)
    monkeypatch.setattr(svc, "ensure_running", lambda name: remote)
    spec = svc.validate({"name": "counted-3", "cluster": "remote", "dataset_path": str(folder), "base_model": "gpt2",
                         "epochs": 1, "workers": 1, "training_config": {"method": "full"}})
    svc.create(spec)
    assert calls["preflight jobs"] == 1 and calls["preflight here"] == 0 and calls["training jobs"] == 1
    assert calls["dataset loads"] == 1, calls
    with pytest.raises(InvalidSpec, match="dataset_path"):
        svc.create(svc.validate({**spec.model_dump(mode="json"), "name": "counted-4",
                                 "dataset_path": str(folder / "missing")}))
    assert "counted-4" not in ray.jobs


def test_the_preflight_as_a_process_of_this_machine(tmp_path):
    """run_helper_here for real: a child process with the job's env_vars answers like the helper job would; a
    process that prints no answer is an error in words."""
    from jupyter_cleverthis.spec import JobSpec

    spec = JobSpec(name="here-1", dataset_path=str(tmp_path / "nothing"), base_model="gpt2", workers=1)
    answer = run_helper_here(entrypoint=preflight_entrypoint(True), runtime_env=job_runtime_env(spec),
                             answer="preflight", timeout=120, what="the pre-flight check")
    assert [e["field"] for e in answer["errors"]] == ["dataset_path"], answer
    assert "does not exist on the cluster's head node" in answer["errors"][0]["message"]
    with pytest.raises(ClusterError, match="^the pre-flight check failed: .*No module named"):
        run_helper_here(entrypoint="python -m cleverthis_runtime.no_such_module", runtime_env={"env_vars": {}},
                        answer="preflight", timeout=120, what="the pre-flight check")
