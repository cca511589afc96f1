"""The per-worker training loop (Ray Train `train_loop_per_worker`): transformers Trainer + peft.

Per-step metrics travel as structured events printed by rank 0 (not `ray.train.report`, which is a
throttled barrier); checkpoints are written by rank 0 at each epoch end in the page's layout, and at the
exact step when the job is cancelled mid-epoch.

Exact resume. A checkpoint holds, beside the weights, `training_state/`: the transformers Trainer's own
resume files (optimizer, LR scheduler, the RNG state of every rank, `trainer_state.json` with the global
step and epoch). Resuming loads the ORIGINAL base model plus the trainable adapter (LoRA) or the full
weights, then hands `training_state/` to `Trainer.train(resume_from_checkpoint=...)`, which restores the
optimizer, scheduler, step and RNG and skips the batches already seen (the data order is seeded per epoch),
so 1 epoch + resume 1 epoch equals 2 epochs straight. Under DeepSpeed ZeRO and FSDP2 each rank's shard of the
optimizer is in `training_state/` too, in the engine's own format (sharded_state.py); it restores under the same
strategy over the same number of workers, else the job warm-starts. The total number of epochs is the starting
checkpoint's completed epochs plus the job's `epochs` (after a worker failure, the restarted workers keep
that plan and continue from the job's newest checkpoint). When the effective batch (batch size x workers x accumulation) or
the number of examples differ from the checkpoint's, the position cannot carry over: the job warm-starts
from the weights (and says so in a `warning` event).
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

from . import (
    checkpoints,
    compat,
    events,
    lora_targets,
    memory,
    methods,
    parallel,
    pipeline,
    sharded_state,
    strategies,
    templates,
)
from .callbacks import EventsAndCheckpoints, Patience, tracking_locations
from .control import WorkerControl, worker_entry
from .data import approximate_lengths, lazy, packed, text_blocks
from .inputs import WorkerInputs
from .monitoring import RayMetrics, Utilisation
from .plan import Device, PlanError, make_plan, method_of, precision_of, start_of, weights_dtype
from .spec import JobSpec, TrainingConfig, parallelism_error

__all__ = ["Patience", "RayMetrics", "Utilisation", "run", "tracking_locations", "train_loop"]

log = logging.getLogger(__name__)


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
    from transformers import set_seed

    compat.quiet_peft_checkpointing_warning()
    control = control or WorkerControl(None, rank)
    spec = JobSpec.model_validate(config["spec"])
    tc = TrainingConfig.model_validate(config["training_config"])
    problem = parallelism_error(tc, framework=spec.framework, workers=world, job_type=spec.job_type)
    if problem:  # before any data or model is loaded (training_config.json may have set them)
        raise PlanError(f"training_config: {problem}")
    torch.set_num_threads(max(1, int(spec.cpus_per_worker)))
    set_seed(tc.seed)
    if rank == 0:
        control.start_polling()
    inp = WorkerInputs.from_config(config, rank=rank, world=world, attempt=attempt, share=_broadcaster(torch, world))
    inp.emit("phase", phase="loading_data")
    inp.load_dataset()  # the node's Arrow copy, memory-mapped (sources.py)
    base_path, tokenizer, template = _load_tokenizer(inp)
    process = memory.process_bytes()  # the fixed overhead, measured before the model's tensors (the plan's memory)
    # batch_size is per data-parallel replica: with tensor parallelism a group of workers holds one replica
    total_batch = spec.batch_size * parallel.sizes(tc, world)[1] * tc.gradient_accumulation_steps
    meta = inp.meta
    if meta and meta.get("method"):  # the checkpoint decides the method (an adapter stays an adapter)
        method = meta["method"] if meta["method"] in ("lora", "qlora") and meta.get("adapter") \
            else ("lora" if meta.get("adapter") else "full")
        inp.tc = tc = tc.model_copy(update={"method": method})
    weights = _weights_dtype(tc, inp.source or base_path or inp.original_base, torch)
    model, base_how = _load_model(spec, tc, inp.source, meta, inp.original_base, base_path, torch, world, weights)
    model, plan = _planned_model(inp, model, template, torch, process)
    inp.emit("phase", phase="loading_data")  # the rows: tokenized here where packing or raw text needs it
    inp.make_rows(lambda train, val: _rows(inp, tokenizer, plan, train, val))
    if plan.batching == "packed" and inp.dataset.kind != "text":  # several examples per row (rows.packed)
        inp.emit("packing", rows=len(inp.train_rows), validation_rows=len(inp.val_rows),
                 max_seq_length=tc.max_seq_length)
    resume = _resume_mode(inp, total_batch, plan)
    if inp.source:
        inp.emit("resume", checkpoint=inp.source, exact=resume == "exact", completed_epochs=inp.completed,
                 global_step=(meta or {}).get("global_step"), partial=bool((meta or {}).get("partial")),
                 base_model=inp.original_base, base_loaded=base_how)
    trainer, callback = _trainer(inp, model, tokenizer, plan, resume, total_batch, control, torch)
    callback.weights = plan.weights_dtype
    callback.keep_checkpoints = tc.keep_checkpoints
    if methods.is_quantized(tc):
        callback.merge_base = base_path or inp.original_base
        callback.weights = methods.compute_weights(tc)
    if config.get("tune"):  # a sweep's trial: each epoch's losses go to Ray Tune too (sweep.py)
        import ray.train

        callback.tune_report = ray.train.report
    exact = resume == "exact"
    state_dir = os.path.join(inp.source, checkpoints.STATE_DIR) if exact and inp.source else None
    try:
        trainer.train(resume_from_checkpoint=state_dir)
    finally:  # the tokenizer files the checkpoints were copied from (checkpoints.add_job_files), failed or not
        if rank == 0:
            checkpoints.remove_job_files(inp.ckpt_root, callback.job_files)

    # every worker's peak beside the plan's estimate (the job detail shows the highest)
    events.emit("memory", rank=rank, planned_gb=plan.memory_per_worker_gb.get("total"), **memory.peak(torch))
    # epoch-final and best were pointed by the callback as their checkpoints were written (before any
    # cancel acknowledgement lets the driver exit).
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    if rank == 0:
        control.set_phase("done")
    inp.emit("phase", phase="cancel_checkpoint_written" if callback.stopped else "training_done")
    return {"stopped": callback.stopped, "last_checkpoint": callback.last_path, "resume": resume,
            "global_step": trainer.state.global_step, "stopped_early": callback.stopped_early}


def _broadcaster(torch: Any, world: int) -> Any:
    """Rank 0's value on every rank (for the recovery source)."""

    def share(value: Any) -> Any:
        dist = torch.distributed
        if world > 1 and dist.is_initialized():
            box = [value]
            dist.broadcast_object_list(box, src=0)
            return box[0]
        return value

    return share


def _load_tokenizer(inp: WorkerInputs) -> tuple[str | None, Any, tuple[str, str]]:
    """(the base model's folder on this node, the tokenizer, the chat template applied and why)."""
    from transformers import AutoTokenizer

    from .download import cached_snapshot, ensure_model, is_hub_id

    source, orig_base = inp.source, inp.original_base
    base_path = None
    if source is None:
        # The base must be on this node: a local path, the cache, or a download (with progress events).
        base_path = ensure_model(orig_base, inp.emit)
    elif (inp.meta or {}).get("adapter"):
        # A LoRA resume uses the original base when this node has it, and never downloads it: otherwise the
        # base is recovered from the checkpoint's merged weights.
        base_path = cached_snapshot(orig_base) if is_hub_id(orig_base) else orig_base
    tok_path = source if source and os.path.exists(os.path.join(source, "tokenizer_config.json")) else base_path
    inp.emit("phase", phase="loading_model", model=source or orig_base, base_model=orig_base)
    tokenizer = AutoTokenizer.from_pretrained(tok_path or source)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    try:
        template = templates.apply(tokenizer, inp.tc.chat_template)  # saved with the tokenizer in each checkpoint
    except templates.TemplateError as e:
        raise PlanError(f"training_config.chat_template: {e}") from e
    return base_path, tokenizer, template


def _rows(inp: WorkerInputs, tokenizer: Any, plan: Any, train: Any, val: Any) -> tuple[Any, Any, int | None, str]:
    """The training rows from the node's Arrow tables: raw text cut into blocks, conversations tokenized and packed
    up front (packing needs every length first), else tokenized lazily, batch by batch, as the Trainer reads
    them (nothing held in memory: the dataset's size does not matter)."""
    max_len, rank = inp.tc.max_seq_length, inp.rank
    if inp.dataset is not None and inp.dataset.kind == "text":
        blocks = [text_blocks(tokenizer, t, max_len, rank=rank) if t is not None else None for t in (train, val)]
        if plan.batching != "packed":  # a model that cannot keep documents apart gets plain blocks, padded
            blocks = [b.remove_columns("position_ids") if b is not None else None for b in blocks]
        return blocks[0], blocks[1], None, "blocks"
    if plan.batching == "packed":
        rows = [packed(tokenizer, t, max_len, rank=rank) if t is not None else None for t in (train, val)]
        return rows[0], rows[1], None, "up front"
    return lazy(tokenizer, train, max_len), lazy(tokenizer, val, max_len) if val is not None else None, None, "lazily"


def _resume_mode(inp: WorkerInputs, total_batch: int, plan: Any) -> str | None:
    """"exact", "weights" or None (a new job), with a `warning` event when a checkpoint's position is not kept."""
    state = os.path.join(inp.source or "", checkpoints.STATE_DIR, "trainer_state.json")
    missing = []
    if inp.source and not os.path.exists(state):
        missing.append("the checkpoint has no training state (written by an older runtime)")
    elif inp.meta is not None and inp.meta.get("total_batch") is None:
        missing.append("the checkpoint does not record its effective batch")
    elif inp.meta is not None and inp.meta.get("batching", "padded") != plan.batching:
        missing.append(f"the checkpoint's batches were {inp.meta.get('batching', 'padded')}, this run's are "
                       f"{plan.batching} (training_config packing, group_by_length)")
    if inp.source and inp.meta is not None and os.path.exists(state):
        # ZeRO and FSDP2 shards restore only into the same engine over the same number of ranks (sharded_state.py)
        why = sharded_state.mismatch(inp.meta.get(sharded_state.META_KEY), inp.meta.get("world_size"),
                                     plan.strategy, inp.world)
        if why:
            missing.append(why)
    resume = inp.resume_mode(total_batch, batch_terms="batch size x workers x gradient accumulation",
                             missing=missing)
    if resume == "exact" and plan.strategy.endswith("-parallel"):
        # Tensor and pipeline parallelism shard the optimizer too; their shards are not written.
        resume = "weights"
        inp.emit("warning", checkpoint=inp.source, message=f"resuming from the weights only: the {plan.strategy} "
                 "strategy shards the optimizer state, which the checkpoint does not restore (exact resume: DDP, "
                 "DeepSpeed ZeRO, FSDP2)")
    return resume


def _planned_model(inp: WorkerInputs, model: Any, template: tuple[str, str], torch: Any,
                   process: float | None = None) -> tuple[Any, Any]:
    """The automatic plan (its `plan` event), and the model as it trains: with LoRA added for a new LoRA job."""
    tc = inp.tc
    refusal = methods.packing_refusal(model)
    if tc.packing and refusal:
        raise PlanError(f"training_config: {refusal}")
    params, devices = float(_parameters(model)), _devices(torch)
    attention = methods.attention(model, devices)
    plan = make_plan(params=params, devices=devices, workers=inp.world, config=tc, attention=attention,
                     packing_refusal=refusal, raw_text=inp.dataset is not None and inp.dataset.kind == "text",
                     workload=memory.workload(model, tc, inp.spec.batch_size), process_bytes=process)
    if plan.batching == "packed":  # the block-diagonal mask (or varlen attention) from position_ids needs no cache
        model.config.use_cache = False
    # training_config's attn_implementation, or the varlen attention packed rows run with (the plan's choice)
    if plan.attn_implementation and plan.attn_implementation != getattr(model.config, "_attn_implementation", None):
        model.set_attn_implementation(plan.attn_implementation)
    plan_event = plan.as_dict()
    if plan.weights_dtype not in ("4bit", "8bit"):  # what the weights hold, read from them
        plan_event["weights_dtype"] = _loaded_dtype(model)
    if plan.parallelism is not None:
        plan_event["parallelism"] = parallel.layout(tc, inp.world, model.config)
    plan_event["chat_template"] = template[0]
    plan_event["reasons"] = {**plan_event["reasons"], "chat_template": template[1]}
    plan_event["start"], plan_event["reasons"]["start"] = start_of(inp.spec, inp.source)
    new_lora = inp.source is None and plan.method in ("lora", "qlora")
    if new_lora:
        targets, why = lora_targets.choose(model, tc.target_modules)
        shown = targets if isinstance(targets, str) else ", ".join(targets)
        plan_event["lora_target_modules"] = targets
        plan_event["reasons"] = {**plan_event["reasons"], "lora_target_modules": f"{shown}: {why}"}
    inp.emit("plan", **plan_event, parameters=params)
    if new_lora:
        from peft import get_peft_model

        model = get_peft_model(model, lora_targets.lora_config(
            model, plan_event["lora_target_modules"], r=tc.lora_r, alpha=tc.effective_lora_alpha,
            dropout=tc.lora_dropout))
    return model, plan


def _loaded_dtype(model: Any) -> str:
    """The dtype of the model's weights as loaded: "bf16", "fp16" or "fp32"."""
    dtype = str(next(model.parameters()).dtype)
    return {"torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(dtype, "fp32")


def _parameters(model: Any) -> int:
    """The model's parameter count (a tensor-parallel weight counts whole, not its local shard)."""
    import math

    # a 4-bit weight stores two values per byte (bitsandbytes' Params4bit keeps the packed shape)
    return sum(math.prod(p.shape) * (2 if type(p).__name__ == "Params4bit" else 1) for p in model.parameters())


_CHECKPOINTING = "activation_checkpointing"


def _training_args(inp: WorkerInputs, plan: Any, total_epochs: int, torch: Any) -> Any:
    from transformers import TrainingArguments

    spec, tc, job = inp.spec, inp.tc, inp.job
    use_gpu = spec.gpus_per_worker > 0 and torch.cuda.is_available()
    ds_config = strategies.setup_deepspeed(tc)  # before TrainingArguments (ZeRO-3 needs it)
    if "tensorboard" in tc.report_to:  # the record outlives the cluster: beside the checkpoints
        os.environ["TENSORBOARD_LOGGING_DIR"] = os.path.join(inp.ckpt_root, "runs", job)
    return TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix=f"cleverthis-{job}-"),
        per_device_train_batch_size=spec.batch_size,
        per_device_eval_batch_size=spec.batch_size,
        num_train_epochs=total_epochs,
        learning_rate=tc.learning_rate,
        lr_scheduler_type=tc.lr_scheduler,
        warmup_steps=tc.warmup_ratio,  # a float < 1 is a ratio of the total steps in transformers 5
        weight_decay=tc.weight_decay,
        max_grad_norm=tc.max_grad_norm,
        gradient_accumulation_steps=tc.gradient_accumulation_steps,
        # activation_checkpointing since transformers 5.2x; the older name is its deprecated alias, which warned
        # in every job's log (transformers>=5,<6 allows releases with the older name only)
        **{_CHECKPOINTING if _CHECKPOINTING in TrainingArguments.__dataclass_fields__ else "gradient_checkpointing":
           plan.gradient_checkpointing},
        bf16=plan.precision == "bf16",
        fp16=plan.precision == "fp16",
        logging_steps=tc.logging_steps,
        save_strategy="no",
        eval_strategy="epoch" if inp.val_rows else "no",
        report_to="none" if tc.report_to == ["none"] else list(tc.report_to),
        run_name=job,
        seed=tc.seed,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        use_cpu=not use_gpu,
        disable_tqdm=True,
        include_num_input_tokens_seen="non_padding",
        ddp_find_unused_parameters=False,
        optim=plan.optim,
        use_liger_kernel=tc.use_liger_kernel,  # refused by the plan where it cannot run (no package, no GPU)
        **({"deepspeed": ds_config} if ds_config else {}),
    )


def _trainer(inp: WorkerInputs, model: Any, tokenizer: Any, plan: Any, resume: str | None, total_batch: int,
             control: WorkerControl, torch: Any) -> tuple[Any, EventsAndCheckpoints]:
    """The Trainer and its callback. Epochs: the job's plan (the epochs completed at its starting checkpoint
    plus its `epochs`; a recovery keeps it) when the resume is exact, else what is left of it."""
    from datasets import Dataset as HFDataset
    from transformers import DataCollatorForSeq2Seq

    tc, meta, world = inp.tc, inp.meta, inp.world
    exact = resume == "exact"
    total_epochs = inp.planned_epochs if exact else max(1, inp.planned_epochs - inp.completed)
    args = _training_args(inp, plan, total_epochs, torch)
    pipe = None
    if plan.strategy == "pipeline-parallel":  # this rank keeps its stage's layers only (pipeline.py)
        model = pipeline.split(model, inp.rank, tc.pipeline_parallel_size)
        pipe = pipeline.Pipeline(model, tc, inp.spec.batch_size, args.device)
    if plan.strategy == "tensor-parallel":  # accelerate refuses its tensor-parallel setup on CPU (compat.py)
        compat.allow_cpu_tensor_parallel()
    if plan.strategy == "fsdp" and world > 1:  # FSDP2 before the optimizer is built (strategies.py)
        model = strategies.shard_fsdp2(model, world)
    val_rows = inp.val_rows
    sharded = sharded_state.engine_for(plan.strategy, world)  # every rank writes its optimizer shard
    callback = EventsAndCheckpoints(
        emit=inp.emit, rank=inp.rank, world=world, tokenizer=tokenizer, ckpt_root=inp.ckpt_root, job=inp.job,
        epoch_offset=0 if exact or not meta else inp.completed,
        step_offset=0 if exact or not meta else int(meta.get("global_step", 0)),
        meta={"job": inp.job, "method": plan.method, "base_model": inp.original_base, "resumed_from": inp.source,
              "total_batch": total_batch, "world_size": world, "examples": len(inp.train_rows), "seed": tc.seed,
              "planned_epochs": inp.planned_epochs, "batching": plan.batching,
              **({sharded_state.META_KEY: plan.strategy} if sharded else {})},
        control=control, torch=torch,
        eval_steps=tc.eval_steps if val_rows else None,
        patience=Patience(tc.early_stopping_patience if val_rows else None, tc.early_stopping_threshold),
    )
    callback.token_copies = tc.model_parallel_size
    callback.sharded_engine = sharded
    sampler = None
    if plan.batching == "grouped":  # the lengths of this rank's view of the rows; every rank orders them alike
        sampler = methods.grouped_sampler(_lengths(inp.train_rows),
                                          inp.spec.batch_size * tc.gradient_accumulation_steps, tc.seed,
                                          parallel.sizes(tc, world)[1])
    trainer = compat.trainer_class(pipe, sampler)(
        model=model,
        args=args,
        train_dataset=HFDataset.from_list(inp.train_rows) if isinstance(inp.train_rows, list) else inp.train_rows,
        eval_dataset=(HFDataset.from_list(val_rows) if isinstance(val_rows, list) else val_rows) if val_rows else None,
        data_collator=methods.packed_collator(tokenizer) if plan.batching == "packed"
        else DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100),
        callbacks=[callback],
    )
    callback.trainer = trainer
    if plan.strategy == "fsdp" and world > 1:
        strategies.keep_sharded(trainer)
    if pipe is not None:  # a stage is not wrapped in DDP: its weights are its own
        compat.keep_sharded(trainer, pipeline.is_stage)
    return trainer, callback


def _lengths(rows: Any) -> list[int]:
    """Each row's length for length-grouped batches: exact for tokenized rows, else from the records' sizes."""
    if isinstance(rows, list):
        return [len(r["input_ids"]) for r in rows]
    return approximate_lengths(rows)


def _weights_dtype(tc: TrainingConfig, path: str, torch: Any) -> str:
    """The dtype the weights load in (plan.weights_dtype), decided before they load: the precision and the method
    as the plan will choose them. An automatic method needs the parameter count: the model built on the meta
    device (no memory) counts it."""
    devices = _devices(torch)
    precision, _ = precision_of(tc, devices)
    method = tc.method
    if method is None and precision in ("bf16", "fp16"):  # in fp32 every method loads fp32: no need to count
        from transformers import AutoConfig, AutoModelForCausalLM

        with torch.device("meta"):
            params = float(_parameters(AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))))
        method, _ = method_of(tc, params, devices, precision)
    return weights_dtype(method or "full", precision, tc)


def _load_model(spec: JobSpec, tc: TrainingConfig, source: str | None, meta: dict[str, Any] | None,
                orig_base: str, base_path: str | None, torch: Any, world: int = 1,
                weights: str = "fp32") -> tuple[Any, str | None]:
    """The model as it trains (LoRA is added later for a new job), its weights in `weights` (plan.weights_dtype),
    and how a LoRA resume found its base ("original", "unmerged_from_checkpoint", or None)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    # tensor parallelism: transformers splits each weight over the workers as it loads it (parallel.py)
    split = {"distributed_config": dc} if (dc := parallel.distributed_config(tc, world)) is not None else {}
    split.update(methods.load_options(weights, torch))
    if tc.model_parallel_size > 1:
        why = parallel.refusal(tc, AutoConfig.from_pretrained(source or base_path or orig_base), tc.method)
        if why:
            raise PlanError(f"{why[0]}: {why[1]}")
    if source is None:
        if spec.from_scratch:
            return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(base_path or orig_base),
                                                    **methods.load_options(weights, torch)), None
        if methods.is_quantized(tc):  # QLoRA: a 4/8-bit frozen base (LoRA is added by the caller)
            return methods.load_quantized(base_path or orig_base, tc, torch,
                                          gradient_checkpointing=bool(tc.gradient_checkpointing)), None
        return AutoModelForCausalLM.from_pretrained(base_path or orig_base, **split), None
    if not (meta or {}).get("adapter"):
        return AutoModelForCausalLM.from_pretrained(source, **split), None
    from peft import PeftModel

    adapter = os.path.join(source, checkpoints.ADAPTER_DIR)
    if base_path and os.path.exists(os.path.join(base_path, "config.json")):
        if methods.is_quantized(tc):  # QLoRA: the same 4/8-bit frozen base as the first run
            base = methods.load_quantized(base_path, tc, torch, gradient_checkpointing=bool(tc.gradient_checkpointing))
        else:
            base = AutoModelForCausalLM.from_pretrained(base_path, **methods.load_options(weights, torch))
        return PeftModel.from_pretrained(base, adapter, is_trainable=True), "original"
    # The original base is not on this node (and may not be downloaded): the checkpoint's merged weights
    # minus the adapter's delta are the base again (peft's unmerge).
    from peft.tuners.lora import LoraLayer

    if not os.path.exists(os.path.join(source, "config.json")):
        raise PlanError(f"checkpoint {source} holds the LoRA adapter alone (an epoch that was neither best nor final), "
                        f"and its base model {orig_base} is not on this node: put the base model back, or resume "
                        "from epoch-final or best, which hold the merged weights")
    merged = AutoModelForCausalLM.from_pretrained(source, **methods.load_options(weights, torch))
    model = PeftModel.from_pretrained(merged, adapter, is_trainable=True)
    for module in model.modules():
        if isinstance(module, LoraLayer):
            module.merged_adapters = list(module.active_adapters)
            module.unmerge()
    return model, "unmerged_from_checkpoint"
