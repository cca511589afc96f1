"""`Job`: the handle a notebook holds on one training job (also what `%train` returns)."""

from __future__ import annotations

import html
from typing import Any

from .service.jobs import JobService
from .service.models import Checkpoint, JobDetail
from .spec import JobStatus

_default_service: JobService | None = None


def default_service() -> JobService:
    global _default_service
    if _default_service is None:
        _default_service = JobService()
    return _default_service


class Job:
    """A job on a cluster, by name. Cheap to create; every property asks the cluster."""

    def __init__(self, name: str, cluster: str = "local", *, service: JobService | None = None) -> None:
        self.name = name
        self.cluster = cluster
        self._svc = service or default_service()

    @classmethod
    def attach(cls, name: str, *, cluster: str = "local", service: JobService | None = None) -> Job:
        """Reconnect to an existing job (e.g. after a kernel restart); raises JobNotFound if unknown."""
        job = cls(name, cluster, service=service)
        job.detail()
        return job

    def detail(self) -> JobDetail:
        return self._svc.get(self.cluster, self.name)

    @property
    def status(self) -> JobStatus:
        return self.detail().status

    @property
    def checkpoints(self) -> list[Checkpoint]:
        return self.detail().checkpoints

    def events(self, since: int = 0) -> list[dict[str, Any]]:
        return self._svc.events(self.cluster, self.name, since)

    def metrics(self) -> Any:
        """Per-step metrics as a pandas DataFrame (step, epoch, loss, learning_rate, tokens_per_s, eta_s)."""
        try:
            import pandas as pd
        except ImportError as e:  # pandas is optional: the `pandas` extra
            raise ImportError("job.metrics() returns a pandas DataFrame and pandas is not installed: "
                              "pip install pandas (or jupyter-cleverthis[pandas]); job.events() has the same rows "
                              "as dicts") from e

        rows = [e for e in self.events() if e["type"] == "step"]
        cols = ["step", "epoch", "loss", "learning_rate", "grad_norm", "tokens_per_s", "eta_s", "t"]
        return pd.DataFrame([{c: r.get(c) for c in cols} for r in rows], columns=cols)

    def logs(self) -> str:
        return str(self._svc.logs(self.cluster, self.name)["text"])

    def resume(self, epochs: int | None = None, name: str | None = None) -> Job:
        """A new job continuing this one from its latest checkpoint (remaining epochs by default)."""
        d = self._svc.resume(self.cluster, self.name, epochs=epochs, new_name=name)
        return Job(d.name, self.cluster, service=self._svc)

    def export(self, checkpoint: str, dtype: str = "bf16") -> Any:
        """Export merged: `checkpoint` (e.g. "epoch-2") as a standalone fp16/bf16 model folder written on the
        cluster; returns the ExportResult (its `path` loads with AutoModelForCausalLM)."""
        return self._svc.export(self.cluster, self.name, checkpoint, dtype)

    def sweep(self) -> Any:
        """A sweep's trials compared (SweepDetail: parameters, results, status and the best trial)."""
        return self._svc.sweep(self.cluster, self.name)

    def wait(self, timeout: float | None = None) -> JobDetail:
        return self._svc.wait(self.cluster, self.name, timeout=timeout)

    def cancel(self) -> JobDetail:
        return self._svc.cancel(self.cluster, self.name)

    def __repr__(self) -> str:
        return f"Job(name={self.name!r}, cluster={self.cluster!r})"

    def _repr_html_(self) -> str:
        from .text import progress_line

        return f"<code>{html.escape(progress_line(self.detail()))}</code>"
