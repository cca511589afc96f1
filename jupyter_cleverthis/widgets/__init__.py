"""Notebook widgets for training jobs: `CreateJobForm`, `JobList`, `JobView`, `LogStream`, `LossCurve`,
`ChatWithCheckpoint`, `SweepView`.

Job-scoped widgets take the job (a `jupyter_cleverthis.Job` or its name) first; `LossCurve` also takes a
list of jobs to compare. They refresh from the kernel's event loop without blocking it.
"""

from __future__ import annotations

import warnings
from typing import Any

from .chat import ChatWithCheckpoint
from .curve import LossCurve
from .jobs import CreateJobForm, JobList, JobView, LogStream
from .live import JobProgress
from .sweep import SweepView

__all__ = ["ChatWithCheckpoint", "CreateJobForm", "JobList", "JobProgress", "JobView", "LogStream", "LossCurve",
           "SweepView"]


def __getattr__(name: str) -> Any:
    if name == "JobDetail":  # the widget's name until 0.x; JobDetail is the service's model (service/models.py)
        warnings.warn("jupyter_cleverthis.widgets.JobDetail is deprecated: use JobView", DeprecationWarning,
                      stacklevel=2)
        return JobView
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
