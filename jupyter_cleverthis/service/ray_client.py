"""Talking to a cluster's Job API: one cached client per cluster, and Ray's errors made into one-line reasons."""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

from ..errors import ClusterError, ClusterNotRunning
from .clusters import ClusterConfig
from .probes import ping

log = logging.getLogger(__name__)

# The metadata key that marks a Ray job as ours: "1" on training jobs, the helper's kind on helper jobs.
MARK = "cleverthis"
TERMINAL_RAY_STATUSES = ("SUCCEEDED", "FAILED", "STOPPED")


class RayClients:
    """Ray's JobSubmissionClient per (cluster name, address), created on first use and shared by threads."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def get(self, cfg: ClusterConfig, asked_as: str | None = None) -> Any:
        """The client of `cfg` (`asked_as`: the name or address the caller used, for the error message)."""
        from ray.job_submission import JobSubmissionClient

        key = (cfg.name, cfg.address)
        with self._lock:
            c = self._clients.get(key)
        if c is None:
            try:
                c = JobSubmissionClient(cfg.address, headers=cfg.sdk_headers(), verify=True)
            except Exception as e:
                if cfg.managed and not ping(cfg):  # its address is gone with it: say how to start it
                    raise ClusterNotRunning(not_running_message(cfg), details={"field": "cluster"}) from e
                raise ClusterNotRunning(
                    f"cluster '{asked_as or cfg.name}' at {cfg.address} is not reachable: {short_reason(e)}",
                    details={"field": "cluster"},
                ) from e
            with self._lock:
                self._clients[key] = c
        return c


def ensure_running(cfg: ClusterConfig) -> ClusterConfig:
    if not ping(cfg):
        raise ClusterNotRunning(not_running_message(cfg), details={"field": "cluster"})
    return cfg


def not_running_message(cfg: ClusterConfig) -> str:
    if cfg.managed:
        return f"cluster '{cfg.name}' is not running (start it with `%train cluster up`)"
    return f"cluster '{cfg.name}' is not running: no answer from {cfg.address}"


def failure(cfg: ClusterConfig | None, message: str) -> ClusterError | ClusterNotRunning:
    """The error for a Ray request that failed: the cluster is not running when it no longer answers (a request
    in flight as it stops, say), else Ray's failure in `message`."""
    if cfg is not None and not ping(cfg):
        return ClusterNotRunning(not_running_message(cfg), details={"field": "cluster"})
    return ClusterError(message)


def job_info(client: Any, name: str, cfg: ClusterConfig | None = None) -> Any:
    """Ray's record of job `name`, or None when Ray has none."""
    try:
        return client.get_job_info(name)
    except RuntimeError as e:
        if "does not exist" in str(e) or "404" in str(e):
            return None
        raise failure(cfg, f"Ray could not describe job '{name}': {short_reason(e)}") from e
    except OSError as e:  # requests' connection errors: the head went away or is overloaded
        raise failure(cfg, f"Ray could not describe job '{name}': its dashboard did not answer "
                           f"({type(e).__name__}); is the cluster still running?") from e


def ray_status(info: Any) -> str:
    """Ray's status of a job record as a word (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED)."""
    return str(getattr(info.status, "value", info.status))


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


def short_reason(e: BaseException, limit: int = 300) -> str:
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


def short_message(msg: str | None) -> str | None:
    """The last non-empty line of a message (Ray's job message, a log), at most 500 characters."""
    if not msg:
        return None
    lines = [ln for ln in msg.strip().splitlines() if ln.strip()]
    return lines[-1][:500] if lines else None
