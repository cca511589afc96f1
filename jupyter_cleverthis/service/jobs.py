"""The job service: create, list, describe, cancel jobs on a cluster through Ray's Job API.

Ray is the source of truth: a job is a Ray job whose submission id is the job name and whose metadata
marks it as ours; its spec travels in the job's runtime_env; its progress is read from the structured
events in its log. The magic, the console script, the REST handlers and the widgets all call this class.
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import cleverthis_runtime
from cleverthis_runtime.checkpoints import stop_grace_seconds
from cleverthis_runtime.triage import advice_for, classify

from ..errors import (
    BadRequest,
    ClusterError,
    ClusterNotRunning,
    Forbidden,
    InvalidSpec,
    JobConflict,
    JobExists,
    JobNotFound,
)
from ..spec import JobSpec, JobStatus, error_list, format_errors
from . import tensorboard, tfenv
from .clusters import ClusterConfig, ClusterRegistry, cluster_resources, home, ping, ray_version
from .models import Checkpoint, JobDetail, JobSummary, Metrics
from .store import EventStore

log = logging.getLogger(__name__)

MARK = "cleverthis"
ENTRYPOINT = "python -m cleverthis_runtime"
RAY_TO_STATUS = {
    "PENDING": JobStatus.QUEUED,
    "SUCCEEDED": JobStatus.SUCCEEDED,
    "FAILED": JobStatus.FAILED,
    "STOPPED": JobStatus.CANCELLED,
}
# Phases the runtime reports while Ray says RUNNING: before the workers start the job is still waiting for
# capacity (queued), while they load data and weights it is initializing, then running.
QUEUED_PHASES = {"initializing", "starting_workers"}
INITIALIZING_PHASES = {"loading_data", "loading_model", "downloading"}
# The driver's last word.  Workers' log lines reach the driver's log later than its own, so a worker phase
# ("cancel_checkpoint_written") can follow "cancelled" in the log: a final phase is never replaced.
FINAL_PHASES = {"cancelled", "failed", "succeeded"}


def phase_of(evs: list[dict[str, Any]]) -> str | None:
    """The job's current phase: the last phase event, except that a final phase is never replaced."""
    phase = None
    for ev in evs:
        if ev["type"] == "phase" and phase not in FINAL_PHASES:
            phase = ev.get("phase")
    return phase
PREFLIGHT_ENTRYPOINT = "python -m cleverthis_runtime.preflight"
DOWNLOAD_ENTRYPOINT = "python -m cleverthis_runtime.download"


class JobService:
    def __init__(self, registry: ClusterRegistry | None = None, store: EventStore | None = None, *,
                 admin_users: set[str] | frozenset[str] = frozenset()) -> None:
        self.registry = registry or ClusterRegistry()
        self.store = store or EventStore(home() / "events.sqlite")
        # Who may cancel, resume or delete other owners' jobs (the server's CleverThisApp.admin_users).
        self.admin_users = frozenset(admin_users)
        self._clients: dict[tuple[str, str], Any] = {}
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
                c = JobSubmissionClient(cfg.address, headers=cfg.sdk_headers(), verify=True)
            except Exception as e:
                if cfg.managed and not ping(cfg):  # its address is gone with it: say how to start it
                    raise ClusterNotRunning(_not_running(cfg), details={"field": "cluster"}) from e
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
            raise ClusterNotRunning(_not_running(cfg), details={"field": "cluster"})
        return cfg

    # -- jobs -------------------------------------------------------------------------------------------------
    @staticmethod
    def validate(data: dict[str, Any]) -> JobSpec:
        try:
            return JobSpec.model_validate(data)
        except ValidationError as e:
            raise InvalidSpec(f"invalid job spec: {format_errors(e)}", details={"errors": error_list(e)}) from e

    def _runtime_env(self, spec: JobSpec) -> dict[str, Any]:
        env_vars = {
            "CLEVERTHIS_SPEC": _spec_json(spec),
            "CLEVERTHIS_JOB": spec.name,
            "PYTHONUNBUFFERED": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        # How long Ray waits after the SIGTERM of a cancel before SIGKILL: enough to write a checkpoint
        # (rule in README, "Cancel and resume"; training_config.cancel_grace_s overrides it).
        tc = spec.training_config
        env_vars["RAY_JOB_STOP_WAIT_TIME_S"] = str(stop_grace_seconds(
            spec.base_model, tc.method if tc else None, tc.cancel_grace_s if tc else None))
        env = {"py_modules": [str(Path(cleverthis_runtime.__file__).parent)],
               "env_vars": {**env_vars, **_passthrough_env()}}
        if spec.framework == "tensorflow":
            # Ray starts the job's supervisor and every worker with this python (the entrypoint too: _entrypoint);
            # tf-keras, because Keras 3 `fit` fails under MultiWorkerMirroredStrategy.
            env["py_executable"] = tfenv.python()
            env["env_vars"].update({"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"})
        return env

    def _short_job(self, cluster: str, *, kind: str, entrypoint: str, runtime_env: dict[str, Any], answer: str,
                   timeout: float, what: str, metadata: dict[str, str] | None = None,
                   progress: tuple[tuple[str, ...], Any] | None = None) -> dict[str, Any]:
        """Run a helper Ray job (pre-flight, download) to its end, deleting it after; return its `answer` event.

        `progress` = (event types, callback) streams those events while the job runs.
        """
        from cleverthis_runtime.events import parse_events

        self.ensure_running(cluster)
        client = self.client(cluster)
        sid = f"cleverthis-{kind}-{uuid.uuid4().hex[:12]}"
        submit(client, entrypoint=entrypoint, submission_id=sid, runtime_env=runtime_env,
               metadata={MARK: kind, **(metadata or {})})
        end = time.time() + timeout
        seen = 0
        try:
            while True:
                status = str(client.get_job_status(sid))
                if progress is not None:
                    types, callback = progress
                    evs = [e for e in parse_events(str(client.get_job_logs(sid)).splitlines()) if e["type"] in types]
                    for e in evs[seen:]:
                        callback(e)
                    seen = max(seen, len(evs))
                if status.endswith(("SUCCEEDED", "FAILED", "STOPPED")):
                    break
                if time.time() > end:
                    raise ClusterError(f"{what} did not finish within {timeout:.0f}s (is the cluster's head node busy?)")
                time.sleep(0.2 if progress is None else 0.5)
            text = str(client.get_job_logs(sid))
        finally:
            try:  # best effort: a finished helper job is only clutter
                client.stop_job(sid)
                client.delete_job(sid)
            except Exception:
                pass
        found = [e for e in parse_events(text.splitlines()) if e["type"] == answer]
        if not found:
            raise ClusterError(f"{what} failed on the cluster: {_short_message(text) or status}")
        return {k: v for k, v in found[-1].items() if k not in ("src", "seq", "t", "type")}

    def download(self, cluster: str, model: str, *, revision: str | None = None, timeout: float = 4 * 3600.0,
                 on_progress: Any = None) -> dict[str, Any]:
        """`%train download MODEL`: fetch a Hub model into the model cache of every node (one task pinned to each
        node, run as a short Ray job); returns {model, ok, nodes: [per-node result]}."""
        import shlex

        cmd = f"{DOWNLOAD_ENTRYPOINT} {shlex.quote(model)}" + (f" --revision {shlex.quote(revision)}" if revision else "")
        return self._short_job(
            cluster, kind="download", entrypoint=cmd, answer="download", timeout=timeout,
            what=f"downloading {model}", metadata={"model": model},
            runtime_env={"py_modules": [str(Path(cleverthis_runtime.__file__).parent)],
                         "env_vars": {"PYTHONUNBUFFERED": "1", **_passthrough_env()}},
            progress=(("download_progress", "download_done"), on_progress) if on_progress is not None else None,
        )

    def preflight(self, spec: JobSpec, *, quick: bool = False, timeout: float = 120.0) -> dict[str, Any]:
        """Run the runtime's pre-flight on the cluster (a short Ray job on the head node) and return its answer."""
        return self._short_job(
            spec.cluster, kind="preflight", entrypoint=PREFLIGHT_ENTRYPOINT + (" --quick" if quick else ""),
            runtime_env=self._runtime_env(spec), answer="preflight", timeout=timeout, what="the pre-flight check",
        )

    def create(self, spec: JobSpec, *, owner: str | None = None, check: bool = True) -> JobDetail:
        """Validate (schema), check feasibility on the cluster, then submit. Raises with the field that is wrong."""
        self.ensure_running(spec.cluster)
        client = self.client(spec.cluster)
        if self._info(client, spec.name) is not None:
            raise JobExists(
                f"a job named '{spec.name}' already exists on cluster '{spec.cluster}'; choose another name",
                details={"field": "name"},
            )
        if spec.framework == "tensorflow":  # its environment's Ray must be the cluster's
            tfenv.check_ray_version(tfenv.python(), ray_version(self.cluster(spec.cluster)))
        if check:
            pf = self.preflight(spec, quick=True)
            if pf["errors"]:
                first = pf["errors"][0]
                raise InvalidSpec(f"{first['field']}: {first['message']}", details={"errors": pf["errors"]})
        metadata = {
            MARK: "1",
            "owner": owner or default_owner(),
            "job_type": spec.job_type,
            "framework": spec.framework,
        }
        try:
            submit(
                client, entrypoint=_entrypoint(spec), submission_id=spec.name, runtime_env=self._runtime_env(spec),
                metadata=metadata,
            )
        except RuntimeError as e:
            if "already exists" in str(e):
                raise JobExists(f"a job named '{spec.name}' already exists on cluster '{spec.cluster}'",
                                details={"field": "name"}) from e
            raise ClusterError(f"Ray refused the job: {_short(e)}") from e
        return self.get(spec.cluster, spec.name)

    def list(self, cluster: str, *, status: str | None = None, owner: str | None = None,
             sort: str = "-created_at", offset: int = 0, limit: int | None = None) -> list[JobSummary]:
        return self.query(cluster, status=status, owner=owner, sort=sort, offset=offset, limit=limit)[0]

    def query(self, cluster: str, *, status: str | None = None, owner: str | None = None,
              sort: str = "-created_at", offset: int = 0, limit: int | None = None) -> tuple[list[JobSummary], int]:
        """Jobs of a cluster, filtered, sorted (`name`, `created_at`, `status`, `-` for descending), paged."""
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
            if owner and (info.metadata or {}).get("owner") != owner:
                continue
            summary = self._summary(cluster, info)
            if status and summary.status.value != status:
                continue
            out.append(summary)
        key = sort.lstrip("-")
        if key not in ("name", "created_at", "status", "elapsed_s", "owner"):
            raise BadRequest(f"sort must be one of name, created_at, status, elapsed_s, owner (got '{sort}')",
                             details={"field": "sort"})
        out.sort(key=lambda j: (getattr(j, key) is None, getattr(j, key) or 0), reverse=sort.startswith("-"))
        total = len(out)
        return out[offset: offset + limit if limit else None], total

    def get(self, cluster: str, name: str) -> JobDetail:
        client = self.client(cluster)
        info = self._info(client, name)
        if info is None or (info.metadata or {}).get(MARK) != "1":
            raise JobNotFound(f"no job named '{name}' on cluster '{cluster}'", details={"field": "name"})
        evs = self._refresh_events(cluster, name, info)
        summary = self._summary(cluster, info, evs)
        spec = _spec_of(info)
        detail = JobDetail(**summary.model_dump(), spec=spec)
        original_base = None
        detail.phase = phase_of(evs)
        for ev in evs:
            t = ev["type"]
            if t == "config":
                detail.checkpoint_dir = ev.get("checkpoint_dir")
                original_base = ev.get("original_base_model")
            elif t == "plan":
                detail.plan = {k: ev.get(k) for k in ("method", "precision", "strategy", "gradient_checkpointing",
                                                      "memory_estimate_gb", "reasons", "parameters",
                                                      "lora_target_modules")}
            elif t == "tracking":
                detail.tracking = {k: dict(ev[k]) for k in ("tensorboard", "mlflow", "wandb") if k in ev}
                if "tensorboard" in detail.tracking:  # "Open in TensorBoard": this machine can show it
                    tb = detail.tracking["tensorboard"]
                    tb["viewer"] = tensorboard.viewable(tb.get("log_dir"))
            elif t == "early_stop":
                detail.stopped_early, detail.stop_reason = True, ev.get("reason")
            elif t == "step":
                detail.metrics = Metrics(**{k: ev.get(k) for k in Metrics.model_fields})
            elif t == "checkpoint" and ev.get("name", "").startswith("epoch-") and ev.get("name") != "epoch-final":
                detail.checkpoints.append(Checkpoint(**{k: ev.get(k) for k in Checkpoint.model_fields}))
            elif t == "utilisation":  # the latest per worker, by rank
                detail.utilisation = sorted([u for u in detail.utilisation if u.get("rank") != ev.get("rank")] + [ev],
                                            key=lambda u: u.get("rank") or 0)
            elif t == "error" and detail.error is None:
                detail.error, detail.error_kind = ev.get("message"), ev.get("kind")
                detail.traceback = ev.get("traceback")
        if detail.status == JobStatus.FAILED:
            if detail.error is None:
                detail.error = _short_message(info.message) or "the job failed"
                detail.traceback = info.message
                detail.error_kind = classify(info.message or "")[0]
            detail.error_kind = detail.error_kind or classify(detail.error)[0]
            detail.advice = advice_for(detail.error_kind)
        if detail.error:
            detail.message = detail.error
        elif detail.stopped_early and detail.status == JobStatus.SUCCEEDED:
            detail.message = detail.stop_reason
        if detail.status == JobStatus.QUEUED:
            detail.queued_reason = self._why_queued(cluster, spec or {})
        cfg = self.cluster(cluster)
        detail.log_url = f"{cfg.address}/#/jobs/{info.job_id or name}"
        detail.serving = _serving_values(detail, original_base)
        return detail

    def _why_queued(self, cluster: str, spec: dict[str, Any]) -> dict[str, Any]:
        workers = int(spec.get("workers") or 1)
        per = {"CPU": float(spec.get("cpus_per_worker") or 1)}
        if spec.get("gpus_per_worker"):
            per["GPU"] = float(spec["gpus_per_worker"])
        res = cluster_resources(self.cluster(cluster)) or {}
        free = {k: v.get("free") for k, v in res.items() if k in per}
        need = {k: v * workers for k, v in per.items()}
        short = [k for k, v in need.items() if (free.get(k) or 0) < v]
        text = (f"waiting for {', '.join(f'{need[k]:g} {k}' for k in short)}: {', '.join(f'{free.get(k) or 0:g} free' for k in short)}"
                if short else "waiting for the workers to start")
        return {"requested": {"workers": workers, "per_worker": per, "total": need}, "free": free,
                "nodes": res.get("nodes"), "message": text}

    def events(self, cluster: str, name: str, since: int = 0) -> list[dict[str, Any]]:
        """Events with index `i` > since (indices count from 1 in log order)."""
        client = self.client(cluster)
        info = self._info(client, name)
        if info is None:
            raise JobNotFound(f"no job named '{name}' on cluster '{cluster}'", details={"field": "name"})
        self._refresh_events(cluster, name, info)
        return self.store.events(cluster, name, since)

    def metrics(self, cluster: str, name: str, *, max_points: int = 1000) -> dict[str, Any]:
        """Loss curves for plotting: step series downsampled (MinMaxLTTB) to at most max_points."""
        evs = self.events(cluster, name)
        steps = [e for e in evs if e["type"] == "step" and e.get("loss") is not None]
        x = [float(e["step"]) for e in steps]
        y = [float(e["loss"]) for e in steps]
        idx = downsample(x, y, max_points)
        return {
            "count": len(steps),
            "step": [x[i] for i in idx],
            "loss": [y[i] for i in idx],
            "epochs": [{"epoch": e.get("epoch"), "step": e.get("step"), "train_loss": e.get("train_loss")}
                       for e in evs if e["type"] == "epoch"],
            "validation": [{k: e.get(k) for k in ("epoch", "step", "eval_loss", "perplexity")}
                           for e in evs if e["type"] == "validation"],
            "latest": {k: steps[-1].get(k) for k in ("step", "total_steps", "epoch", "loss", "learning_rate",
                                                     "tokens_per_s", "eta_s")} if steps else None,
        }

    def logs(self, cluster: str, name: str, *, offset: int = 0, limit: int | None = None) -> dict[str, Any]:
        client = self.client(cluster)
        if self._info(client, name) is None:
            raise JobNotFound(f"no job named '{name}' on cluster '{cluster}'", details={"field": "name"})
        text = str(client.get_job_logs(name))
        end = len(text) if limit is None else min(len(text), offset + limit)
        return {"text": text[offset:end], "offset": offset, "next": end, "size": len(text)}

    def check_owner(self, cluster: str, name: str, user: str | None, what: str, info: Any = None) -> Any:
        """The job's owner, or an admin, may `what` it; returns the job's Ray info."""
        info = info if info is not None else self._info(self.client(cluster), name)
        if info is None:
            raise JobNotFound(f"no job named '{name}' on cluster '{cluster}'", details={"field": "name"})
        user = user or default_owner()
        owner = (info.metadata or {}).get("owner")
        if owner and owner != user and user not in self.admin_users:
            raise Forbidden(f"job '{name}' belongs to {owner}: only {owner} (or an admin of this server) can {what} it",
                            details={"field": "name", "owner": owner})
        return info

    def cancel(self, cluster: str, name: str, *, user: str | None = None) -> JobDetail:
        self.check_owner(cluster, name, user, "cancel")
        self.client(cluster).stop_job(name)
        return self.get(cluster, name)

    def delete(self, cluster: str, name: str, *, user: str | None = None) -> None:
        """Forget a finished job (Ray's record and our events); its checkpoints stay on disk."""
        self.check_owner(cluster, name, user, "delete")
        d = self.get(cluster, name)
        if not d.status.is_terminal():
            raise JobConflict(f"job '{name}' is {d.status.value}; cancel it before deleting", details={"field": "name"})
        self.client(cluster).delete_job(name)
        self.store.forget(cluster, name)

    def resume(self, cluster: str, name: str, *, epochs: int | None = None, new_name: str | None = None,
               owner: str | None = None, checkpoint: str | None = None) -> JobDetail:
        """A new job continuing `name` from its latest checkpoint (or the named one, e.g. "epoch-1");
        epochs default to what remains. Only the job's owner (or an admin) may resume it; the new job is `owner`'s."""
        self.check_owner(cluster, name, owner, "resume")
        d = self.get(cluster, name)
        if not d.status.is_terminal():
            raise JobConflict(f"job '{name}' is still {d.status.value}; cancel it or wait for it to end",
                              details={"field": "name"})
        if not d.checkpoints or d.spec is None:
            raise JobConflict(f"job '{name}' wrote no checkpoint to resume from", details={"field": "name"})
        last = d.checkpoints[-1]
        if checkpoint is not None:
            found = [c for c in d.checkpoints if checkpoint in (c.name, c.path)]
            if not found:
                raise BadRequest(f"job '{name}' has no checkpoint '{checkpoint}' (it has: "
                                 f"{', '.join(c.name for c in d.checkpoints)})", details={"field": "checkpoint"})
            last = found[-1]
        done = int(last.epoch or 0)  # epochs completed since the lineage's start (a mid-epoch cancel: not counted)
        started = next((int(e.get("start_epoch") or 0) for e in self.store.events(cluster, name)
                        if e["type"] == "config"), 0)
        remaining = epochs if epochs is not None else started + int(d.spec.get("epochs", 0)) - done
        if remaining < 1:
            raise JobConflict(f"job '{name}' already finished its {d.spec.get('epochs')} epochs; pass epochs to "
                              "train further", details={"field": "epochs"})
        base = d.spec.get("base_model")
        spec_data = {**d.spec, "name": new_name or _next_name(name, self, cluster), "base_model": last.path,
                     "epochs": remaining, "output_dir": d.checkpoint_dir}
        spec = self.validate(spec_data)
        log.info("resuming %s from %s (base %s) as %s", name, last.path, base, spec.name)
        return self.create(spec, owner=owner)
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
        except OSError as e:  # requests' connection errors: the head went away or is overloaded
            raise ClusterError(f"Ray could not describe job '{name}': its dashboard did not answer "
                               f"({type(e).__name__}); is the cluster still running?") from e

    def _refresh_events(self, cluster: str, name: str, info: Any,
                        types: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        _, final = self.store.cursor(cluster, name)
        if not final:
            terminal = str(getattr(info.status, "value", info.status)) in ("SUCCEEDED", "FAILED", "STOPPED")
            try:
                text = self.client(cluster).get_job_logs(name)
            except Exception as e:  # logs can lag behind a just-submitted job
                log.debug("logs of %s not available yet: %s", name, e)
            else:
                self.store.ingest(cluster, name, text, final=terminal)
        return self.store.events(cluster, name, types=types)

    def _summary(self, cluster: str, info: Any, evs: list[dict[str, Any]] | None = None) -> JobSummary:
        ray_status = str(getattr(info.status, "value", info.status))
        status = RAY_TO_STATUS.get(ray_status)
        if evs is None:
            # The job list: only phase events, from the store.  Ray's log is fetched (whole: its API has no
            # range) only while a running job's phases cannot tell its status yet, so a job printing 10,000
            # lines a second does not slow the list down (README, "Reliability").
            evs = self.store.events(cluster, info.submission_id, types=("phase",))
            if status is None and not any(e.get("phase") not in QUEUED_PHASES | INITIALIZING_PHASES for e in evs):
                evs = self._refresh_events(cluster, info.submission_id, info, types=("phase",))
        if status is None:  # RUNNING: the runtime's phase events tell queued / initializing / running apart
            phases = [e.get("phase") for e in evs if e["type"] == "phase"]
            status = JobStatus.QUEUED
            if any(p in INITIALIZING_PHASES for p in phases):
                status = JobStatus.INITIALIZING
            if any(p not in QUEUED_PHASES and p not in INITIALIZING_PHASES for p in phases):
                status = JobStatus.RUNNING
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


def submit(client: Any, *, patience_s: float = 60.0, **kw: Any) -> str:
    """Ray's submit_job, waiting while a just-started head has no job agent yet ("No available agent to submit
    job"): the dashboard answers seconds before its agent registers, so a submit right after `cluster up` (or on a
    loaded head) would fail for nothing."""
    end = time.monotonic() + patience_s
    while True:
        try:
            return str(client.submit_job(**kw))
        except RuntimeError as e:
            if "No available agent" not in str(e) or time.monotonic() > end:
                raise
            time.sleep(1.0)


def _entrypoint(spec: JobSpec) -> str:
    if spec.framework == "tensorflow":
        import shlex

        return f"{shlex.quote(tfenv.python())} -m cleverthis_runtime"
    return ENTRYPOINT


def _spec_of(info: Any) -> dict[str, Any] | None:
    import json

    raw = ((info.runtime_env or {}).get("env_vars") or {}).get("CLEVERTHIS_SPEC")
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def default_owner() -> str:
    """Who the user's own process (a kernel, the CLI) acts for: the JupyterHub user, else the login user."""
    if os.environ.get("JUPYTERHUB_USER"):
        return os.environ["JUPYTERHUB_USER"]
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def _short(e: BaseException, limit: int = 300) -> str:
    """A one-line reason from a Ray client error, without echoing Ray's response body (it can hold tracebacks)."""
    text = str(e)
    log.info("Ray client error: %s", text[:2000])
    m = re.search(r"status code (\d{3})", text)
    if m:
        return f"Ray answered HTTP {m.group(1)}"
    if "Traceback" in text or "{" in text:
        return type(e).__name__
    lines = text.strip().splitlines()
    return (lines[-1] if lines else type(e).__name__)[:limit]


def _short_message(msg: str | None) -> str | None:
    if not msg:
        return None
    lines = [ln for ln in msg.strip().splitlines() if ln.strip()]
    return lines[-1][:500] if lines else None


def _next_name(name: str, svc: JobService, cluster: str) -> str:
    base = name.split("-resume-")[0][:50]
    for n in range(1, 1000):
        cand = f"{base}-resume-{n}"
        if svc._info(svc.client(cluster), cand) is None:
            return cand
    raise JobExists(f"too many resumed jobs of '{name}'")


def _serving_values(d: JobDetail, original_base: str | None = None) -> dict[str, Any] | None:
    """What the Model Serving page asks for: the model path, and the LoRA adapter path when there is one
    (with the base it applies to: the original base model, also for a job resumed from a checkpoint)."""
    if not d.checkpoint_dir or not d.checkpoints:
        return None
    final = os.path.join(d.checkpoint_dir, "epoch-final") if d.status == JobStatus.SUCCEEDED else d.checkpoints[-1].path
    out: dict[str, Any] = {"model_path": final}
    if d.checkpoints[-1].adapter_path:
        out["lora_adapter_path"] = os.path.join(final, "adapter_model")
        out["base_model"] = original_base or (d.spec or {}).get("base_model")
    return out


def _spec_json(spec: JobSpec) -> str:
    """The spec as the runtime reads it: training_config holds only the keys the user set, so that the
    dataset's training_config.json keeps every other key (a bare dump would override them with defaults)."""
    import json

    data = spec.model_dump(mode="json")
    if spec.training_config is not None:
        data["training_config"] = spec.training_config.model_dump(mode="json", exclude_unset=True)
    return json.dumps(data)


# What the Jupyter server's environment passes on to its jobs: the model cache, the DeepSpeed op cache and the
# object stores' settings (s3:// and gs:// dataset paths, read through fsspec).  Settings and file paths only:
# secrets (AWS keys, HF_TOKEN, ...) would be visible in Ray's job records, so jobs take those from their
# nodes' own environment or from the credentials files named here (README, "Data").
PASSTHROUGH_ENV = ("HF_HOME", "HF_HUB_OFFLINE", "TORCH_EXTENSIONS_DIR",
                   "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                   "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                   "GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST",
                   # experiment tracking (README, "Tracking"): where to, never the keys (WANDB_API_KEY,
                   # MLFLOW_TRACKING_PASSWORD/TOKEN stay on the nodes); a URI's user:password is dropped
                   "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_MODE",
                   "WANDB_DIR", "WANDB_BASE_URL")


def _not_running(cfg: ClusterConfig) -> str:
    if cfg.managed:
        return f"cluster '{cfg.name}' is not running (start it with `%train cluster up`)"
    return f"cluster '{cfg.name}' is not running: no answer from {cfg.address}"


def _passthrough_env() -> dict[str, str]:
    out = {k: os.environ[k] for k in PASSTHROUGH_ENV if os.environ.get(k)}
    for k in ("MLFLOW_TRACKING_URI", "WANDB_BASE_URL"):
        if k in out:
            out[k] = _without_userinfo(out[k])
    return out


def _without_userinfo(uri: str) -> str:
    """`https://user:secret@host/x` -> `https://host/x`: a password in a URI stays out of Ray's job records."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    return urlunsplit(parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")))


def downsample(x: list[float], y: list[float], n: int) -> list[int]:
    """Indices of at most n points that keep the curve's shape (MinMaxLTTB from tsdownsample)."""
    if len(x) <= n:
        return list(range(len(x)))
    import numpy as np
    from tsdownsample import MinMaxLTTBDownsampler

    # np.fromiter is ~4x faster than np.asarray on Python lists of floats (it dominated the 100k-point case).
    xs, ys = np.fromiter(x, float, len(x)), np.fromiter(y, float, len(y))
    return MinMaxLTTBDownsampler().downsample(xs, ys, n_out=max(n, 4)).tolist()
