"""Notebook widgets for training jobs: `CreateJobForm`, `JobList`, `JobDetail`, `LogStream`, `LossCurve`.

Job-scoped widgets take the job (a `jupyter_cleverthis.Job` or its name) first; `LossCurve` also takes a
list of jobs to compare. They refresh from the kernel's event loop without blocking it.
"""

from .curve import LossCurve
from .jobs import CreateJobForm, JobDetail, JobList, LogStream
from .live import JobProgress

__all__ = ["CreateJobForm", "JobDetail", "JobList", "JobProgress", "LogStream", "LossCurve"]
