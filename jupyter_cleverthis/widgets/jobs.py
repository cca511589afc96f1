"""The notebook widgets: JobList, JobView, LogStream and CreateJobForm (one ESM, different views)."""

from __future__ import annotations

from typing import Any

import traitlets as t

from ..job import Job
from ..schemas import schema_bundle
from .base import JobsWidget, job_cluster, job_name


class JobList(JobsWidget):
    """Jobs of a cluster with live status, elapsed time and owner; a click opens the job's detail."""

    def __init__(self, cluster: str = "local", **kwargs: Any) -> None:
        super().__init__(cluster=cluster, view="list", **kwargs)

    def refresh(self) -> bool:
        self._refresh_list()
        if self.view == "detail" and self.selected:
            self._refresh_detail(self.selected)
        return False


class JobView(JobsWidget):
    """One job (the widget of the service's JobDetail): status, configuration, elapsed time, why queued, failure and advice, checkpoints, logs."""

    interval = 1.0

    def __init__(self, job: Job | str, *, cluster: str | None = None, **kwargs: Any) -> None:
        self.job = job if isinstance(job, Job) else Job(job, job_cluster(job, cluster))
        super().__init__(cluster=self.job.cluster, view="detail", **kwargs)

    def refresh(self) -> bool:
        self._select(self.job.name)
        done = self._refresh_detail(self.job.name)
        self._refresh_logs(self.job.name)
        return done


class LogStream(JobsWidget):
    """Live logs of one job, kept to a bounded buffer (the front-end filters and follows the tail)."""

    interval = 1.0

    def __init__(self, job: Job | str, *, cluster: str | None = None, max_chars: int = 200_000, **kwargs: Any) -> None:
        self.job = job if isinstance(job, Job) else Job(job, job_cluster(job, cluster))
        self.max_log_chars = max_chars
        self._offset = 0
        super().__init__(cluster=self.job.cluster, view="logs", **kwargs)

    def refresh(self) -> bool:
        d = self.service.get(self.cluster, job_name(self.job))
        part = self.service.logs(self.cluster, job_name(self.job), offset=self._offset)
        if part["text"]:
            self._offset = part["next"]
            self.logs = (self.logs + part["text"])[-self.max_log_chars:]
        return d.status.is_terminal()


class CreateJobForm(JobsWidget):
    """The Create Job dialog: Training / Fine-tuning tabs generated from the spec's JSON Schema, the
    Advanced training_config part and the pre-flight plan. `.job` is the created job."""

    #: what the form's fields open with (a spec's keys: "Create from best" of a sweep, a job to start from)
    values = t.Dict(allow_none=True, default_value=None).tag(sync=True)

    def __init__(self, cluster: str = "local", *, values: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(cluster=cluster, view="create", **kwargs)
        self.values = values
        self.schema = schema_bundle()  # what GET /schema answers

    @property
    def job(self) -> Job | None:
        return self.created

    def start(self) -> None:  # nothing to watch until a job is created
        if self.created is not None:
            super().start()

    def refresh(self) -> bool:
        if self.created is None:
            return True
        return self._refresh_detail(self.created.name)
