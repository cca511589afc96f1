"""Export merged: a job's checkpoint written as a standalone fp16/bf16 model folder, on the cluster.

The work is the runtime's (`cleverthis_runtime.export`, run as a helper job on the head, which reads the
checkpoint folder where the job wrote it); here: which checkpoint, who may, and the answer as an `ExportResult`.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from ..errors import BadRequest, ClusterError
from . import runtime_env
from .helper_jobs import run_helper_job
from .models import ExportResult

if TYPE_CHECKING:
    from .jobs import JobService

DTYPES = ("bf16", "fp16")
EXPORT_TIMEOUT = 3600.0  # loading and writing a 70B model takes a while


def export_checkpoint(svc: JobService, cluster: str, name: str, checkpoint: str, dtype: str = "bf16", *,
                      user: str | None = None) -> ExportResult:
    """Export checkpoint `checkpoint` (a name from the job's list, e.g. "epoch-2") of job `name`; only its owner
    (or an admin) may, as the export is written into the job's checkpoint folder."""
    if dtype not in DTYPES:
        raise BadRequest(f"dtype must be one of {', '.join(DTYPES)} (got '{dtype}')", details={"field": "dtype"})
    svc.check_owner(cluster, name, user, "export")
    d = svc.get(cluster, name)
    found = next((c for c in d.checkpoints if c.name == checkpoint), None)
    if found is None:
        have = ", ".join(c.name for c in d.checkpoints) or "none yet"
        raise BadRequest(f"job '{name}' has no checkpoint '{checkpoint}' (it has: {have})",
                         details={"field": "checkpoint"})
    svc.ensure_running(cluster)
    answer = run_helper_job(
        svc.client(cluster), kind="export", answer="export", timeout=EXPORT_TIMEOUT,
        entrypoint=f"{runtime_env.EXPORT_ENTRYPOINT} {shlex.quote(found.path)} --dtype {dtype}",
        runtime_env=runtime_env.helper_runtime_env(), what=f"exporting {checkpoint} of {name}",
        metadata={"job": name, "checkpoint": checkpoint})
    if answer.get("error"):
        raise ClusterError(f"exporting {checkpoint} of {name} failed: {answer['error']}")
    return ExportResult.model_validate({**answer, "job": name, "checkpoint": checkpoint})
