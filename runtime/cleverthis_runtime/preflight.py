"""Pre-flight: what a job would do, computed on the cluster without training (`python -m cleverthis_runtime.preflight`).

Runs as a short Ray job on the head node, where the dataset must be readable, and prints one `preflight`
event: field errors (path + message), the detected dataset format and counts, token-length statistics,
the merged training config, the checkpoint folder and its owner, and the automatic plan with reasons.
`--quick` skips loading the tokenizer and model config (used by create's feasibility check).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pydantic import ValidationError

from . import checkpoints, events
from .backend import backend_for
from .data import DatasetError, default_checkpoint_dir, exists, is_remote, load_dataset, read_training_config
from .spec import JobSpec, TrainingConfig, error_list, merge_training_config, parallelism_problem

#: Records create's quick check reads (its time must not grow with the dataset); the driver checks them all before
#: any worker starts, and the full pre-flight (the form's button, `plan`) checks them all too.
QUICK_RECORDS = 10_000


def preflight(spec: JobSpec, *, quick: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"errors": [], "warnings": []}

    def err(field: str, message: str, where: dict[str, Any] | None = None) -> None:
        out["errors"].append({"field": field, "message": message, **(where or {})})

    tc: TrainingConfig | None = None
    ds = None
    try:
        present = exists(spec.dataset_path)  # a remote URL: read through fsspec with the node's credentials
    except DatasetError as e:
        err("dataset_path", str(e))
        present = None
    if present is False:
        err("dataset_path", f"dataset path {spec.dataset_path} does not exist"
                            + (" (no such object or prefix)" if is_remote(spec.dataset_path)
                               else " on the cluster's head node"))
    elif present:
        try:
            file_cfg, cfg_path = read_training_config(spec.dataset_path)
            out["training_config_file"] = cfg_path
            try:
                tc = merge_training_config(file_cfg, spec.training_config)
            except ValidationError as e:
                for x in error_list(e):
                    err(f"training_config.{x['field']}".rstrip("."), f"{cfg_path or 'training_config'}: {x['message']}")
            ds = load_dataset(spec.dataset_path, tc.columns if tc is not None else None, _progress,
                              limit=QUICK_RECORDS if quick else None)
            out["dataset"] = {"format": ds.format, "formats": ds.formats, "examples": len(ds),
                              "validation_examples": ds.validation_examples or 0, "files": ds.files,
                              "sampled": quick and len(ds) >= QUICK_RECORDS}
        except DatasetError as e:
            err("dataset_path", str(e), e.location())  # a bad line: its path, number and text too
    if tc is not None:
        out["training_config"] = tc.model_dump(mode="json")
        if ds is not None and ds.validation_examples is None and tc.validation_split == 0:
            for field in ("eval_steps", "early_stopping_patience"):
                if getattr(tc, field) is not None:
                    err(f"training_config.{field}", f"{field} needs validation data: set validation_split "
                                                    "(for example 0.1) or add a validation file to the dataset")
        problem = parallelism_problem(tc, framework=spec.framework, workers=spec.workers, job_type=spec.job_type)
        if problem:
            err(f"training_config.{problem[0]}", problem[1])
            tc = None  # no plan for a config that cannot run

    backend = backend_for(spec.framework)
    try:
        backend.check_base_model(spec.base_model)
    except ValueError as e:
        err("base_model", str(e))
    for field, message in backend.refusals(tc) if tc is not None else []:
        err(field, f"{out.get('training_config_file') or 'training_config'}: {message}")

    ckpt = spec.output_dir or default_checkpoint_dir(spec.dataset_path)
    out["checkpoint_dir"] = ckpt
    owner = checkpoints.owner_of(ckpt)
    out["checkpoint_owner"] = owner
    resuming = os.path.isdir(spec.base_model) and checkpoints.read_meta(spec.base_model) is not None
    out["resume_from"] = spec.base_model if resuming else None
    if owner and owner != spec.name and not (resuming and checkpoints.is_inside(spec.base_model, ckpt)):
        err("output_dir", f"checkpoint folder {ckpt} belongs to job '{owner}'; choose another location with "
                          "output_dir, or resume from one of its checkpoints")
    if tc is not None and (quick or ds is not None):
        backend.preflight_facts(spec, tc, ds, out, err, quick=quick)
    return out


def _progress(rows: int, done: int, total: int) -> None:
    """The first read of a large dataset checks every record: say how far it is (the pre-flight's log)."""
    share = f" ({100 * done // total}% of {total / 2**20:.0f} MiB)" if total else ""
    print(f"checked {rows:,} records{share}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    events.set_source("preflight")
    try:
        spec = JobSpec.model_validate_json(os.environ["CLEVERTHIS_SPEC"])
    except (KeyError, ValidationError) as e:
        events.emit("preflight", errors=[{"field": "", "message": f"invalid spec: {e}"}])
        return 1
    events.emit("preflight", **preflight(spec, quick="--quick" in argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
