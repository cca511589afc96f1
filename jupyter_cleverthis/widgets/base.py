"""The anywidget base shared by the job widgets: one built ESM (js/src/widget.ts, the sidebar's TS core)
and a poller that refreshes traitlets from the job service without blocking the kernel.

Service calls run in a worker thread (`asyncio.to_thread`) from a task on the kernel's event loop, so a
slow cluster never blocks cell execution. The front-end's actions arrive as custom messages and are
answered with `{reply_to, ok, result | error}`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import anywidget
import traitlets as t

from ..errors import BadRequest, CleverThisError
from ..job import Job, default_service
from ..service.jobs import JobService
from ..service.models import DownloadResult, Preflight
from . import bundle

log = logging.getLogger(__name__)
# Actions that may take minutes (a model download on every node, a merged export): answered from a thread, so
# the kernel keeps running cells and answering the other actions meanwhile.
LONG_ACTIONS = ("download", "export")


class JobsWidget(anywidget.AnyWidget):
    _esm = bundle.LOADER
    _css = bundle.css()
    _bundle = t.Unicode(bundle.SOURCE).tag(sync=True)
    _bundle_id = t.Unicode(bundle.source_id(bundle.SOURCE)).tag(sync=True)

    jobs = t.List(t.Dict()).tag(sync=True)
    detail = t.Dict(allow_none=True, default_value=None).tag(sync=True)
    #: The detail's loss curves, as `GET .../metrics` serves them (downsampled on the server from every step, so a
    #: long job's curve is whole from its first step): the one data path of every front-end's curve.
    curve = t.Dict(allow_none=True, default_value=None).tag(sync=True)
    logs = t.Unicode("").tag(sync=True)
    view = t.Unicode("list").tag(sync=True)
    schema = t.Dict(allow_none=True, default_value=None).tag(sync=True)
    cluster = t.Unicode("local").tag(sync=True)
    error = t.Unicode("").tag(sync=True)

    #: Seconds between refreshes while the widget is live.
    interval: float = 2.0
    #: Bytes of log text kept in the front-end (a bounded buffer).
    max_log_chars: int = 200_000
    #: The most points of the `curve` traitlet (the server downsamples to it).
    max_points: int = 2_000

    def __init__(self, *, service: JobService | None = None, interval: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.service = service or default_service()
        if interval is not None:
            self.interval = interval
        self.selected: str | None = None
        self._curve_key: tuple[Any, ...] | None = None
        self._task: asyncio.Task[None] | None = None
        self.on_msg(self._on_action)
        self.start()

    # -- refresh loop -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = on_kernel_loop(self._loop, self.refresh)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def close(self) -> None:
        self.stop()
        super().close()

    async def _loop(self) -> None:
        while True:
            try:
                done = await asyncio.to_thread(self.refresh)
                self.error = ""
            except CleverThisError as e:
                self.error = e.message
                done = False
            except Exception as e:  # keep the widget alive through passing failures
                log.debug("widget refresh failed: %s", e)
                self.error = str(e)[:300]
                done = False
            if done:
                return
            await asyncio.sleep(self.interval)

    def refresh(self) -> bool:
        """Pull fresh state; returns True when there is nothing more to watch."""
        raise NotImplementedError

    # -- pieces the subclasses combine ----------------------------------------------------------------------------
    def _refresh_list(self) -> None:
        self.jobs = [j.model_dump(mode="json") for j in self.service.list(self.cluster)]

    def _refresh_detail(self, name: str) -> bool:
        d = self.service.get(self.cluster, name)
        self.detail = d.model_dump(mode="json")
        m = self.service.metrics(self.cluster, name, max_points=self.max_points)
        key = (m["count"], m.get("last_step"), len(m["validation"]), len(m["epochs"]))
        if key != self._curve_key:  # a change re-sends the traitlet: only when the curve has changed
            self._curve_key, self.curve = key, m
        return d.status.is_terminal()

    def _refresh_logs(self, name: str) -> None:
        text = self.service.logs(self.cluster, name)["text"]
        self.logs = text[-self.max_log_chars:]

    def _select(self, name: str) -> None:
        if name != self.selected:
            self.selected, self._curve_key, self.curve, self.logs = name, None, None, ""

    # -- front-end actions --------------------------------------------------------------------------------------
    def _on_action(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if content.get("action") in LONG_ACTIONS:
            threading.Thread(target=self._answer, args=(content,), name="cleverthis-widget-action", daemon=True).start()
        else:
            self._answer(content)

    def _answer(self, content: dict[str, Any]) -> None:
        action, rid = content.get("action"), content.get("request_id")
        try:
            result = self.handle(action, content)
            if rid:
                self.send({"reply_to": rid, "ok": True, "result": result})
        except CleverThisError as e:
            if rid:
                self.send({"reply_to": rid, "ok": False, "error": {**e.as_dict(), "status": e.status}})
        except Exception as e:
            log.exception("widget action %s failed", action)
            if rid:
                self.send({"reply_to": rid, "ok": False, "error": {"code": "internal", "message": str(e)[:300],
                                                                     "details": {}, "status": 500}})

    def handle(self, action: str | None, content: dict[str, Any]) -> Any:
        name = content.get("name")
        if action == "select" and name:
            self._select(name)
            self._refresh_detail(name)
            self.view = "detail"
            if self._task is None or self._task.done():
                self.start()
            return self.detail
        if action == "cancel" and name:
            d = self.service.cancel(self.cluster, name)
            self.detail = d.model_dump(mode="json")
            return self.detail
        if action == "resume" and name:
            d = self.service.resume(self.cluster, name, epochs=content.get("epochs"),
                                    checkpoint=content.get("checkpoint"))
            self._select(d.name)
            self.detail = d.model_dump(mode="json")
            if self._task is None or self._task.done():
                self.start()
            return d.model_dump(mode="json")
        if action == "logs" and name:
            self._refresh_logs(name)
            return None
        if action == "refresh":
            self.refresh()
            return None
        if action == "create":
            spec = self.service.validate(dict(content.get("spec") or {}, cluster=self.cluster))
            d = self.service.create(spec)
            self._select(d.name)
            self.detail = d.model_dump(mode="json")
            self.created = Job(d.name, self.cluster, service=self.service)
            if self._task is None or self._task.done():
                self.start()
            return self.detail
        if action == "plan":
            spec = self.service.validate(dict(content.get("spec") or {}, cluster=self.cluster))
            return Preflight.model_validate(self.service.preflight(spec)).model_dump(mode="json")  # as REST answers
        if action == "download":  # "Pre-fetch model": the model into every node's cache
            model = content.get("model")
            if not isinstance(model, str) or not model.strip():
                raise BadRequest("model must be a Hugging Face model id (org/name)", details={"field": "model"})
            res = self.service.download(self.cluster, model.strip(), revision=content.get("revision") or None)
            return DownloadResult.model_validate(res).model_dump(mode="json")  # as REST answers
        if action == "export" and name:  # "Export merged" of one checkpoint
            res = self.service.export(self.cluster, name, str(content.get("checkpoint") or ""),
                                      str(content.get("dtype") or "bf16"))
            return res.model_dump(mode="json")
        raise CleverThisError(f"unknown action '{action}'")

    created: Job | None = None


def on_kernel_loop(loop_fn: Any, fallback: Any) -> asyncio.Task[None] | None:
    """Schedule `loop_fn()` on the running event loop (the kernel's); without one, call `fallback()` once."""
    try:
        loop = asyncio.get_event_loop()
    except RuntimeError:
        loop = None
    if loop is not None and loop.is_running():
        return loop.create_task(loop_fn())
    fallback()
    return None


def job_name(job: Job | str) -> str:
    return job.name if isinstance(job, Job) else str(job)


def job_cluster(job: Job | str, cluster: str | None) -> str:
    if cluster:
        return cluster
    return job.cluster if isinstance(job, Job) else "local"
