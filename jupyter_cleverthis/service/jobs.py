"""The job service: create, list, describe, cancel jobs on a cluster through Ray's Job API.

Ray is the source of truth: a job is a Ray job whose submission id is the job name and whose metadata
marks it as ours; its spec travels in the job's runtime_env; its progress is read from the structured
events in its log. The magic, the console script, the REST handlers and the widgets all call this class.
"""

from __future__ import annotations

import getpass
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import cleverthis_runtime
from cleverthis_runtime.events import parse_events
from pydantic import ValidationError

from ..errors import ClusterError, ClusterNotRunning, InvalidSpec, JobExists, JobNotFound
from ..spec import JobSpec, JobStatus, error_list, format_errors
from .clusters import ClusterConfig, ClusterRegistry, ping
from .models import Checkpoint, JobDetail, JobSummary, Metrics

log = logging.getLogger(__name__)

MARK = "cleverthis"
ENTRYPOINT = "python -m cleverthis_runtime"
RAY_TO_STATUS = {
    "PENDING": JobStatus.QUEUED,
    "SUCCEEDED": JobStatus.SUCCEEDED,
    "FAILED": JobStatus.FAILED,
    "STOPPED": JobStatus.CANCELLED,
}
RUNNING_PHASES = {"running", "training_done", "succeeded"}


class _JobEvents:
    """Events parsed so far from one job's log (the log is only read past what was already parsed)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.offset = 0
        self.final = False
        self.seen: set[tuple[str, int]] = set()

    def feed(self, text: str) -> None:
        if len(text) < self.offset:  # the log was rotated or truncated: start over
            self.offset, self.events, self.seen = 0, [], set()
        end = text.rfind("\n") + 1
        if end <= self.offset:
            return
        for ev in parse_events(text[self.offset:end].splitlines()):
            key = (str(ev.get("src")), int(ev.get("seq", 0)))
            if key not in self.seen:
                self.seen.add(key)
                ev["i"] = len(self.events) + 1
                self.events.append(ev)
        self.offset = end


class JobService:
    def __init__(self, registry: ClusterRegistry | None = None) -> None:
        self.registry = registry or ClusterRegistry()
        self._clients: dict[tuple[str, str], Any] = {}
        self._events: dict[tuple[str, str], _JobEvents] = {}
        self._lock = threading.Lock()

    # -- clusters ---------------------------------------------------------------------------------------------
    def cluster(self, name: str) -> ClusterConfig:
        return self.registry.get(name)

    def client(self, cluster: str) -> Any:
        from ray.job_submission import JobSubmissionClient

        cfg = self.cluster(cluster)
        key = (cfg.name, cfg.address)
        with self._lock:
            c = self._clients.get(key)
        if c is None:
            try:
                c = JobSubmissionClient(cfg.address, headers=cfg.headers(), verify=True)
            except Exception as e:
                raise ClusterNotRunning(
                    f"cluster '{cluster}' at {cfg.address} is not reachable: {_short(e)}",
                    details={"field": "cluster"},
                ) from e
            with self._lock:
                self._clients[key] = c
        return c

    def ensure_running(self, cluster: str) -> ClusterConfig:
        cfg = self.cluster(cluster)
        if not ping(cfg):
            hint = " (start it with `%train cluster up`)" if cfg.managed else ""
            raise ClusterNotRunning(
                f"cluster '{cluster}' is not running: no answer from {cfg.address}{hint}",
                details={"field": "cluster"},
            )
        return cfg

    # -- jobs -------------------------------------------------------------------------------------------------
    @staticmethod
    def validate(data: dict[str, Any]) -> JobSpec:
        try:
            return JobSpec.model_validate(data)
        except ValidationError as e:
            raise InvalidSpec(f"invalid job spec: {format_errors(e)}", details={"errors": error_list(e)}) from e

    def create(self, spec: JobSpec, *, owner: str | None = None) -> JobDetail:
        self.ensure_running(spec.cluster)
        client = self.client(spec.cluster)
        if self._info(client, spec.name) is not None:
            raise JobExists(
                f"a job named '{spec.name}' already exists on cluster '{spec.cluster}'; choose another name",
                details={"field": "name"},
            )
        env_vars = {
            "CLEVERTHIS_SPEC": spec.model_dump_json(),
            "CLEVERTHIS_JOB": spec.name,
            "PYTHONUNBUFFERED": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        for passthrough in ("HF_HOME", "HF_HUB_OFFLINE", "TORCH_EXTENSIONS_DIR"):
            if os.environ.get(passthrough):
                env_vars[passthrough] = os.environ[passthrough]
        runtime_env = {
            "py_modules": [str(Path(cleverthis_runtime.__file__).parent)],
            "env_vars": env_vars,
        }
        metadata = {
            MARK: "1",
            "owner": owner or _default_owner(),
            "job_type": spec.job_type,
            "framework": spec.framework,
        }
        try:
            client.submit_job(
                entrypoint=ENTRYPOINT, submission_id=spec.name, runtime_env=runtime_env, metadata=metadata
            )
        except RuntimeError as e:
            if "already exists" in str(e):
                raise JobExists(f"a job named '{spec.name}' already exists on cluster '{spec.cluster}'",
                                details={"field": "name"}) from e
            raise ClusterError(f"Ray refused the job: {_short(e)}") from e
        return self.get(spec.cluster, spec.name)

    def list(self, cluster: str) -> list[JobSummary]:
        self.ensure_running(cluster)
        client = self.client(cluster)
        try:
            infos = client.list_jobs()
        except Exception as e:
            raise ClusterError(f"could not list jobs on '{cluster}': {_short(e)}") from e
        out = []
        for info in infos:
            if (info.metadata or {}).get(MARK) != "1" or not info.submission_id:
                continue
            out.append(self._summary(cluster, info))
        out.sort(key=lambda j: j.created_at or 0, reverse=True)
        return out

    def get(self, cluster: str, name: str) -> JobDetail:
        client = self.client(cluster)
        info = self._info(client, name)
        if info is None or (info.metadata or {}).get(MARK) != "1":
            raise JobNotFound(f"no job named '{name}' on cluster '{cluster}'", details={"field": "name"})
        evs = self._refresh_events(cluster, name, info)
        summary = self._summary(cluster, info, evs)
        spec = _spec_of(info)
        detail = JobDetail(**summary.model_dump(), spec=spec)
        for ev in evs:
            t = ev["type"]
            if t == "phase":
                detail.phase = ev.get("phase")
            elif t == "config":
                detail.checkpoint_dir = ev.get("checkpoint_dir")
            elif t == "plan":
                detail.plan = {k: ev.get(k) for k in ("method", "precision", "strategy", "gradient_checkpointing",
                                                      "memory_estimate_gb", "reasons", "parameters")}
            elif t == "step":
                detail.metrics = Metrics(**{k: ev.get(k) for k in Metrics.model_fields})
            elif t == "checkpoint" and ev.get("name", "").startswith("epoch-") and ev.get("name") != "epoch-final":
                detail.checkpoints.append(Checkpoint(**{k: ev.get(k) for k in Checkpoint.model_fields}))
            elif t == "error" and detail.error is None:
                detail.error, detail.error_kind = ev.get("message"), ev.get("kind") or ev.get("error_type")
        if detail.status == JobStatus.FAILED and detail.error is None:
            detail.error = info.message
        if detail.error:
            detail.message = detail.error
        cfg = self.cluster(cluster)
        detail.log_url = f"{cfg.address}/#/jobs/{info.job_id or name}"
        return detail

    def events(self, cluster: str, name: str, since: int = 0) -> list[dict[str, Any]]:
        """Events with index `i` > since (indices count from 1 in log order)."""
        client = self.client(cluster)
        info = self._info(client, name)
        if info is None:
            raise JobNotFound(f"no job named '{name}' on cluster '{cluster}'", details={"field": "name"})
        return [e for e in self._refresh_events(cluster, name, info) if e["i"] > since]

    def logs(self, cluster: str, name: str) -> str:
        client = self.client(cluster)
        if self._info(client, name) is None:
            raise JobNotFound(f"no job named '{name}' on cluster '{cluster}'", details={"field": "name"})
        return str(client.get_job_logs(name))

    def cancel(self, cluster: str, name: str) -> JobDetail:
        client = self.client(cluster)
        if self._info(client, name) is None:
            raise JobNotFound(f"no job named '{name}' on cluster '{cluster}'", details={"field": "name"})
        client.stop_job(name)
        return self.get(cluster, name)

    def wait(self, cluster: str, name: str, *, timeout: float | None = None, poll: float = 1.0,
             on_change: Any = None) -> JobDetail:
        end = None if timeout is None else time.time() + timeout
        last = None
        while True:
            d = self.get(cluster, name)
            if on_change is not None and (d.status, d.metrics) != last:
                on_change(d)
                last = (d.status, d.metrics)
            if d.status.is_terminal():
                return d
            if end is not None and time.time() > end:
                raise TimeoutError(f"job '{name}' still {d.status.value} after {timeout}s")
            time.sleep(poll)

    # -- internals --------------------------------------------------------------------------------------------
    @staticmethod
    def _info(client: Any, name: str) -> Any:
        try:
            return client.get_job_info(name)
        except RuntimeError as e:
            if "does not exist" in str(e) or "404" in str(e):
                return None
            raise ClusterError(f"Ray could not describe job '{name}': {_short(e)}") from e

    def _refresh_events(self, cluster: str, name: str, info: Any) -> list[dict[str, Any]]:
        key = (cluster, name)
        with self._lock:
            je = self._events.setdefault(key, _JobEvents())
        if je.final:
            return je.events
        terminal = str(info.status) in ("SUCCEEDED", "FAILED", "STOPPED")
        try:
            text = self.client(cluster).get_job_logs(name)
        except Exception as e:  # logs can lag behind a just-submitted job
            log.debug("logs of %s not available yet: %s", name, e)
            return je.events
        je.feed(text if text.endswith("\n") or not terminal else text + "\n")
        je.final = terminal
        return je.events

    def _summary(self, cluster: str, info: Any, evs: list[dict[str, Any]] | None = None) -> JobSummary:
        ray_status = str(getattr(info.status, "value", info.status))
        status = RAY_TO_STATUS.get(ray_status)
        if status is None:  # RUNNING: the runtime's phase events tell initializing from running
            if evs is None:
                evs = self._refresh_events(cluster, info.submission_id, info)
            phases = [e.get("phase") for e in evs if e["type"] == "phase"]
            status = JobStatus.RUNNING if any(p in RUNNING_PHASES for p in phases) else JobStatus.INITIALIZING
        spec = _spec_of(info) or {}
        created = info.start_time / 1000 if info.start_time else None
        ended = info.end_time / 1000 if info.end_time else None
        started = None
        for e in evs or []:
            if e["type"] == "phase" and e.get("phase") == "running":
                started = e.get("t")
                break
        elapsed = ((ended or time.time()) - created) if created else None
        return JobSummary(
            name=info.submission_id,
            cluster=cluster,
            status=status,
            ray_status=ray_status,
            job_type=spec.get("job_type"),
            framework=spec.get("framework"),
            base_model=spec.get("base_model"),
            dataset_path=spec.get("dataset_path"),
            epochs=spec.get("epochs"),
            batch_size=spec.get("batch_size"),
            workers=spec.get("workers"),
            owner=(info.metadata or {}).get("owner"),
            created_at=created,
            started_at=started,
            ended_at=ended,
            elapsed_s=round(elapsed, 1) if elapsed is not None else None,
            message=_short_message(info.message) if status == JobStatus.FAILED else None,
        )


def _spec_of(info: Any) -> dict[str, Any] | None:
    import json

    raw = ((info.runtime_env or {}).get("env_vars") or {}).get("CLEVERTHIS_SPEC")
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _default_owner() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def _short(e: BaseException, limit: int = 300) -> str:
    s = str(e).strip().splitlines()
    return (s[-1] if s else type(e).__name__)[:limit]


def _short_message(msg: str | None) -> str | None:
    if not msg:
        return None
    lines = [ln for ln in msg.strip().splitlines() if ln.strip()]
    return lines[-1][:500] if lines else None
