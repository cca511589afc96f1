"""The per-worker training loop (Ray Train `train_loop_per_worker`): transformers Trainer + peft.

Per-step metrics travel as structured events printed by rank 0 (not `ray.train.report`, which is a
throttled barrier); checkpoints are written by rank 0 at each epoch end in the page's layout, and at the
exact step when the job is cancelled mid-epoch.

Exact resume. A checkpoint holds, beside the weights, `training_state/`: the transformers Trainer's own
resume files (optimizer, LR scheduler, the RNG state of every rank, `trainer_state.json` with the global
step and epoch). Resuming loads the ORIGINAL base model plus the trainable adapter (LoRA) or the full
weights, then hands `training_state/` to `Trainer.train(resume_from_checkpoint=...)`, which restores the
optimizer, scheduler, step and RNG and skips the batches already seen (the data order is seeded per epoch),
so 1 epoch + resume 1 epoch equals 2 epochs straight. The total number of epochs is the starting
checkpoint's completed epochs plus the job's `epochs` (after a worker failure, the restarted workers keep
that plan and continue from the job's newest checkpoint). When the effective batch (batch size x workers x accumulation) or
the number of examples differ from the checkpoint's, the position cannot carry over: the job warm-starts
from the weights (and says so in a `warning` event).
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from . import checkpoints, events, lora_targets, methods, strategies, templates
from .control import PeerCheckpointError, WorkerControl, worker_entry
from .data import load_dataset, tokenized
from .plan import Device, PlanError, make_plan
from .spec import JobSpec, TrainingConfig, parallelism_error

log = logging.getLogger(__name__)


# Tests only: slow each step down (numerics unchanged) so that a cancel or a kill lands mid-epoch.
STEP_DELAY_S = float(os.environ.get("CLEVERTHIS_TEST_STEP_DELAY_S") or 0)


def _devices(torch: Any) -> list[Device]:
    if torch.cuda.is_available():
        out = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out.append(Device("cuda", float(p.total_memory), float(f"{p.major}.{p.minor}")))
        return out
    import psutil

    return [Device("cpu", float(psutil.virtual_memory().available))]


def train_loop(config: dict[str, Any]) -> None:
    """Ray Train's `train_loop_per_worker`."""
    worker_entry(config, run)


def run(config: dict[str, Any], *, rank: int = 0, world: int = 1, control: WorkerControl | None = None,
        attempt: int = 1) -> dict[str, Any]:
    """One worker's training (callable without Ray: world 1, no actor). Returns a summary for tests."""
    import torch
    from transformers import DataCollatorForSeq2Seq, TrainingArguments, set_seed

    control = control or WorkerControl(None, rank)
    spec = JobSpec.model_validate(config["spec"])
    tc = TrainingConfig.model_validate(config["training_config"])
    ckpt_root: str = config["checkpoint_dir"]
    job: str = config["job"]
    is_main = rank == 0

    def emit(type_: str, **kw: Any) -> dict[str, Any] | None:
        return events.emit(type_, **kw) if is_main else None

    problem = parallelism_error(tc, framework=spec.framework, workers=world, gpus_per_worker=spec.gpus_per_worker,
                                cuda_available=torch.cuda.is_available())
    if problem:  # before any data or model is loaded (training_config.json may have set them)
        raise PlanError(f"training_config: {problem}")
    torch.set_num_threads(max(1, int(spec.cpus_per_worker)))
    set_seed(tc.seed)
    if is_main:
        control.start_polling()

    source: str | None = config.get("resume_from")
    if attempt > 1:
        source = _recovery_source(ckpt_root, job, source, rank, world, torch, emit, attempt, tc.max_failures)
    meta = checkpoints.read_meta(source) if source else None
    orig_base = config.get("original_base_model") or (
        checkpoints.original_base(spec.base_model) if meta else spec.base_model)

    emit("phase", phase="loading_data")
    ds = load_dataset(spec.dataset_path)
    from .download import cached_snapshot, ensure_model, is_hub_id

    base_path = None
    if source is None:
        # The base must be on this node: a local path, the cache, or a download (with progress events).
        base_path = ensure_model(orig_base, emit)
    elif (meta or {}).get("adapter"):
        # A LoRA resume uses the original base when this node has it, and never downloads it: otherwise the
        # base is recovered from the checkpoint's merged weights.
        base_path = cached_snapshot(orig_base) if is_hub_id(orig_base) else orig_base
    tok_path = source if source and os.path.exists(os.path.join(source, "tokenizer_config.json")) else base_path
    emit("phase", phase="loading_model", model=source or orig_base, base_model=orig_base)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tok_path or source)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    try:
        template = templates.apply(tokenizer, tc.chat_template)  # saved with the tokenizer in each checkpoint
    except templates.TemplateError as e:
        raise PlanError(f"training_config.chat_template: {e}") from e
    train_rows, val_rows, truncated = tokenized(tokenizer, ds, tc.max_seq_length, rank=rank)
    if not val_rows and tc.validation_split > 0:
        n_val = max(1, int(len(train_rows) * tc.validation_split))
        val_rows, train_rows = train_rows[:n_val], train_rows[n_val:]
    emit("dataset", format=ds.format, examples=len(train_rows), validation_examples=len(val_rows),
         truncated=truncated, max_seq_length=tc.max_seq_length)
    if tc.packing:  # several examples per row; position_ids keep them apart (methods.py)
        train_rows, val_rows = methods.pack(train_rows, val_rows, tc.max_seq_length)
        emit("packing", rows=len(train_rows), validation_rows=len(val_rows), max_seq_length=tc.max_seq_length)

    total_batch = spec.batch_size * world * tc.gradient_accumulation_steps
    resume = _resume_mode(source, meta, total_batch, len(train_rows), emit)
    if meta and meta.get("method"):  # the checkpoint decides the method (an adapter stays an adapter)
        method = meta["method"] if meta["method"] in ("lora", "qlora") and meta.get("adapter") \
            else ("lora" if meta.get("adapter") else "full")
        tc = tc.model_copy(update={"method": method})

    model, base_how = _load_model(spec, tc, source, meta, orig_base, base_path, torch)
    if tc.packing:  # the block-diagonal mask from position_ids needs no cache
        refusal = methods.packing_refusal(model)
        if refusal:
            raise PlanError(f"training_config: {refusal}")
        model.config.use_cache = False
    params = float(sum(p.numel() for p in model.parameters()))
    plan = make_plan(params=params, devices=_devices(torch), workers=world, config=tc)
    plan_event = plan.as_dict()
    plan_event["chat_template"] = template[0]
    plan_event["reasons"] = {**plan_event["reasons"], "chat_template": template[1]}
    if source is None and plan.method in ("lora", "qlora"):
        targets, why = lora_targets.choose(model, tc.target_modules)
        shown = targets if isinstance(targets, str) else ", ".join(targets)
        plan_event["lora_target_modules"] = targets
        plan_event["reasons"] = {**plan_event["reasons"], "lora_target_modules": f"{shown}: {why}"}
    emit("plan", **plan_event, parameters=params)
    if resume == "exact" and (plan.strategy.startswith("deepspeed") or (plan.strategy == "fsdp" and world > 1)):
        # The resume state holds rank 0's optimizer as DDP has it; sharded optimizers are not restored yet.
        resume = "weights"
        emit("warning", checkpoint=source, message=f"resuming from the weights only: the {plan.strategy} "
             "strategy shards the optimizer state, which the checkpoint does not restore (exact resume: ddp)")
    if source is None and plan.method in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(
            r=tc.lora_r, lora_alpha=tc.effective_lora_alpha, lora_dropout=tc.lora_dropout,
            target_modules=plan_event["lora_target_modules"], task_type="CAUSAL_LM",
        ))
    completed = int(meta.get("epoch", 0)) if meta else 0
    if source:
        emit("resume", checkpoint=source, exact=resume == "exact", completed_epochs=completed,
             global_step=(meta or {}).get("global_step"), partial=bool((meta or {}).get("partial")),
             base_model=orig_base, base_loaded=base_how)

    use_gpu = spec.gpus_per_worker > 0 and torch.cuda.is_available()
    # The job's plan: the epochs completed at its starting checkpoint plus its `epochs` (a recovery keeps it).
    start_epoch = config.get("start_epoch")
    if start_epoch is None:
        first = checkpoints.read_meta(config["resume_from"]) if config.get("resume_from") else None
        start_epoch = int((first or {}).get("epoch", 0))
    planned = int(start_epoch) + spec.epochs
    total_epochs = planned if resume == "exact" else max(1, planned - completed)
    workdir = tempfile.mkdtemp(prefix=f"cleverthis-{job}-")
    ds_config = strategies.setup_deepspeed(tc)  # before TrainingArguments (ZeRO-3 needs it)
    if "tensorboard" in tc.report_to:  # the record outlives the cluster: beside the checkpoints
        os.environ["TENSORBOARD_LOGGING_DIR"] = os.path.join(ckpt_root, "runs", job)
    args = TrainingArguments(
        output_dir=workdir,
        per_device_train_batch_size=spec.batch_size,
        per_device_eval_batch_size=spec.batch_size,
        num_train_epochs=total_epochs,
        learning_rate=tc.learning_rate,
        lr_scheduler_type=tc.lr_scheduler,
        warmup_steps=tc.warmup_ratio,  # a float < 1 is a ratio of the total steps in transformers 5
        weight_decay=tc.weight_decay,
        max_grad_norm=tc.max_grad_norm,
        gradient_accumulation_steps=tc.gradient_accumulation_steps,
        gradient_checkpointing=plan.gradient_checkpointing,
        bf16=plan.precision == "bf16",
        fp16=plan.precision == "fp16",
        logging_steps=tc.logging_steps,
        save_strategy="no",
        eval_strategy="epoch" if val_rows else "no",
        report_to="none" if tc.report_to == ["none"] else list(tc.report_to),
        run_name=job,
        seed=tc.seed,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        use_cpu=not use_gpu,
        disable_tqdm=True,
        include_num_input_tokens_seen="non_padding",
        ddp_find_unused_parameters=False,
        **({"deepspeed": ds_config} if ds_config else {}),
    )

    from datasets import Dataset as HFDataset

    if plan.strategy == "fsdp" and world > 1:  # FSDP2 before the optimizer is built (strategies.py)
        model = strategies.shard_fsdp2(model, world)
    exact = resume == "exact"
    callback = _EventsAndCheckpoints(
        emit=emit, rank=rank, world=world, tokenizer=tokenizer, ckpt_root=ckpt_root, job=job,
        epoch_offset=0 if exact or not meta else completed,
        step_offset=0 if exact or not meta else int(meta.get("global_step", 0)),
        meta={"job": job, "method": plan.method, "base_model": orig_base, "resumed_from": source,
              "total_batch": total_batch, "world_size": world, "examples": len(train_rows), "seed": tc.seed,
              "planned_epochs": planned},
        control=control, torch=torch,
        eval_steps=tc.eval_steps if val_rows else None,
        patience=Patience(tc.early_stopping_patience if val_rows else None, tc.early_stopping_threshold),
    )
    trainer = _trainer_class()(
        model=model,
        args=args,
        train_dataset=HFDataset.from_list(train_rows),
        eval_dataset=HFDataset.from_list(val_rows) if val_rows else None,
        data_collator=methods.packed_collator(tokenizer) if tc.packing
        else DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100),
        callbacks=[callback],
    )
    callback.trainer = trainer
    if plan.strategy == "fsdp" and world > 1:
        strategies.keep_sharded(trainer)
    if methods.is_quantized(tc):
        callback.merge_base = base_path or orig_base
    state_dir = os.path.join(source, checkpoints.STATE_DIR) if exact and source else None
    trainer.train(resume_from_checkpoint=state_dir)

    # epoch-final and best were pointed by the callback as their checkpoints were written (before any
    # cancel acknowledgement lets the driver exit).
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    if is_main:
        control.set_phase("done")
    emit("phase", phase="cancel_checkpoint_written" if callback.stopped else "training_done")
    return {"stopped": callback.stopped, "last_checkpoint": callback.last_path, "resume": resume,
            "global_step": trainer.state.global_step, "stopped_early": callback.stopped_early}


def _trainer_class() -> Any:
    from transformers import Trainer

    class _Trainer(Trainer):
        """The weights were loaded before (base + trainable adapter, or the full weights); a resume only
        restores optimizer, scheduler, RNG, step and data position from `training_state/`."""

        def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
            return None

    return _Trainer


def _recovery_source(ckpt_root: str, job: str, original: str | None, rank: int, world: int, torch: Any,
                     emit: Any, attempt: int, max_failures: int) -> str | None:
    """After a worker failure: continue from the newest checkpoint this job wrote (else from its start)."""
    choice = None
    if rank == 0:
        removed = checkpoints.cleanup_stale(ckpt_root)
        latest = checkpoints.latest_of_job(ckpt_root, job)
        choice = latest["path"] if latest else original
        emit("recovery", attempt=attempt, max_failures=max_failures, checkpoint=choice,
             checkpoint_name=os.path.basename(choice) if choice else None,
             global_step=(latest or {}).get("global_step", 0), removed_partial_writes=removed,
             message=(f"a worker failed; the workers restarted (attempt {attempt}) and continue from "
                      f"{os.path.basename(choice) if latest else (choice or 'the start')}"))
    dist = torch.distributed
    if world > 1 and dist.is_initialized():
        box = [choice]
        dist.broadcast_object_list(box, src=0)
        choice = box[0]
    return choice


def _resume_mode(source: str | None, meta: dict[str, Any] | None, total_batch: int, examples: int,
                 emit: Any) -> str | None:
    if not source or meta is None:
        return None
    state = os.path.join(source, checkpoints.STATE_DIR, "trainer_state.json")
    reasons = []
    if not os.path.exists(state):
        reasons.append("the checkpoint has no training state (written by an older runtime)")
    if meta.get("total_batch") not in (None, total_batch):
        reasons.append(f"the effective batch changed ({meta.get('total_batch')} -> {total_batch}: batch size x "
                       "workers x gradient accumulation)")
    if meta.get("examples") not in (None, examples):
        reasons.append(f"the number of training examples changed ({meta.get('examples')} -> {examples})")
    if meta.get("total_batch") is None and os.path.exists(state):
        reasons.append("the checkpoint does not record its effective batch")
    if reasons:
        emit("warning", message="resuming from the weights only, without the optimizer state and the data "
                                "position: " + "; ".join(reasons), checkpoint=source)
        return "weights"
    return "exact"


def _load_model(spec: JobSpec, tc: TrainingConfig, source: str | None, meta: dict[str, Any] | None,
                orig_base: str, base_path: str | None, torch: Any) -> tuple[Any, str | None]:
    from transformers import AutoConfig, AutoModelForCausalLM

    if source is None:
        if spec.job_type == "train":
            return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(base_path or orig_base)), None
        if methods.is_quantized(tc):  # QLoRA: a 4/8-bit frozen base (LoRA is added by the caller)
            return methods.load_quantized(base_path or orig_base, tc, torch,
                                          gradient_checkpointing=bool(tc.gradient_checkpointing)), None
        return AutoModelForCausalLM.from_pretrained(base_path or orig_base, dtype=torch.float32), None
    if not (meta or {}).get("adapter"):
        return AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32), None
    from peft import PeftModel

    adapter = os.path.join(source, checkpoints.ADAPTER_DIR)
    if base_path and os.path.exists(os.path.join(base_path, "config.json")):
        if methods.is_quantized(tc):  # QLoRA: the same 4/8-bit frozen base as the first run
            base = methods.load_quantized(base_path, tc, torch, gradient_checkpointing=bool(tc.gradient_checkpointing))
        else:
            base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
        return PeftModel.from_pretrained(base, adapter, is_trainable=True), "original"
    # The original base is not on this node (and may not be downloaded): the checkpoint's merged weights
    # minus the adapter's delta are the base again (peft's unmerge).
    from peft.tuners.lora import LoraLayer

    merged = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    model = PeftModel.from_pretrained(merged, adapter, is_trainable=True)
    for module in model.modules():
        if isinstance(module, LoraLayer):
            module.merged_adapters = list(module.active_adapters)
            module.unmerge()
    return model, "unmerged_from_checkpoint"


def _rng_state(torch: Any) -> dict[str, Any]:
    """The transformers Trainer's RNG file format (`rng_state.pth`)."""
    import random

    import numpy as np

    st: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(),
                          "cpu": torch.random.get_rng_state()}
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.random.get_rng_state_all() if torch.distributed.is_initialized() \
            else torch.cuda.random.get_rng_state()
    return st


def _set_rng_state(torch: Any, st: dict[str, Any] | None) -> None:
    import random

    import numpy as np

    if not st:
        return
    random.setstate(st["python"])
    np.random.set_state(st["numpy"])
    torch.random.set_rng_state(st["cpu"])
    if "cuda" in st and torch.cuda.is_available():
        if isinstance(st["cuda"], list | tuple):
            torch.cuda.random.set_rng_state_all(st["cuda"])
        else:
            torch.cuda.random.set_rng_state(st["cuda"])


class RayMetrics:
    """The main figures as Ray metrics (`ray.util.metrics` gauges tagged with the job name), so the Ray
    dashboard's metrics view and the nodes' Prometheus export show them: `ray_cleverthis_train_loss`,
    `..._learning_rate`, `..._tokens_per_s`, `..._step`, `..._epoch`. Set by rank 0 at most once per
    `interval_s` (an epoch end forces it); never lets a metrics failure reach training."""

    FIGURES = {
        "loss": "Training loss (latest logged step)",
        "learning_rate": "Learning rate",
        "tokens_per_s": "Training throughput in (non-padding) tokens per second",
        "step": "Global optimizer step",
        "epoch": "Epoch progress (fractional)",
    }

    def __init__(self, job: str, interval_s: float = 1.0) -> None:
        self.job, self.interval_s = job, interval_s
        self.gauges: dict[str, Any] | None = None
        self.last = float("-inf")
        self.failed = False

    def _make(self) -> dict[str, Any]:
        from ray.util.metrics import Gauge

        return {k: Gauge(f"cleverthis_train_{k}", description=d, tag_keys=("job",)) for k, d in self.FIGURES.items()}

    def publish(self, *, force: bool = False, now: float | None = None, **values: float | None) -> bool:
        now = time.monotonic() if now is None else now
        if self.failed or (not force and now - self.last < self.interval_s):
            return False
        try:
            if self.gauges is None:
                import ray

                if not ray.is_initialized():  # run() outside Ray (tests): nothing to export to
                    self.failed = True
                    return False
                self.gauges = self._make()
            for key, value in values.items():
                if value is not None and key in self.gauges:
                    self.gauges[key].set(float(value), tags={"job": self.job})
        except Exception as e:  # noqa: BLE001 - metrics are best effort
            self.failed = True
            log.warning("Ray metrics disabled: %s", e)
            return False
        self.last = now
        return True


class Utilisation:
    """Per-worker `utilisation` events (every worker, not only rank 0): CPU % and RSS of the worker process
    (psutil), and on CUDA the GPU's utilisation and memory through NVML (pynvml, when installed) or torch."""

    def __init__(self, rank: int, torch: Any, interval_s: float = 10.0) -> None:
        import psutil

        self.rank, self.torch, self.interval_s = rank, torch, interval_s
        self.proc = psutil.Process()
        self.proc.cpu_percent(None)  # the first call only starts the measurement
        self.last = time.monotonic()
        self.nvml: Any = None
        if torch.cuda.is_available():
            try:
                import pynvml

                pynvml.nvmlInit()
                self.nvml = pynvml
            except Exception:  # noqa: BLE001 - no NVML: torch's own figures only
                self.nvml = None

    def maybe_emit(self, *, force: bool = False, **extra: Any) -> dict[str, Any] | None:
        now = time.monotonic()
        if not force and now - self.last < self.interval_s:
            return None
        self.last = now
        return events.emit("utilisation", **self.sample(), **extra)

    def sample(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rank": self.rank, "hostname": socket.gethostname(), "pid": os.getpid()}
        try:
            out["cpu_percent"] = round(self.proc.cpu_percent(None), 1)
            out["rss_bytes"] = int(self.proc.memory_info().rss)
        except Exception:  # noqa: BLE001
            pass
        torch = self.torch
        if torch.cuda.is_available():
            try:
                dev = torch.cuda.current_device()
                out["gpu_index"] = dev
                out["gpu_memory_allocated_bytes"] = int(torch.cuda.memory_allocated(dev))
                free, total = torch.cuda.mem_get_info(dev)
                out["gpu_memory_used_bytes"], out["gpu_memory_total_bytes"] = int(total - free), int(total)
                if self.nvml is not None:
                    handle = self._nvml_handle(dev)
                    out["gpu_util_percent"] = float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                    mem = self.nvml.nvmlDeviceGetMemoryInfo(handle)
                    out["gpu_memory_used_bytes"], out["gpu_memory_total_bytes"] = int(mem.used), int(mem.total)
            except Exception as e:  # noqa: BLE001 - a figure missing is better than a failed job
                out["gpu_error"] = f"{type(e).__name__}: {e}"[:200]
        return out

    def _nvml_handle(self, dev: int) -> Any:
        """NVML counts physical GPUs; CUDA counts the visible ones (CUDA_VISIBLE_DEVICES, set by Ray)."""
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        if dev < len(visible):
            v = visible[dev]
            if v.startswith(("GPU-", "MIG-")):
                return self.nvml.nvmlDeviceGetHandleByUUID(v)
            if v.isdigit():
                return self.nvml.nvmlDeviceGetHandleByIndex(int(v))
        return self.nvml.nvmlDeviceGetHandleByIndex(dev)


def _perplexity(loss: float) -> float | None:
    import math

    return round(math.exp(loss), 4) if loss < 50 else None  # beyond that it says nothing but "diverged"


def tracking_locations(report_to: list[str] | str) -> dict[str, Any]:
    """Where this run's records went, read from the trackers the Trainer set up (rank 0, at train begin)."""
    out: dict[str, Any] = {}
    targets = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if "tensorboard" in targets:
        out["tensorboard"] = {"log_dir": os.environ.get("TENSORBOARD_LOGGING_DIR")}
    if "mlflow" in targets:
        import mlflow

        run = mlflow.active_run()
        uri = mlflow.get_tracking_uri()
        if run is not None:
            url = f"{uri.rstrip('/')}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}" \
                if uri.startswith(("http://", "https://")) else None
            out["mlflow"] = {"run_id": run.info.run_id, "experiment_id": run.info.experiment_id,
                             "tracking_uri": uri, "url": url}
    if "wandb" in targets:
        import wandb

        if wandb.run is not None:
            out["wandb"] = {"run_id": wandb.run.id, "dir": wandb.run.dir, "url": wandb.run.url,
                            "mode": os.environ.get("WANDB_MODE", "online")}
    return out


class Patience:
    """Early stopping's count (`early_stopping_patience`, `early_stopping_threshold`): validations in a row whose
    loss is not below the best so far by more than the threshold. transformers' EarlyStoppingCallback needs the
    Trainer to save and reload the best model itself (`load_best_model_at_end`), which our checkpoints do."""

    def __init__(self, patience: int | None, threshold: float = 0.0) -> None:
        self.patience, self.threshold = patience, threshold
        self.best: float | None = None  # what a validation must beat (by more than the threshold)
        self.best_step: int | None = None
        self.lowest: float | None = None  # the lowest validation loss seen (what `best` points at)
        self.lowest_step: int | None = None
        self.bad = 0

    def update(self, loss: float, step: int) -> bool:
        """Count one validation; True when the job should stop."""
        if self.lowest is None or loss < self.lowest:
            self.lowest, self.lowest_step = loss, step
        if self.best is None or loss < self.best - self.threshold:
            self.best, self.best_step, self.bad = loss, step, 0
        else:
            self.bad += 1
        return self.patience is not None and self.bad >= self.patience

    def reason(self) -> str:
        by = f" by more than {self.threshold:g}" if self.threshold else ""
        return (f"stopped early: the validation loss did not improve{by} in {self.bad} validation"
                f"{'s' if self.bad != 1 else ''} in a row (lowest {self.lowest:.4f}, at step {self.lowest_step})")


def _at_epoch_end(state: Any) -> bool:
    epoch = float(state.epoch or 0)
    return abs(epoch - round(epoch)) < 1e-6


class _EventsAndCheckpoints(TrainerCallback):
    """A TrainerCallback emitting step/epoch events, writing epoch checkpoints and the cancel checkpoint."""

    def __init__(self, *, emit: Any, rank: int, world: int, tokenizer: Any, ckpt_root: str, job: str,
                 epoch_offset: int, step_offset: int, meta: dict[str, Any], control: WorkerControl,
                 torch: Any, eval_steps: int | None = None, patience: Patience | None = None) -> None:
        self.emit, self.rank, self.world, self.tokenizer = emit, rank, world, tokenizer
        self.ckpt_root, self.job, self.meta, self.torch = ckpt_root, job, meta, torch
        self.epoch_offset, self.step_offset, self.control = epoch_offset, step_offset, control
        self.trainer: Any = None
        self.merge_base: str | None = None  # QLoRA: merge into this base loaded in fp32 (methods.py)
        self.t0 = time.time()
        self.last_t, self.last_tokens, self.last_step = self.t0, 0, 0
        self.first_step: int | None = None
        self.last_epoch_dir: str | None = None
        self.last_path: str | None = None
        self.last_epoch = 0
        self.last_loss: float | None = None
        self.eval_loss: float | None = None
        self.best: tuple[float, str] | None = checkpoints.existing_best(ckpt_root)
        self.stop_pending = False
        self.stopped = False
        self.eval_steps = eval_steps
        self.patience = patience or Patience(None)
        self.stopped_early = False
        self.metrics = RayMetrics(job) if rank == 0 else None
        self.utilisation = Utilisation(rank, torch)

    # -- events ---------------------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.t0 = self.last_t = time.time()
        self.first_step = state.global_step
        self.last_tokens = int(state.num_input_tokens_seen or 0)
        self.last_epoch = self.epoch_offset + int(float(state.epoch or 0) + 1e-6)
        if self.rank == 0:
            self.control.set_phase("training")
            self.emit("strategy", **strategies.describe(self.trainer))
            self.emit("tracking", **tracking_locations(args.report_to))
        self.emit("phase", phase="running", total_steps=self.step_offset + state.max_steps,
                  epochs=self.epoch_offset + args.num_train_epochs, start_epoch=self.last_epoch,
                  start_step=self.step_offset + state.global_step)
        self.utilisation.last = time.monotonic()  # the first sample ~10 s in (CPU % over that span)

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        # The Trainer's W&B integration leaves its run open (it would end at interpreter exit, which a Ray worker
        # may not reach cleanly): finish it, so the run folder holds its summary. MLflow's ends its own run.
        targets = [args.report_to] if isinstance(args.report_to, str) else list(args.report_to or [])
        if self.rank == 0 and "wandb" in targets:
            import wandb

            if wandb.run is not None:
                wandb.finish()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
        logs = logs or {}
        now = time.time()
        if "eval_loss" in logs:
            self.eval_loss = float(logs["eval_loss"])
            return
        if "loss" not in logs:
            return
        tokens = int(state.num_input_tokens_seen or 0)
        dt = max(now - self.last_t, 1e-9)
        tps = (tokens - self.last_tokens) / dt if tokens else None
        done_here = max(state.global_step - (self.first_step or 0), 1)
        rate = (now - self.t0) / done_here
        self.last_loss = float(logs["loss"])
        self.emit(
            "step",
            step=self.step_offset + state.global_step,
            total_steps=self.step_offset + state.max_steps,
            epoch=self.epoch_offset + float(state.epoch or 0),
            loss=self.last_loss,
            learning_rate=float(logs.get("learning_rate", 0.0)),
            grad_norm=float(logs["grad_norm"]) if logs.get("grad_norm") is not None else None,
            tokens_per_s=round(tps, 1) if tps is not None else None,
            eta_s=round(rate * (state.max_steps - state.global_step), 1),
        )
        if self.metrics is not None:
            self.metrics.publish(loss=self.last_loss, learning_rate=float(logs.get("learning_rate", 0.0)),
                                 tokens_per_s=tps, step=self.step_offset + state.global_step,
                                 epoch=self.epoch_offset + float(state.epoch or 0))
        self.last_t, self.last_tokens, self.last_step = now, tokens, state.global_step

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if STEP_DELAY_S:
            time.sleep(STEP_DELAY_S)
        self.utilisation.maybe_emit(step=self.step_offset + state.global_step)
        if self.eval_steps and state.global_step % self.eval_steps == 0 and not _at_epoch_end(state):
            control.should_evaluate = True  # an epoch's end validates anyway (eval_strategy "epoch")
        if self.stopped or not self._stop_agreed():
            return
        if _at_epoch_end(state):
            self.stop_pending = True  # the epoch's own checkpoint (written next) is the cancel checkpoint
            return
        path, ev = self._checkpoint(state, partial=True)
        self._finish_stop(control, path, ev)

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, Any] | None = None,
                    **kw: Any) -> None:
        if self.stopped:
            return
        if not metrics or "eval_loss" not in metrics:
            return
        self.eval_loss = float(metrics["eval_loss"])
        at_end, step = _at_epoch_end(state), self.step_offset + state.global_step
        epoch = round(state.epoch or 0) if at_end else round(float(state.epoch or 0), 4)
        self.emit("validation", epoch=self.epoch_offset + epoch, eval_loss=self.eval_loss,
                  perplexity=_perplexity(self.eval_loss), step=step)
        # (the job's last validation ends it anyway: no "stopped early" there)
        lowest = self.patience.lowest is None or self.eval_loss < self.patience.lowest
        stop = self.patience.update(self.eval_loss, step) and state.global_step < state.max_steps
        if at_end:
            self._maybe_save(state, control)
        elif stop or lowest:
            # between epochs (eval_steps): a checkpoint when this is the lowest loss of the run (`best` may point
            # at it) or where the job stops early. Decided on what every rank sees alike (the validation loss is
            # averaged over the ranks; the Patience is the same on every rank): writing a checkpoint is collective.
            self._checkpoint(state, partial=True, evaluated=True)
        if stop:
            self._stop_early(state, control)

    def _stop_early(self, state: Any, control: Any) -> None:
        self.stopped_early = True
        control.should_training_stop = True
        if self.rank == 0 and self.last_path:
            checkpoints.link_final(self.ckpt_root, os.path.basename(self.last_path), self.last_path,
                                   epoch=self.epoch_offset + int(float(state.epoch or 0) + 1e-6), emit=self.emit)
        self.emit("early_stop", reason=self.patience.reason(), step=self.step_offset + state.global_step,
                  epoch=round(self.epoch_offset + float(state.epoch or 0), 4), best_eval_loss=self.patience.lowest,
                  best_step=self.patience.lowest_step, checkpoint=self.last_path)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.stopped or self.stopped_early:  # a stop breaks the epoch's loop: no epoch checkpoint, no evaluation
            control.should_evaluate = False
            return
        epoch = self.epoch_offset + round(state.epoch or 0)
        self.emit("epoch", epoch=epoch, step=self.step_offset + state.global_step, train_loss=self.last_loss,
                  elapsed_s=round(time.time() - self.t0, 2))
        self.utilisation.maybe_emit(force=True, step=self.step_offset + state.global_step, epoch=epoch)
        if self.metrics is not None:
            self.metrics.publish(force=True, loss=self.last_loss, step=self.step_offset + state.global_step,
                                 epoch=self.epoch_offset + float(state.epoch or 0))
        if args.eval_strategy == "no" or str(args.eval_strategy) == "IntervalStrategy.NO":
            self._maybe_save(state, control)
        # With validation, Trainer evaluates after on_epoch_end; the checkpoint waits for eval_loss.

    # -- stop -----------------------------------------------------------------------------------------------
    def _stop_agreed(self) -> bool:
        """Rank 0's view of the stop flag, the same on every rank (one tiny broadcast per step)."""
        flag = self.control.stop_requested() if self.rank == 0 else False
        dist = self.torch.distributed
        if self.world > 1 and dist.is_initialized():
            dev = "cuda" if dist.get_backend() == "nccl" else "cpu"
            t = self.torch.tensor([1 if flag else 0], dtype=self.torch.int32, device=dev)
            dist.broadcast(t, src=0)
            flag = bool(t.item())
        return flag

    def _finish_stop(self, control: Any, path: str | None, ev: dict[str, Any] | None) -> None:
        self.stopped = True
        control.should_training_stop = True
        if self.rank == 0:
            self.control.acknowledge({"path": path, "line": events.to_line(ev) if ev else None})

    # -- checkpoints ----------------------------------------------------------------------------------------
    def _maybe_save(self, state: Any, control: Any) -> None:
        epoch = self.epoch_offset + round(state.epoch or 0)
        if epoch == self.last_epoch and self.last_epoch_dir is not None:
            return
        path, ev = self._checkpoint(state, partial=False)
        if self.stop_pending:
            self._finish_stop(control, path, ev)

    def _checkpoint(self, state: Any, *, partial: bool,
                    evaluated: bool = False) -> tuple[str | None, dict[str, Any] | None]:
        """Collective: every rank sends its RNG state; rank 0 writes; every rank learns whether it worked."""
        torch, dist = self.torch, self.torch.distributed
        mine = _rng_state(torch)
        rngs = [mine]
        self.full_state = strategies.gathered_state_dict(self.trainer)  # ZeRO-3: all ranks gather
        multi = self.world > 1 and dist.is_initialized()
        if multi:
            gathered: list[Any] = [None] * self.world if self.rank == 0 else []
            dist.gather_object(rngs[0], gathered if self.rank == 0 else None, dst=0)
            rngs = gathered
        path = ev = None
        err: BaseException | None = None
        if self.rank == 0:
            try:
                path, ev = self._write(state, rngs, partial, evaluated)
            except BaseException as e:  # noqa: BLE001 - shared with the other ranks, then raised
                err = e
            finally:
                # Writing must not perturb training: the QLoRA merge builds a fresh peft model (its init draws
                # random numbers), so put back the state that was saved.
                _set_rng_state(torch, mine)
        self.full_state = None  # a full copy of the weights: not kept beyond the write
        if multi:
            box = [err is None]
            dist.broadcast_object_list(box, src=0)
            if not box[0] and self.rank != 0:
                raise PeerCheckpointError("rank 0 could not write the checkpoint")
        if err is not None:
            raise err
        return path, ev

    def _write(self, state: Any, rngs: list[Any], partial: bool,
               evaluated: bool = False) -> tuple[str, dict[str, Any] | None]:
        trainer, torch = self.trainer, self.torch
        model = trainer.model
        tokenizer = self.tokenizer
        completed = self.epoch_offset + int(float(state.epoch or 0) + 1e-6)
        step = self.step_offset + state.global_step
        name = checkpoints.partial_name(completed + 1, step) if partial else f"epoch-{completed}"
        is_peft = hasattr(model, "peft_config")
        world = self.world

        def save(tmp: Path) -> None:
            if is_peft:
                model.save_pretrained(tmp / checkpoints.ADAPTER_DIR, safe_serialization=True)
                merged = methods.merged_full_precision(self.merge_base, model, torch) if self.merge_base \
                    else copy.deepcopy(model).merge_and_unload()
                merged.save_pretrained(tmp, safe_serialization=True)
                del merged
            elif getattr(self, "full_state", None) is not None:  # sharded weights, gathered for rank 0
                model.save_pretrained(tmp, safe_serialization=True, state_dict=self.full_state)
            else:
                model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            st = tmp / checkpoints.STATE_DIR
            st.mkdir()
            sharded = trainer.is_deepspeed_enabled or getattr(self, "full_state", None) is not None
            if trainer.optimizer is not None and not sharded:  # ZeRO / FSDP: each rank holds a shard
                torch.save(trainer.optimizer.state_dict(), st / "optimizer.pt")
            if trainer.lr_scheduler is not None:
                torch.save(trainer.lr_scheduler.state_dict(), st / "scheduler.pt")
            scaler = getattr(trainer.accelerator, "scaler", None)
            if scaler is not None:
                torch.save(scaler.state_dict(), st / "scaler.pt")
            for i, r in enumerate(rngs):
                torch.save(r, st / ("rng_state.pth" if world <= 1 else f"rng_state_{i}.pth"))
            trainer.state.save_to_json(str(st / "trainer_state.json"))

        meta = {**self.meta, "epoch": completed, "global_step": step, "partial": partial,
                "epoch_progress": round(self.epoch_offset + float(state.epoch or 0), 6),
                "train_loss": self.last_loss, "eval_loss": self.eval_loss if evaluated or not partial else None,
                "adapter": is_peft}
        path = checkpoints.publish(self.ckpt_root, self.job, name, save, meta)
        self.last_path = path
        ev = self.emit("checkpoint", name=name, path=path, epoch=completed, step=step, partial=partial,
                       train_loss=self.last_loss, eval_loss=meta["eval_loss"], base_model=self.meta["base_model"],
                       adapter_path=str(Path(path) / checkpoints.ADAPTER_DIR) if is_peft else None)
        if partial and evaluated:  # a validation between epochs (eval_steps)
            self.best = checkpoints.link_best(self.ckpt_root, name, path, eval_loss=self.eval_loss, best=self.best,
                                              emit=self.emit)
        if not partial:
            self.last_epoch_dir, self.last_epoch = path, completed
            self.best = checkpoints.link_epoch(self.ckpt_root, name, path, completed=completed,
                                               planned_epochs=self.meta["planned_epochs"],
                                               eval_loss=self.eval_loss, best=self.best, emit=self.emit)
        return path, ev


