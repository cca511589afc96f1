"""The job service: create, list, describe, cancel, resume and delete jobs on a cluster through Ray's Job API.

Ray is the source of truth: a job is a Ray job whose submission id is the job name and whose metadata
marks it as ours; its spec travels in the job's runtime_env; its progress is read from the structured
events in its log. The magic, the console script, the REST handlers and the widgets all call this class.

The parts: what a job carries (runtime_env.py), the Ray clients (ray_client.py), helper jobs such as the
pre-flight (helper_jobs.py), and the projection from events to summaries and details (detail.py).
"""

from __future__ import annotations

import getpass
import logging
import os
import time
from typing import Any

from pydantic import ValidationError

from ..errors import BadRequest, Forbidden, InvalidSpec, JobConflict, JobExists, JobNotFound
from ..spec import JobSpec, JobStatus, error_list, format_errors
from . import runtime_env, tfenv
from .clusters import ClusterConfig, ClusterRegistry, home
from .compare import spec_diff
from .detail import (
    curves,
    detail_of,
    downsample,
    phase_of,
    status_needs_log,
    submitted_detail,
    summary_of,
)
from .exports import export_checkpoint
from .helper_jobs import Progress, download_entrypoint, preflight_entrypoint, run_helper_here, run_helper_job
from .models import ExportResult, JobDetail, JobSummary
from .placement import cluster_nodes
from .probes import ray_version
from .ray_client import (
    MARK,
    TERMINAL_RAY_STATUSES,
    RayClients,
    ensure_running,
    failure,
    job_info,
    ray_status,
    short_reason,
    submit,
)
from .store import EventStore
from .sweeps import (
    SweepDetail,
    best_spec,
    compare,
    is_trial,
    queued_reason,
    sweep_spec_of,
    trial_events,
    trial_of,
    trial_summaries,
)
from .templates import TemplateStore

__all__ = ["MARK", "JobService", "default_owner", "downsample", "phase_of", "submit"]

log = logging.getLogger(__name__)

SORT_KEYS = ("name", "created_at", "status", "elapsed_s", "owner")
# How long a create waits for its pre-flight job: it starts Python on the head and reads the model's config, the
# tokenizer and the dataset there, which on a head busy with other jobs' drivers takes minutes, not seconds.
PREFLIGHT_TIMEOUT = float(os.environ.get("CLEVERTHIS_PREFLIGHT_TIMEOUT", "300"))


class JobService:
    def __init__(self, registry: ClusterRegistry | None = None, store: EventStore | None = None, *,
                 admin_users: set[str] | frozenset[str] = frozenset()) -> None:
        self.registry = registry or ClusterRegistry()
        self.store = store or EventStore(home() / "events.sqlite")
        # Who may cancel, resume or delete other owners' jobs (the server's CleverThisApp.admin_users).
        self.admin_users = frozenset(admin_users)
        # saved specs ("Save as template"), under the same home as the cluster configs
        self.templates = TemplateStore(self.registry.root)
        self._clients = RayClients()

    # -- clusters ---------------------------------------------------------------------------------------------
    def cluster(self, name: str) -> ClusterConfig:
        return self.registry.get(name)

    def client(self, cluster: str) -> Any:
        return self._clients.get(self.cluster(cluster), cluster)

    def ensure_running(self, cluster: str) -> ClusterConfig:
        return ensure_running(self.cluster(cluster))

    def nodes(self, cluster: str) -> list[dict[str, Any]]:
        """The cluster's alive nodes with their free and total resources and what each job holds on them."""
        cfg = self.ensure_running(cluster)
        found = cluster_nodes(cfg)
        if found is None:
            raise failure(cfg, f"cluster '{cluster}' did not say what its nodes have (its dashboard did not answer)")
        return found

    def info(self, cluster: str, name: str) -> Any:
        """Ray's record of job `name` on `cluster`, or None when Ray has none."""
        return job_info(self.client(cluster), name, self.cluster(cluster))

    # -- create -----------------------------------------------------------------------------------------------
    @staticmethod
    def validate(data: dict[str, Any]) -> JobSpec:
        try:
            return JobSpec.model_validate(data)
        except ValidationError as e:
            raise InvalidSpec(f"invalid job spec: {format_errors(e)}", details={"errors": error_list(e)}) from e

    def _runtime_env(self, spec: JobSpec) -> dict[str, Any]:
        """The job's runtime_env (runtime_env.job_runtime_env); one method, so tests can wrap what jobs get."""
        return runtime_env.job_runtime_env(spec)

    def create(self, spec: JobSpec, *, owner: str | None = None, check: bool = True) -> JobDetail:
        """Check feasibility (the quick pre-flight), then submit a validated spec; raises naming the wrong field."""
        cfg = self.ensure_running(spec.cluster)
        client = self.client(spec.cluster)
        if job_info(client, spec.name, cfg) is not None:
            raise JobExists(
                f"a job named '{spec.name}' already exists on cluster '{spec.cluster}'; choose another name",
                details={"field": "name"},
            )
        py = runtime_env.job_python(spec)
        if py is not None:  # the job's own environment: its Ray must be the cluster's
            tfenv.check_ray_version(py, ray_version(cfg))
        env = self._runtime_env(spec)  # one for the pre-flight and the job: the pre-flight sees what the job will
        if check:
            pf = self._quick_check(cfg, spec, env)
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
            submit(client, entrypoint=runtime_env.entrypoint(spec), submission_id=spec.name, runtime_env=env,
                   metadata=metadata)
        except (RuntimeError, OSError) as e:  # OSError: requests' connection errors (the head went away)
            if "already exists" in str(e):
                raise JobExists(f"a job named '{spec.name}' already exists on cluster '{spec.cluster}'",
                                details={"field": "name"}) from e
            raise failure(cfg, f"Ray refused the job: {short_reason(e)}") from e
        return submitted_detail(spec.cluster, spec.name, runtime_env=env, metadata=metadata, created_at=time.time(),
                                log_url=_log_url(cfg, spec.name))

    # -- helper jobs ------------------------------------------------------------------------------------------
    def preflight(self, spec: JobSpec, *, quick: bool = False, timeout: float = PREFLIGHT_TIMEOUT) -> dict[str, Any]:
        """Run the runtime's pre-flight on the cluster (a short Ray job on the head node) and return its answer."""
        return self._preflight(spec, self._runtime_env(spec), quick=quick, timeout=timeout)

    def _quick_check(self, cfg: ClusterConfig, spec: JobSpec, env: dict[str, Any]) -> dict[str, Any]:
        """Create's quick pre-flight: a process here on the managed local cluster (all its nodes are on this machine:
        `run_helper_here`); elsewhere, and for a job with a Python of its own, a helper job on the cluster."""
        if cfg.managed and not env.get("py_executable"):
            return run_helper_here(entrypoint=preflight_entrypoint(True), runtime_env=env, answer="preflight",
                                   timeout=PREFLIGHT_TIMEOUT, what="the pre-flight check")
        return self._preflight(spec, env, quick=True)

    def _preflight(self, spec: JobSpec, env: dict[str, Any], *, quick: bool, timeout: float = PREFLIGHT_TIMEOUT) -> dict[str, Any]:
        self.ensure_running(spec.cluster)
        return run_helper_job(self.client(spec.cluster), kind="preflight", entrypoint=preflight_entrypoint(quick),
                              runtime_env=env, answer="preflight", timeout=timeout, what="the pre-flight check")

    def download(self, cluster: str, model: str, *, revision: str | None = None, timeout: float = 4 * 3600.0,
                 on_progress: Any = None) -> dict[str, Any]:
        """`%train download MODEL`: fetch a Hub model into the model cache of every node (one task pinned to each
        node, run as a short Ray job); returns {model, ok, nodes: [per-node result]}."""
        progress: Progress | None = None
        if on_progress is not None:
            progress = (("download_progress", "download_done"), on_progress)
        self.ensure_running(cluster)
        return run_helper_job(
            self.client(cluster), kind="download", entrypoint=download_entrypoint(model, revision), answer="download",
            timeout=timeout, what=f"downloading {model}", metadata={"model": model},
            runtime_env=runtime_env.helper_runtime_env(), progress=progress,
        )

    def export(self, cluster: str, name: str, checkpoint: str, dtype: str = "bf16", *,
               user: str | None = None) -> ExportResult:
        """Export merged: checkpoint `checkpoint` of job `name` as a standalone fp16/bf16 folder (exports.py)."""
        return export_checkpoint(self, cluster, name, checkpoint, dtype, user=user)

    def chat(self, cluster: str, *, job: str | None, sources: list[str], prompt: str, **settings: Any
             ) -> list[dict[str, Any]]:
        """The same prompt to each source (a job's checkpoints by name, or model folders), answered on the
        cluster; `on_text(index, piece)` receives the answers as they are generated (chat.py)."""
        from .chat import chat

        return chat(self, cluster, job=job, sources=sources, prompt=prompt, **settings)

    # -- read -------------------------------------------------------------------------------------------------
    def list(self, cluster: str, *, status: str | None = None, owner: str | None = None,
             sort: str = "-created_at", offset: int = 0, limit: int | None = None) -> list[JobSummary]:
        return self.query(cluster, status=status, owner=owner, sort=sort, offset=offset, limit=limit)[0]

    def query(self, cluster: str, *, status: str | None = None, owner: str | None = None,
              sort: str = "-created_at", offset: int = 0, limit: int | None = None) -> tuple[list[JobSummary], int]:
        """Jobs of a cluster, filtered, sorted (`name`, `created_at`, `status`, `-` for descending), paged."""
        cfg, client = self.ensure_running(cluster), self.client(cluster)
        try:
            infos = client.list_jobs()
        except Exception as e:
            raise failure(cfg, f"could not list jobs on '{cluster}': {short_reason(e)}") from e
        out, trials = [], {}
        for info in infos:
            if (info.metadata or {}).get(MARK) != "1" or not info.submission_id:
                continue
            if owner and (info.metadata or {}).get("owner") != owner:
                continue
            summary = self._listed_summary(cluster, info)
            if status and summary.status.value != status:
                continue
            out.append(summary)
            if sweep_spec_of(info) is not None:  # a sweep's trials follow it (sweeps.py)
                trials[summary.name] = [t for t in trial_summaries(self, cluster, info)
                                        if not status or t.status.value == status]
        key = sort.lstrip("-")
        if key not in SORT_KEYS:
            raise BadRequest(f"sort must be one of {', '.join(SORT_KEYS)} (got '{sort}')", details={"field": "sort"})
        out.sort(key=lambda j: (getattr(j, key) is None, getattr(j, key) or 0), reverse=sort.startswith("-"))
        out = [row for job in out for row in (job, *trials.get(job.name, ()))]
        return out[offset: offset + limit if limit else None], len(out)

    def get(self, cluster: str, name: str) -> JobDetail:
        info = self._our_job(cluster, name)  # (a sweep's detail is its own events, not its trials')
        own = [e for e in self.refresh_events(cluster, name, info) if e.get("trial") in (None, name)]
        ray_job = info.job_id or getattr(info, "parent", None) or name  # a trial's page: its sweep's
        detail = detail_of(cluster, info, own, log_url=_log_url(self.cluster(cluster), ray_job))
        if detail.status == JobStatus.QUEUED:
            detail.queued_reason = queued_reason(info, detail.spec or {}, cluster_nodes(self.cluster(cluster)), name)
        return detail

    def compare(self, cluster: str, names: list[str]) -> list[dict[str, Any]]:
        """Where the specs of jobs `names` differ, key by key (compare.spec_diff)."""
        return spec_diff({n: self.spec(cluster, n) for n in names})

    def spec(self, cluster: str, name: str) -> dict[str, Any]:
        """The spec `name` was submitted with (what "Create from this job" and "Export" start from)."""
        spec = runtime_env.spec_of(self._our_job(cluster, name).runtime_env)
        if spec is None:
            raise JobNotFound(f"job '{name}' on cluster '{cluster}' carries no spec (submitted by another tool)",
                              details={"field": "name"})
        return spec

    def events(self, cluster: str, name: str, since: int = 0) -> list[dict[str, Any]]:
        """Events with index `i` > since (indices count from 1 in log order)."""
        info = self._any_job(cluster, name)
        evs = self.refresh_events(cluster, name, info)
        if is_trial(info):  # numbered within the trial (sweeps.trial_events)
            return evs[since:]
        return self.store.events(cluster, name, since)

    def metrics(self, cluster: str, name: str, *, max_points: int = 1000,
                after_step: float | None = None) -> dict[str, Any]:
        """Loss curves for plotting: step series downsampled (MinMaxLTTB) to at most max_points; with
        `after_step`, only the points after it (what a drawn curve lacks). A sweep's own: none (its trials')."""
        evs = [e for e in self.events(cluster, name) if e.get("trial") in (None, name)]
        return curves(evs, max_points=max_points, after_step=after_step)

    def logs(self, cluster: str, name: str, *, offset: int = 0, limit: int | None = None) -> dict[str, Any]:
        info = self._any_job(cluster, name)
        text = str(self.client(cluster).get_job_logs(getattr(info, "parent", None) or name))
        if is_trial(info):  # a trial's lines of its sweep's log (its events, its workers' lines name it too)
            text = "".join(line for line in text.splitlines(keepends=True) if name in line)
        end = len(text) if limit is None else min(len(text), offset + limit)
        return {"text": text[offset:end], "offset": offset, "next": end, "size": len(text)}

    # -- change -----------------------------------------------------------------------------------------------
    def check_owner(self, cluster: str, name: str, user: str | None, what: str, info: Any = None) -> Any:
        """The job's owner, or an admin, may `what` it; returns the job's Ray info."""
        info = info if info is not None else self._any_job(cluster, name)
        user = user or default_owner()
        owner = (info.metadata or {}).get("owner")
        if owner and owner != user and user not in self.admin_users:
            raise Forbidden(f"job '{name}' belongs to {owner}: only {owner} (or an admin of this server) can {what} it",
                            details={"field": "name", "owner": owner})
        return info

    def cancel(self, cluster: str, name: str, *, user: str | None = None) -> JobDetail:
        _not_a_trial(self.check_owner(cluster, name, user, "cancel"), "cancel")
        self.client(cluster).stop_job(name)
        return self.get(cluster, name)

    def delete(self, cluster: str, name: str, *, user: str | None = None) -> None:
        """Forget a finished job (Ray's record and our events); its checkpoints stay on disk."""
        _not_a_trial(self.check_owner(cluster, name, user, "delete"), "delete")
        d = self.get(cluster, name)
        if not d.status.is_terminal():
            raise JobConflict(f"job '{name}' is {d.status.value}; cancel it before deleting", details={"field": "name"})
        self.client(cluster).delete_job(name)
        self.store.forget(cluster, name)

    def resume(self, cluster: str, name: str, *, epochs: int | None = None, new_name: str | None = None,
               owner: str | None = None, checkpoint: str | None = None) -> JobDetail:
        """A new job continuing `name` from its latest checkpoint, or the named one (resume.py)."""
        from .resume import resume_job

        return resume_job(self, cluster, name, epochs=epochs, new_name=new_name, owner=owner, checkpoint=checkpoint)

    def sweep(self, cluster: str, name: str) -> SweepDetail:
        """Sweep `name` compared: its trials' parameters, results and status, and the best trial (sweeps.py)."""
        info = self._our_job(cluster, name)
        if is_trial(info) or sweep_spec_of(info) is None:
            raise BadRequest(f"job '{name}' is not a sweep", details={"field": "name"})
        return compare(cluster, info, self.refresh_events(cluster, name, info))

    def best_spec(self, cluster: str, name: str) -> dict[str, Any]:
        """"Create from best": the spec of sweep `name`'s best trial, as a new job's."""
        d = self.sweep(cluster, name)
        if d.best is None:
            raise JobConflict(f"sweep '{name}' has no trial with a {d.metric_label or 'result'} yet",
                              details={"field": "name"})
        return best_spec(d, self.spec(cluster, d.best))

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
    def _any_job(self, cluster: str, name: str) -> Any:
        """Ray's record of `name` (any Ray job of that name), or JobNotFound."""
        info = self.info(cluster, name) or trial_of(self, cluster, name)
        if info is None:
            raise JobNotFound(f"no job named '{name}' on cluster '{cluster}'", details={"field": "name"})
        return info

    def _our_job(self, cluster: str, name: str) -> Any:
        """Ray's record of our job `name` (marked as ours), or JobNotFound."""
        info = self._any_job(cluster, name)
        if (info.metadata or {}).get(MARK) != "1":
            raise JobNotFound(f"no job named '{name}' on cluster '{cluster}'", details={"field": "name"})
        return info

    def refresh_events(self, cluster: str, name: str, info: Any,
                        types: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        """The job's stored events, after storing what its log gained since the last read (until it is final);
        a sweep trial's are its sweep's that name it."""
        if is_trial(info):
            evs = trial_events(self.refresh_events(cluster, info.parent, info.parent_info), name)
            return [e for e in evs if not types or e["type"] in types]
        _, final = self.store.cursor(cluster, name)
        if not final:
            terminal = ray_status(info) in TERMINAL_RAY_STATUSES
            try:
                text = self.client(cluster).get_job_logs(name)
            except Exception as e:  # logs can lag behind a just-submitted job
                log.debug("logs of %s not available yet: %s", name, e)
            else:
                self.store.ingest(cluster, name, text, final=terminal)
        return self.store.events(cluster, name, types=types)

    def _listed_summary(self, cluster: str, info: Any) -> JobSummary:
        # The job list: only phase events, from the store.  Ray's log is fetched (whole: its API has no range)
        # only while a running job's phases cannot tell its status yet, so a job printing 10,000 lines a second
        # does not slow the list down (docs/development.md, "What the suites prove").
        evs = self.store.events(cluster, info.submission_id, types=("phase",))
        if status_needs_log(info, evs):
            evs = self.refresh_events(cluster, info.submission_id, info, types=("phase",))
        return summary_of(cluster, info, evs)


def _not_a_trial(info: Any, what: str) -> None:
    if is_trial(info):
        raise JobConflict(f"'{info.submission_id}' is a trial of sweep '{info.parent}': {what} the sweep to {what} "
                          "its trials", details={"field": "name"})


def default_owner() -> str:
    """Who the user's own process (a kernel, the CLI) acts for: the JupyterHub user, else the login user."""
    if os.environ.get("JUPYTERHUB_USER"):
        return os.environ["JUPYTERHUB_USER"]
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def _log_url(cfg: ClusterConfig, job_id: str) -> str:
    """The job's page on the Ray dashboard."""
    return f"{cfg.address}/#/jobs/{job_id}"
