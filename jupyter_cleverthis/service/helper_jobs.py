"""Helper jobs: short Ray jobs (the pre-flight, the model download) run to their end for the one answer they print.

A helper job's submission id is `cleverthis-<kind>-<random>`, its metadata marks it with its kind (never "1", so
the job list skips it), and it is deleted once its answer is read.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..errors import ClusterError
from .ray_client import MARK, TERMINAL_RAY_STATUSES, short_message, submit
from .runtime_env import DOWNLOAD_ENTRYPOINT, PREFLIGHT_ENTRYPOINT

# (event types, callback): stream those events of a running helper job to the callback.
Progress = tuple[tuple[str, ...], Callable[[dict[str, Any]], Any]]


def preflight_entrypoint(quick: bool) -> str:
    return PREFLIGHT_ENTRYPOINT + (" --quick" if quick else "")


def download_entrypoint(model: str, revision: str | None) -> str:
    return f"{DOWNLOAD_ENTRYPOINT} {shlex.quote(model)}" + (f" --revision {shlex.quote(revision)}" if revision else "")


def run_helper_job(client: Any, *, kind: str, entrypoint: str, runtime_env: dict[str, Any], answer: str,
                   timeout: float, what: str, metadata: dict[str, str] | None = None,
                   progress: Progress | None = None) -> dict[str, Any]:
    """Run a helper Ray job to its end, deleting it after; return its `answer` event (without the envelope).

    `what` names the job in errors ("the pre-flight check"); `progress` streams events while the job runs.
    """
    sid = f"cleverthis-{kind}-{uuid.uuid4().hex[:12]}"
    submit(client, entrypoint=entrypoint, submission_id=sid, runtime_env=runtime_env,
           metadata={MARK: kind, **(metadata or {})})
    try:
        status = _wait_for_end(client, sid, timeout=timeout, what=what, progress=progress)
        text = str(client.get_job_logs(sid))
    finally:
        discard(client, sid)
    found = [e for e in _events(text) if e["type"] == answer]
    if not found:
        raise ClusterError(f"{what} failed on the cluster: {short_message(text) or status}")
    return {k: v for k, v in found[-1].items() if k not in ("src", "seq", "t", "type")}


def discard(client: Any, sid: str) -> None:
    """Stop and delete a helper job once its answer is read (best effort: a finished helper job is clutter)."""
    try:
        client.stop_job(sid)
        client.delete_job(sid)
    except Exception:
        pass


def run_helper_here(*, entrypoint: str, runtime_env: dict[str, Any], answer: str, timeout: float,
                    what: str) -> dict[str, Any]:
    """Run a helper as a plain process of this machine, with the job's env_vars, and return its `answer` event.

    For the managed local cluster, whose head (loopback only) is this machine: a Ray job would add a
    JobSupervisor actor and a driver started by it (measured on 2 cores: 5.3 s and 5.9 CPU-seconds as a helper
    job, 3.6 s and 4.0 here; docs/architecture.md, "Pre-flight"). Not for a job with its own Python
    (`py_executable`, the TensorFlow environment): that one goes through Ray (`run_helper_job`)."""
    if runtime_env.get("py_executable"):
        raise ValueError("a helper with its own Python runs as a Ray job (run_helper_job)")
    argv = shlex.split(entrypoint)
    assert argv[:2] == ["python", "-m"], entrypoint
    env = {**os.environ, **runtime_env.get("env_vars", {})}
    try:
        p = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"{what} did not finish within {timeout:.0f}s") from e
    found = [e for e in _events(p.stdout) if e["type"] == answer]
    if not found:
        raise ClusterError(f"{what} failed: {short_message(p.stderr or p.stdout) or f'exit status {p.returncode}'}")
    return {k: v for k, v in found[-1].items() if k not in ("src", "seq", "t", "type")}


def _wait_for_end(client: Any, sid: str, *, timeout: float, what: str, progress: Progress | None) -> str:
    """Poll the helper job until Ray says it ended (streaming `progress`); returns Ray's last status."""
    end = time.time() + timeout
    seen = 0
    while True:
        status = str(client.get_job_status(sid))
        if progress is not None:
            types, callback = progress
            evs = [e for e in _events(str(client.get_job_logs(sid))) if e["type"] in types]
            for e in evs[seen:]:
                callback(e)
            seen = max(seen, len(evs))
        if status.endswith(TERMINAL_RAY_STATUSES):
            return status
        if time.time() > end:
            raise ClusterError(f"{what} did not finish within {timeout:.0f}s (is the cluster's head node busy?)")
        time.sleep(0.2 if progress is None else 0.5)


def _events(text: str) -> list[dict[str, Any]]:
    from cleverthis_runtime.events import parse_events

    return list(parse_events(text.splitlines()))
