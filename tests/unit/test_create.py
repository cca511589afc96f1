"""What one `JobService.create` costs, against an in-memory Ray client that runs the pre-flight helper job in
process: the dataset is loaded once (by the pre-flight), the runtime_env is built once, and the answer is built
from the submission (no re-read of Ray's record, the job's log or the cluster's resources)."""

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
from jupyter_cleverthis.errors import InvalidSpec
from jupyter_cleverthis.service import jobs as jobs_module
from jupyter_cleverthis.service.jobs import MARK, JobService
from jupyter_cleverthis.service.store import EventStore
from jupyter_cleverthis.spec import JobStatus


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
            os.environ["CLEVERTHIS_SPEC"] = runtime_env["env_vars"]["CLEVERTHIS_SPEC"]
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                runtime_preflight.main(entrypoint.split()[3:])
            logs, status = out.getvalue(), "SUCCEEDED"
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

    assert calls["preflight jobs"] == 1 and calls["training jobs"] == 1
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
