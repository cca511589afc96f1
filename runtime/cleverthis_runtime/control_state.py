"""A job's control state, shared by its driver and its workers through Ray's internal key-value store (in the
GCS, compat.kv_*), not an actor: a job starts one Python process fewer.

What they exchange: the stop request (the driver's SIGTERM, or a sweep's stop), each rank's attempt number
(1, then 2 after a recovery), rank 0's phase, the cancel checkpoint's acknowledgement and the first fatal
error. The keys are `job/<name>/<run>/...`: `run` is new for each driver, so a job submitted again under the
name of a deleted one never reads the old one's stop flag; the driver deletes them when it ends, and a new
driver of the name deletes what a killed one left (`for_driver`).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from . import compat


class JobState:
    """Picklable (two strings): the driver makes it and hands it to the workers in their config."""

    def __init__(self, job: str, run: str | None = None) -> None:
        self.job = job
        self.prefix = f"job/{job}/{run or uuid.uuid4().hex[:12]}/"

    @classmethod
    def for_driver(cls, job: str) -> JobState:
        """A new driver's state. A driver that could not clear its keys (SIGKILL, a lost head node) left them
        behind: the next driver of that name (the job submitted again after a delete) removes them first."""
        compat.kv_delete(f"job/{job}/")
        return cls(job)

    def _get(self, name: str) -> Any:
        raw = compat.kv_get(self.prefix + name)
        return None if raw is None else json.loads(raw)

    def _put(self, name: str, value: Any, overwrite: bool = True) -> bool:
        return compat.kv_put(self.prefix + name, json.dumps(value).encode(), overwrite)

    def join(self, rank: int) -> int:
        """A worker of `rank` starts; returns its attempt number. Only that rank's worker writes its count
        (a restarted group's worker starts after the one it replaces)."""
        n = int(self._get(f"attempts/{rank}") or 0) + 1
        self._put(f"attempts/{rank}", n)
        if rank == 0:
            self._put("phase", "starting")
        return n

    def request_stop(self, reason: str = "cancel") -> None:
        self._put("stop", {"reason": reason, "t": time.time()}, overwrite=False)

    def stop_requested(self) -> bool:
        return compat.kv_get(self.prefix + "stop") is not None

    def set_phase(self, phase: str) -> None:
        self._put("phase", phase)

    def acknowledge(self, info: dict[str, Any]) -> None:
        self._put("ack", info)

    def set_fatal(self, info: dict[str, Any]) -> None:
        """The first fatal error wins (an atomic put-if-absent)."""
        self._put("fatal", info, overwrite=False)

    def fatal(self) -> dict[str, Any] | None:
        return self._get("fatal")

    def snapshot(self) -> dict[str, Any]:
        attempts = {int(k.rsplit("/", 1)[1]): int(self._get(k[len(self.prefix):]) or 0)
                    for k in compat.kv_keys(self.prefix + "attempts/")}
        return {"job": self.job, "stop": self._get("stop"), "phase": self._get("phase") or "starting",
                "attempts": attempts, "ack": self._get("ack"), "fatal": self.fatal()}

    def clear(self) -> None:
        compat.kv_delete(self.prefix)
