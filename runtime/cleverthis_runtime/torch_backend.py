"""`framework: torch`, the driver's side: the pre-flight's model facts (token lengths, a preview, the plan,
the LoRA targets, read from the tokenizer and a meta-device build: no weights), what the training config asks
of the node, and the driver that starts Ray Train's TorchTrainer. The workers' loop is train.py.
"""

from __future__ import annotations

import importlib.util
import statistics
from typing import Any

from . import layout_cache, lora_targets
from .spec import JobSpec, TrainingConfig


class TorchBackend:
    framework = "torch"
    environment = None  # the cluster's own Python
    env_vars: dict[str, str] = {}

    def check_base_model(self, path: str) -> None:
        """A Hub id or a local folder: transformers reads it (the pre-flight's model facts say what fails)."""

    def refusals(self, tc: TrainingConfig) -> list[tuple[str, str]]:
        """The trackers the Trainer will load must be importable on this node."""
        missing = [t for t in tc.report_to if t != "none" and importlib.util.find_spec(t) is None]
        if not missing:
            return []
        return [("training_config.report_to",
                 f"report_to {', '.join(missing)} needs the {', '.join(missing)} package on the cluster's nodes "
                 f"(pip install {' '.join('mlflow-skinny' if m == 'mlflow' else m for m in missing)})")]

    def preflight_facts(self, spec: JobSpec, tc: TrainingConfig, ds: Any, out: dict[str, Any], err: Any, *,
                        quick: bool = False) -> None:
        if quick:
            names = isinstance(tc.target_modules, list) and tc.method != "full"
            if names or tc.packing or tc.model_parallel_size > 1:
                # what depends on the architecture is checked at create too: a meta-device build, no weights read,
                # whose answer is kept per model config (layout_cache)
                fields = {f: getattr(tc, f) for f in layout_cache.FIELDS} | {"targets": names}
                try:
                    answer = layout_cache.remembered(spec.base_model, fields, lambda: _layout_answer(spec, tc, names))
                except Exception as e:  # the model cannot be read here: the full pre-flight and the job say why
                    out["warnings"].append(f"model layout not checked: {str(e).splitlines()[0][:200]}")
                    return
                for field, message in answer["errors"]:
                    err(field, message)
                if answer.get("lora_target_modules") is not None:
                    out["lora_target_modules"] = answer["lora_target_modules"]
            return
        if ds is not None:
            _model_facts(spec, tc, ds, out, err)

    def fit(self, spec: JobSpec, job: str, loop_config: dict[str, Any], sweep: Any = None) -> None:
        """The driver: a TorchTrainer whose workers run train.train_loop (the rendezvous store on the node's
        address only: compat.torch_config); a sweep's trial passes its hooks (sweep.TrialHooks)."""
        from ray.train.torch import TorchTrainer

        from . import compat
        from .control import drive

        drive(TorchTrainer, train_loop, spec, job, loop_config,
              TrainingConfig.model_validate(loop_config["training_config"]),
              trainer_kwargs={"torch_config": compat.torch_config()}, sweep=sweep)


def train_loop(config: dict[str, Any]) -> None:
    """Ray Train's train_loop_per_worker (train.train_loop). Ray pickles it by reference, so the driver never
    imports the training module (transformers, peft, datasets: ~2.5 s of CPU); each worker does."""
    from .train import train_loop as loop

    loop(config)


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


def _layout_answer(spec: JobSpec, tc: TrainingConfig, targets: bool) -> dict[str, Any]:
    """The architecture checks on the meta-device model, as JSON: the errors (field, message) and the LoRA
    target modules."""
    errors: list[list[str]] = []
    found: dict[str, Any] = {}
    _architecture_checks(tc, lora_targets.meta_model(spec.base_model), found,
                         lambda field, message: errors.append([field, message]), targets=targets)
    return {"errors": errors, "lora_target_modules": found.get("lora_target_modules")}


def _architecture_checks(tc: TrainingConfig, model: Any, out: dict[str, Any], err: Any, *, targets: bool) -> None:
    """Packing that this architecture cannot isolate, tensor parallelism it cannot take, and (when asked) the LoRA
    target modules."""
    from .methods import packing_refusal
    from .parallel import refusal

    if tc.packing and (why := packing_refusal(model)):
        err("training_config.packing", why)
    if tp_problem := refusal(tc, model.config, tc.method):
        err(*tp_problem)
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
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:  # the head node lacks the ML libraries: say so, keep the rest
        out["warnings"].append(f"model facts unavailable on the head node: {e}")
        return
    from .data import preview, tokenize_all
    from .plan import Device, make_plan, start_of

    try:
        tok = AutoTokenizer.from_pretrained(spec.base_model)
        if ds.kind == "conversation" and not _template(tok, tc, out, err):
            return
        dropped: list[int] = []
        rows, truncated = tokenize_all(tok, ds.head(2000), None, tc.max_seq_length, dropped)
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
        from .triage import classify_exception

        kind, advice = classify_exception(e)
        err("base_model", f"cannot load {spec.base_model}: {str(e).splitlines()[0][:300]} ({advice})")
        return
    out["parameters"] = params
    if spec.gpus_per_worker > 0 and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        devices = [Device("cuda", float(p.total_memory), float(f"{p.major}.{p.minor}"))]
    else:
        import psutil

        devices = [Device("cpu", float(psutil.virtual_memory().available))]
    from .methods import attention, packing_refusal

    plan = make_plan(params=params, devices=devices, workers=spec.workers, config=tc,
                     attention=attention(model, devices), packing_refusal=packing_refusal(model),
                     raw_text=ds.kind == "text")
    out["plan"] = plan.as_dict()
    out["plan"]["start"], out["plan"]["reasons"]["start"] = start_of(spec, out.get("resume_from"))
    if plan.parallelism is not None:
        from .parallel import layout

        out["plan"]["parallelism"] = layout(tc, spec.workers, cfg)
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
