"""Pre-flight: what a job would do, computed on the cluster without training (`python -m cleverthis_runtime.preflight`).

Runs as a short Ray job on the head node, where the dataset must be readable, and prints one `preflight`
event: field errors (path + message), the detected dataset format and counts, token-length statistics,
the merged training config, the checkpoint folder and its owner, and the automatic plan with reasons.
`--quick` skips loading the tokenizer and model config (used by create's feasibility check).
"""

from __future__ import annotations

import os
import statistics
import sys
from typing import Any

from pydantic import ValidationError

from . import checkpoints, events, lora_targets
from .data import DatasetError, default_checkpoint_dir, exists, is_remote, load_dataset, read_training_config
from .spec import JobSpec, TrainingConfig, error_list, merge_training_config, parallelism_error


def preflight(spec: JobSpec, *, quick: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"errors": [], "warnings": []}

    def err(field: str, message: str) -> None:
        out["errors"].append({"field": field, "message": message})

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
            ds = load_dataset(spec.dataset_path)
            out["dataset"] = {"format": ds.format, "examples": len(ds.records),
                              "validation_examples": len(ds.validation), "files": ds.files}
        except DatasetError as e:
            err("dataset_path", str(e))
    if tc is not None:
        out["training_config"] = tc.model_dump(mode="json")
        if ds is not None and not ds.validation and tc.validation_split == 0:
            for field in ("eval_steps", "early_stopping_patience"):
                if getattr(tc, field) is not None:
                    err(f"training_config.{field}", f"{field} needs validation data: set validation_split "
                                                    "(for example 0.1) or add a validation file to the dataset")
        problem = parallelism_error(tc, framework=spec.framework, workers=spec.workers,
                                    gpus_per_worker=spec.gpus_per_worker)
        if problem:
            field = "tensor_parallel_size" if tc.tensor_parallel_size > 1 else "pipeline_parallel_size"
            err(f"training_config.{field}", problem)
            tc = None  # no plan for a config that cannot run

    if tc is not None and spec.framework == "torch":  # the trackers the Trainer will load, on this node
        import importlib.util

        missing = [t for t in tc.report_to if t != "none" and importlib.util.find_spec(t) is None]
        if missing:
            err("training_config.report_to", f"report_to {', '.join(missing)} needs the {', '.join(missing)} "
                                             "package on the cluster's nodes (pip install "
                                             f"{' '.join('mlflow-skinny' if m == 'mlflow' else m for m in missing)})")
    if spec.framework == "tensorflow":  # a tf-keras model folder; no LoRA/DeepSpeed (tf_train.py)
        from .tf_train import TFModelError, check_base_model, unsupported_config

        try:
            check_base_model(spec.base_model)
        except TFModelError as e:
            err("base_model", str(e))
        for field, message in unsupported_config(tc) if tc is not None else []:
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
    names = tc is not None and isinstance(tc.target_modules, list) and tc.method != "full"
    if quick and tc is not None and (names or tc.packing) and spec.framework == "torch":
        # what depends on the architecture is checked at create too: a meta-device build, no weights read
        try:
            _architecture_checks(tc, lora_targets.meta_model(spec.base_model), out, err, targets=names)
        except Exception as e:  # the model cannot be read here: the full pre-flight and the job say why
            out["warnings"].append(f"model layout not checked: {str(e).splitlines()[0][:200]}")
    if quick or ds is None or tc is None:
        return out
    _model_facts(spec, tc, ds, out, err)
    return out


def _template(tok: Any, tc: TrainingConfig, out: dict[str, Any], err: Any) -> bool:
    """The chat template the job will use (set on `tok`), a warning when it drops the system turn; False (and an
    error naming `chat_template`) when it cannot be used."""
    from .templates import TemplateError, apply, drops_system_turn

    try:
        name, why = apply(tok, tc.chat_template)
    except TemplateError as e:
        err("training_config.chat_template", str(e))
        return False
    out["chat_template"] = {"name": name, "reason": why}
    if drops_system_turn(tok):
        out["warnings"].append(f"the chat template ({name}) drops the system turn: system messages do not reach "
                               "the model")
    return True


def _architecture_checks(tc: TrainingConfig, model: Any, out: dict[str, Any], err: Any, *, targets: bool) -> None:
    """Packing that this architecture cannot isolate, and (when asked) the LoRA target modules."""
    from .methods import packing_refusal

    if tc.packing and (why := packing_refusal(model)):
        err("training_config.packing", why)
    if targets:
        _targets(tc, model, out, err)


def _targets(tc: TrainingConfig, model: Any, out: dict[str, Any], err: Any) -> None:
    """The LoRA target modules this model gets (the runtime's own rule), or an error naming `target_modules`."""
    try:
        targets, why = lora_targets.choose(model, tc.target_modules)
    except lora_targets.TargetModulesError as e:
        err("training_config.target_modules", str(e))
        return
    out["lora_target_modules"] = {"modules": targets, "reason": why}


def _model_facts(spec: JobSpec, tc: TrainingConfig, ds: Any, out: dict[str, Any], err: Any) -> None:
    if spec.framework == "tensorflow":
        from .tf_train import preflight_facts

        return preflight_facts(spec, tc, ds, out, err)
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:  # the head node lacks the ML libraries: say so, keep the rest
        out["warnings"].append(f"model facts unavailable on the head node: {e}")
        return
    from .data import preview, tokenize_all
    from .plan import Device, make_plan

    try:
        tok = AutoTokenizer.from_pretrained(spec.base_model)
        if ds.format != "arrow" and not _template(tok, tc, out, err):
            return
        dropped: list[int] = []
        rows, truncated = tokenize_all(tok, ds.records[:2000], ds.format, tc.max_seq_length, dropped)
        out["preview"] = preview(tok, rows)
        if dropped:
            shown = ", ".join(str(k + 1) for k in dropped[:10]) + (" ..." if len(dropped) > 10 else "")
            out["warnings"].append(f"{len(dropped)} example(s) have no trained token left after truncation to "
                                   f"max_seq_length {tc.max_seq_length} and are skipped: example {shown}")
        lengths = sorted(len(r["input_ids"]) for r in rows) or [0]
        out["token_lengths"] = {
            "sampled": len(lengths), "min": lengths[0], "max": lengths[-1],
            "mean": round(statistics.fmean(lengths), 1), "p50": lengths[len(lengths) // 2],
            "p95": lengths[min(len(lengths) - 1, int(len(lengths) * 0.95))], "truncated": truncated,
        }
        cfg = AutoConfig.from_pretrained(spec.base_model)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        params = float(sum(p.numel() for p in model.parameters()))
    except Exception as e:
        from .triage import classify

        kind, advice = classify(f"{type(e).__name__}: {e}")
        err("base_model", f"cannot load {spec.base_model}: {str(e).splitlines()[0][:300]} ({advice})")
        return
    out["parameters"] = params
    if spec.gpus_per_worker > 0 and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        devices = [Device("cuda", float(p.total_memory), float(f"{p.major}.{p.minor}"))]
    else:
        import psutil

        devices = [Device("cpu", float(psutil.virtual_memory().available))]
    plan = make_plan(params=params, devices=devices, workers=spec.workers, config=tc)
    out["plan"] = plan.as_dict()
    if out.get("chat_template"):
        out["plan"]["chat_template"] = out["chat_template"]["name"]
        out["plan"]["reasons"]["chat_template"] = out["chat_template"]["reason"]
    _architecture_checks(tc, model, out, err, targets=plan.method in ("lora", "qlora"))
    if plan.method in ("lora", "qlora"):
        chosen = out.get("lora_target_modules")
        if chosen:
            shown = chosen["modules"] if isinstance(chosen["modules"], str) else ", ".join(chosen["modules"])
            out["plan"]["lora_target_modules"] = chosen["modules"]
            out["plan"]["reasons"]["lora_target_modules"] = f"{shown}: {chosen['reason']}"


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
