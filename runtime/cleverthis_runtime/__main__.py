"""The Ray job entrypoint: `python -m cleverthis_runtime` (spec in $CLEVERTHIS_SPEC).

Validates the spec and the data on the head node (a bad line fails in seconds, not after the workers
start), claims the checkpoint folder, then runs Ray Train's TorchTrainer with the requested workers.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

from pydantic import ValidationError

from . import checkpoints, events
from .backend import backend_for
from .data import DatasetError, default_checkpoint_dir, exists, load_dataset, read_training_config
from .spec import JobSpec, format_errors, merge_training_config
from .triage import classify_exception


def prepare(spec: JobSpec, job: str) -> dict[str, Any]:
    """Everything checked before any worker starts; returns the workers' config."""
    backend_for(spec.framework).check_base_model(spec.base_model)  # before any worker starts
    file_cfg, cfg_path = read_training_config(spec.dataset_path) if exists(spec.dataset_path) else (None, None)
    try:
        tc = merge_training_config(file_cfg, spec.training_config)
    except ValidationError as e:
        raise DatasetError(f"{cfg_path or 'training_config'}: {format_errors(e)}") from e
    ds = load_dataset(spec.dataset_path, tc.columns)
    ckpt_dir = spec.output_dir or default_checkpoint_dir(spec.dataset_path)
    base_meta = checkpoints.read_meta(spec.base_model) if os.path.isdir(spec.base_model) else None
    checkpoints.claim(ckpt_dir, job, resuming_from=spec.base_model if base_meta else None)
    start_epoch = int(base_meta.get("epoch", 0)) if base_meta else 0
    original = checkpoints.original_base(spec.base_model) if base_meta else spec.base_model
    events.emit(
        "config",
        training_config=tc.model_dump(),
        training_config_file=cfg_path,
        checkpoint_dir=ckpt_dir,
        dataset_format=ds.format,
        dataset_formats=ds.formats,
        examples=len(ds),
        resumed_from=spec.base_model if base_meta else None,
        resumed_step=base_meta.get("global_step") if base_meta else None,
        resumed_partial=bool(base_meta.get("partial")) if base_meta else None,
        original_base_model=original,
        start_epoch=start_epoch,
        max_failures=tc.max_failures,
    )
    return {
        "spec": spec.model_dump(mode="json"),
        "training_config": tc.model_dump(mode="json"),
        "checkpoint_dir": ckpt_dir,
        "job": job,
        "start_epoch": start_epoch,
        "resume_from": spec.base_model if base_meta else None,
        "original_base_model": original,
    }


def run(spec: JobSpec, job: str) -> None:
    if spec.sweep is not None:  # the trials on Ray Tune, each the same training as a job (sweep.py)
        from .sweep import run_sweep

        run_sweep(spec, job)
        return
    backend_for(spec.framework).fit(spec, job, prepare(spec, job))


def main() -> int:
    events.keep_in_ray_logs()
    events.set_source("driver")
    raw = os.environ.get("CLEVERTHIS_SPEC")
    if not raw:
        print("CLEVERTHIS_SPEC is not set: this module is the entrypoint of jobs submitted by jupyter-cleverthis",
              file=sys.stderr)
        return 2
    job = os.environ.get("CLEVERTHIS_JOB") or json.loads(raw).get("name", "job")
    events.emit("phase", phase="initializing", pid=os.getpid())
    try:
        spec = JobSpec.model_validate_json(raw)
        run(spec, job)
    except ValidationError as e:
        events.emit("error", kind="spec", error_type="ValidationError", message=format_errors(e))
        print(f"invalid job spec: {format_errors(e)}", file=sys.stderr)
        return 1
    except Exception as e:  # the job's last word: classified, then the traceback for the log
        report_failure(e)
        return 1
    events.emit("phase", phase="succeeded")
    return 0


def report_failure(e: BaseException) -> None:
    """The classified `error` event of a job's (or a sweep trial's) failure, then the traceback for the log."""
    cause = _root_cause(e)
    kind, _ = classify_exception(cause)
    where = cause.location() if isinstance(cause, DatasetError) else {}
    events.emit("error", kind=kind, error_type=type(cause).__name__, message=str(cause),
                traceback=traceback.format_exc()[-8000:], **where)
    traceback.print_exc()


def _root_cause(e: BaseException) -> BaseException:
    """Ray wraps worker errors (TrainingFailedError -> WorkerGroupError); the user wants the worker's own."""
    seen = set()
    cur: BaseException = e
    while id(cur) not in seen:
        seen.add(id(cur))
        nested = getattr(cur, "worker_failures", None)
        if isinstance(nested, dict) and nested:
            cur = next(iter(nested.values()))
            continue
        if cur.__cause__ is not None:
            cur = cur.__cause__
            continue
        break
    return cur


if __name__ == "__main__":
    sys.exit(main())
