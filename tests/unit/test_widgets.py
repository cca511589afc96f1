"""Widget state against an in-memory job service (the real-cluster paths run in the kernel tests)."""

from __future__ import annotations

import time

import pytest

from jupyter_cleverthis.errors import InvalidSpec, JobNotFound
from jupyter_cleverthis.job import Job
from jupyter_cleverthis.service.models import CurveDiagnosis, Metrics
from jupyter_cleverthis.service.models import JobDetail as Detail
from jupyter_cleverthis.spec import JobSpec, JobStatus
from jupyter_cleverthis.widgets import CreateJobForm, JobList, LogStream, LossCurve
from jupyter_cleverthis.widgets import JobView as JobDetail


class FakeService:
    def __init__(self):
        self.jobs: dict[str, Detail] = {}
        self.log = ""
        self.evs: list[dict] = []
        self.cancelled: list[str] = []
        self.specs: dict[str, dict] = {}

    def add(self, name, status=JobStatus.RUNNING, losses=()):
        self.jobs[name] = Detail(name=name, cluster="local", status=status, ray_status="RUNNING",
                                 created_at=time.time() - 5, metrics=Metrics(step=len(losses)))
        for k, loss in enumerate(losses, 1):
            self.evs.append({"i": len(self.evs) + 1, "job": name, "type": "step", "step": k, "loss": loss,
                             "total_steps": 100})

    def list(self, cluster):
        return list(self.jobs.values())

    def get(self, cluster, name):
        from jupyter_cleverthis.service.diagnosis import curve_diagnosis

        if name not in self.jobs:
            raise JobNotFound(f"no job named '{name}'")
        found = curve_diagnosis([e for e in self.evs if e["job"] == name and e["type"] == "step"])
        return self.jobs[name].model_copy(update={"curve": CurveDiagnosis(**found) if found else None})

    def compare(self, cluster, names):
        from jupyter_cleverthis.service.compare import spec_diff

        return spec_diff({n: self.specs.get(n, {}) for n in names})

    def events(self, cluster, name, since=0):
        return [e for e in self.evs if e["i"] > since and e["job"] == name]

    def logs(self, cluster, name, offset=0, limit=None):
        return {"text": self.log[offset:], "offset": offset, "next": len(self.log), "size": len(self.log)}

    def metrics(self, cluster, name, max_points=1000, after_step=None):
        from jupyter_cleverthis.service.detail import curves

        return curves(self.events(cluster, name), max_points=max_points, after_step=after_step)

    def export(self, cluster, name, checkpoint, dtype="bf16", user=None):
        from jupyter_cleverthis.errors import Forbidden

        raise Forbidden(f"only the owner of job '{name}' may export its checkpoints")

    def download(self, cluster, model, revision=None):
        return {"model": model, "revision": revision, "ok": True, "nodes": [{"node_ip": "10.0.0.1", "status": "cached"}]}

    def cancel(self, cluster, name):
        self.cancelled.append(name)
        self.jobs[name] = self.jobs[name].model_copy(update={"status": JobStatus.CANCELLED})
        return self.jobs[name]

    @staticmethod
    def validate(data):
        from jupyter_cleverthis.service.jobs import JobService

        return JobService.validate(data)

    def create(self, spec: JobSpec, owner=None):
        self.add(spec.name, JobStatus.QUEUED)
        return self.jobs[spec.name]


@pytest.fixture
def svc():
    s = FakeService()
    s.add("a", losses=[3.0 - 0.02 * i for i in range(40)])
    s.add("b", JobStatus.SUCCEEDED)
    return s


def test_job_list_rows_and_click_opens_detail(svc):
    w = JobList(service=svc)
    assert [j["name"] for j in w.jobs] == ["a", "b"] and w.view == "list"
    w._on_action(w, {"action": "select", "name": "a", "request_id": "r1"}, None)
    assert w.view == "detail" and w.detail["name"] == "a" and len(w.curve["step"]) == 40


def test_a_long_curve_reaches_the_widget_whole_and_downsampled():
    """The widget's curve is the server's: every step downsampled to max_points, from the first step."""
    s = FakeService()
    s.add("long", losses=[5.0 / (1 + i / 500) for i in range(5_000)])
    w = JobDetail(Job("long", service=s), service=s)
    assert w.curve["count"] == 5_000 and len(w.curve["step"]) <= w.max_points
    assert w.curve["step"][0] == 1 and w.curve["step"][-1] == 5_000 and w.curve["last_step"] == 5_000


def test_job_detail_and_cancel(svc):
    svc.log = "line 1\nline 2\n"
    w = JobDetail(Job("a", service=svc), service=svc)
    assert w.detail["status"] == "running" and "line 2" in w.logs
    replies = []
    w.send = replies.append
    w._on_action(w, {"action": "cancel", "name": "a", "request_id": "r2"}, None)
    assert svc.cancelled == ["a"] and replies[0]["ok"] and replies[0]["reply_to"] == "r2"
    w._on_action(w, {"action": "select", "name": "nope", "request_id": "r3"}, None)
    assert replies[1]["ok"] is False and replies[1]["error"]["code"] == "job_not_found"


def test_prefetch_and_export_are_answered_from_a_thread_with_words(svc):
    """"Pre-fetch model" and "Export merged" can take minutes: the kernel answers them from a thread."""
    w = JobDetail(Job("a", service=svc), service=svc)
    replies: list[dict] = []
    w.send = replies.append
    w._on_action(w, {"action": "download", "model": "org/m", "request_id": "d1"}, None)
    w._on_action(w, {"action": "download", "model": " ", "request_id": "d2"}, None)
    w._on_action(w, {"action": "export", "name": "a", "checkpoint": "epoch-1", "request_id": "e1"}, None)
    deadline = time.time() + 10
    while len(replies) < 3 and time.time() < deadline:
        time.sleep(0.01)
    by_id = {r["reply_to"]: r for r in replies}
    assert by_id["d1"]["ok"] and by_id["d1"]["result"]["nodes"][0]["status"] == "cached"
    assert by_id["d2"]["ok"] is False and by_id["d2"]["error"]["details"] == {"field": "model"}
    assert by_id["e1"]["ok"] is False and "only the owner of job 'a'" in by_id["e1"]["error"]["message"]


def test_log_stream_is_bounded_and_incremental(svc):
    svc.log = "x" * 500
    w = LogStream("a", service=svc, max_chars=100)
    assert len(w.logs) == 100
    svc.log += "tail-end"
    w.refresh()
    assert w.logs.endswith("tail-end") and len(w.logs) == 100


def test_create_form_validates_with_field_errors(svc):
    w = CreateJobForm(service=svc)
    assert w.view == "create" and w.schema["job_spec"]["properties"]["epochs"]["default"] == 3
    replies = []
    w.send = replies.append
    w._on_action(w, {"action": "create", "spec": {"name": "bad/name"}, "request_id": "r"}, None)
    assert replies[-1]["ok"] is False and replies[-1]["error"]["details"]["errors"][0]["field"] == "name"
    w._on_action(w, {"action": "create", "spec": {"name": "good-1", "epochs": 1}, "request_id": "r"}, None)
    assert replies[-1]["ok"] and w.job.name == "good-1" and w.detail["name"] == "good-1"
    with pytest.raises(InvalidSpec):
        svc.validate({"name": "x", "epochs": 0})


def test_loss_curve_compares_jobs_and_hints(svc):
    svc.specs = {"a": {"name": "a", "epochs": 3, "training_config": {"learning_rate": 2e-4, "lora_r": 8}},
                 "b": {"name": "b", "epochs": 3, "training_config": {"learning_rate": 1e-3}}}
    c = LossCurve([Job("a", service=svc), "b"], service=svc)
    assert len(c.figure.data) == 4
    assert list(c.figure.data[0].y)[:2] == [3.0, 2.98]
    assert c.hints["a"][0] == "smooth" and c.hints["b"] is None
    assert "a</b> running" in c.status.value and "Loss decreasing smoothly" in c.status.value
    # the config diff beside the curves: only what differs, one column per job
    assert c.diff.value.count("<tr>") == 3  # the header, learning_rate, lora_r
    assert "<code>training_config.learning_rate</code></td><td>0.0002</td><td>0.001</td>" in c.diff.value
    assert "<code>training_config.lora_r</code></td><td>8</td><td>—</td>" in c.diff.value
    assert "epochs" not in c.diff.value and "<code>name</code>" not in c.diff.value
    # readable on JupyterLab's light and dark themes: no painted background, grey text and grid
    layout = c.figure.layout
    assert layout.paper_bgcolor == layout.plot_bgcolor == "rgba(0, 0, 0, 0)"
    assert layout.font.color == "#8a8a8a" and layout.xaxis.gridcolor.startswith("rgba(138, 138, 138")
    assert layout.xaxis.title.text == "step" and layout.yaxis.title.text == "loss"


def test_the_old_widget_name_still_imports_with_a_deprecation_warning():
    import jupyter_cleverthis.widgets as widgets

    with pytest.warns(DeprecationWarning, match="use JobView"):
        old = widgets.JobDetail
    assert old is JobDetail  # JobView, imported under its old name above


def test_every_widget_carries_the_built_bundle_behind_one_small_loader(svc):
    """anywidget's 2 s initialize deadline covers `_esm` only: that is the loader, the bundle travels as a trait."""
    from jupyter_cleverthis.widgets import bundle

    built = bundle.STATIC / "widget.js"
    assert built.exists(), "the widgets' front-end is built by make install"
    widgets = [JobList(service=svc), JobDetail(Job("a", service=svc), service=svc),
               LogStream(Job("a", service=svc), service=svc), CreateJobForm(service=svc)]
    for w in widgets:
        assert w._esm == bundle.LOADER and len(w._esm) < 2000
        assert w._bundle == built.read_text(encoding="utf-8")
        assert w._bundle_id == bundle.source_id(w._bundle)
    assert "module.default.render" in bundle.LOADER and "_bundle_id" in bundle.LOADER
