"""The per-worker training loop (Ray Train `train_loop_per_worker`): transformers Trainer + peft.

Per-step metrics travel as structured events printed by rank 0 (not `ray.train.report`, which is a
throttled barrier); checkpoints are written by rank 0 at each epoch end in the page's layout.
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from . import checkpoints, events
from .data import load_dataset, tokenize_all
from .plan import Device, make_plan
from .spec import JobSpec, TrainingConfig

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
    import ray.train
    import torch

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    events.set_source(f"rank{rank}")
    is_main = rank == 0

    def emit(type_: str, **kw: Any) -> None:
        if is_main:
            events.emit(type_, **kw)

    try:
        _train(config, rank, world, emit, torch)
    except Exception as e:
        events.emit("error", error_type=type(e).__name__, message=str(e), rank=rank)
        raise


def _train(config: dict[str, Any], rank: int, world: int, emit: Any, torch: Any) -> None:
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForSeq2Seq,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    spec = JobSpec.model_validate(config["spec"])
    tc = TrainingConfig.model_validate(config["training_config"])
    ckpt_root: str = config["checkpoint_dir"]
    job: str = config["job"]
    start_epoch: int = int(config.get("start_epoch", 0))
    threads = max(1, int(spec.cpus_per_worker))
    torch.set_num_threads(threads)
    set_seed(tc.seed)

    emit("phase", phase="loading_data")
    ds = load_dataset(spec.dataset_path)
    emit("phase", phase="loading_model", model=spec.base_model)
    tokenizer = AutoTokenizer.from_pretrained(spec.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    train_rows, truncated = tokenize_all(tokenizer, ds.records, ds.format, tc.max_seq_length)
    val_rows, _ = tokenize_all(tokenizer, ds.validation, ds.format, tc.max_seq_length) if ds.validation else ([], 0)
    if not val_rows and tc.validation_split > 0:
        n_val = max(1, int(len(train_rows) * tc.validation_split))
        val_rows, train_rows = train_rows[:n_val], train_rows[n_val:]
    emit(
        "dataset",
        format=ds.format,
        examples=len(train_rows),
        validation_examples=len(val_rows),
        truncated=truncated,
        max_seq_length=tc.max_seq_length,
    )

    if spec.job_type == "train":
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(spec.base_model))
    else:
        model = AutoModelForCausalLM.from_pretrained(spec.base_model, dtype=torch.float32)
    params = float(sum(p.numel() for p in model.parameters()))
    plan = make_plan(params=params, devices=_devices(torch), workers=world, config=tc)
    emit("plan", **plan.as_dict(), parameters=params)

    if plan.method in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(
                r=tc.lora_r,
                lora_alpha=tc.effective_lora_alpha,
                lora_dropout=tc.lora_dropout,
                target_modules=tc.target_modules,
                task_type="CAUSAL_LM",
            ),
        )

    use_gpu = spec.gpus_per_worker > 0 and torch.cuda.is_available()
    workdir = tempfile.mkdtemp(prefix=f"cleverthis-{job}-")
    args = TrainingArguments(
        output_dir=workdir,
        per_device_train_batch_size=spec.batch_size,
        per_device_eval_batch_size=spec.batch_size,
        num_train_epochs=spec.epochs,
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
        report_to="none",
        seed=tc.seed,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        use_cpu=not use_gpu,
        disable_tqdm=True,
        include_num_input_tokens_seen="non_padding",
        ddp_find_unused_parameters=False,
    )

    from datasets import Dataset as HFDataset

    callback = _EventsAndCheckpoints(
        emit=emit,
        rank=rank,
        tokenizer=tokenizer,
        ckpt_root=ckpt_root,
        job=job,
        start_epoch=start_epoch,
        meta={"job": job, "method": plan.method, "base_model": spec.base_model},
        torch=torch,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=HFDataset.from_list(train_rows),
        eval_dataset=HFDataset.from_list(val_rows) if val_rows else None,
        data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100),
        callbacks=[callback],
    )
    callback.trainer = trainer
    trainer.train()
    if rank == 0 and callback.last_epoch_dir:
        checkpoints.point(ckpt_root, "epoch-final", os.path.basename(callback.last_epoch_dir))
        emit("checkpoint", name="epoch-final", path=os.path.join(ckpt_root, "epoch-final"),
             target=callback.last_epoch_dir, epoch=callback.last_epoch)
        if callback.best:
            checkpoints.point(ckpt_root, "best", os.path.basename(callback.best[1]))
            emit("checkpoint", name="best", path=os.path.join(ckpt_root, "best"), target=callback.best[1],
                 eval_loss=callback.best[0])
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    emit("phase", phase="training_done")


class _EventsAndCheckpoints(TrainerCallback):
    """A TrainerCallback emitting step/epoch events and writing epoch checkpoints."""

    def __init__(self, *, emit: Any, rank: int, tokenizer: Any, ckpt_root: str, job: str, start_epoch: int,
                 meta: dict[str, Any], torch: Any) -> None:
        self.emit, self.rank, self.tokenizer = emit, rank, tokenizer
        self.ckpt_root, self.job, self.start_epoch, self.meta, self.torch = ckpt_root, job, start_epoch, meta, torch
        self.trainer: Any = None
        self.t0 = time.time()
        self.last_t, self.last_tokens, self.last_step = self.t0, 0, 0
        self.last_epoch_dir: str | None = None
        self.last_epoch = 0
        self.last_loss: float | None = None
        self.eval_loss: float | None = None
        self.best: tuple[float, str] | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.t0 = self.last_t = time.time()
        self.emit("phase", phase="running", total_steps=state.max_steps, epochs=args.num_train_epochs,
                  start_epoch=self.start_epoch)

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
        steps_done = state.global_step
        rate = (now - self.t0) / max(steps_done, 1)
        self.last_loss = float(logs["loss"])
        self.emit(
            "step",
            step=steps_done,
            total_steps=state.max_steps,
            epoch=self.start_epoch + float(state.epoch or 0),
            loss=self.last_loss,
            learning_rate=float(logs.get("learning_rate", 0.0)),
            grad_norm=float(logs["grad_norm"]) if logs.get("grad_norm") is not None else None,
            tokens_per_s=round(tps, 1) if tps is not None else None,
            eta_s=round(rate * (state.max_steps - steps_done), 1),
        )
        self.last_t, self.last_tokens, self.last_step = now, tokens, steps_done

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, Any] | None = None, **kw: Any) -> None:
        if metrics and "eval_loss" in metrics:
            self.eval_loss = float(metrics["eval_loss"])
            self.emit("validation", epoch=self.start_epoch + round(state.epoch or 0), eval_loss=self.eval_loss)
            self._maybe_save(state, after_eval=True)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        epoch = self.start_epoch + round(state.epoch or 0)
        self.emit("epoch", epoch=epoch, step=state.global_step, train_loss=self.last_loss,
                  elapsed_s=round(time.time() - self.t0, 2))
        if args.eval_strategy == "no" or str(args.eval_strategy) == "IntervalStrategy.NO":
            self._maybe_save(state, after_eval=False)
        # With validation, Trainer evaluates after on_epoch_end; the checkpoint waits for eval_loss.

    def _maybe_save(self, state: Any, after_eval: bool) -> None:
        epoch = self.start_epoch + round(state.epoch or 0)
        if epoch == self.last_epoch:
            return
        dist = self.torch.distributed
        if self.rank == 0:
            self._save(epoch, state)
        if dist.is_initialized():
            dist.barrier()

    def _save(self, epoch: int, state: Any) -> None:
        trainer = self.trainer
        model = trainer.model
        tokenizer = self.tokenizer
        name = f"epoch-{epoch}"
        is_peft = hasattr(model, "peft_config")

        def save(tmp: Path) -> None:
            if is_peft:
                model.save_pretrained(tmp / "adapter_model", safe_serialization=True)
                merged = copy.deepcopy(model).merge_and_unload()
                merged.save_pretrained(tmp, safe_serialization=True)
                del merged
            else:
                model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            state_dict = {
                "global_step": state.global_step,
                "epoch": epoch,
                "optimizer": trainer.optimizer.state_dict() if trainer.optimizer is not None else None,
                "lr_scheduler": trainer.lr_scheduler.state_dict() if trainer.lr_scheduler is not None else None,
                "torch_rng": self.torch.get_rng_state(),
            }
            self.torch.save(state_dict, tmp / checkpoints.STATE_FILE)

        meta = {**self.meta, "epoch": epoch, "global_step": state.global_step, "train_loss": self.last_loss,
                "eval_loss": self.eval_loss, "adapter": is_peft}
        path = checkpoints.write_checkpoint(self.ckpt_root, name, save, meta)
        checkpoints.point(self.ckpt_root, "latest", name)
        self.last_epoch_dir, self.last_epoch = path, epoch
        if self.eval_loss is not None and (self.best is None or self.eval_loss < self.best[0]):
            self.best = (self.eval_loss, path)
        self.emit("checkpoint", name=name, path=path, epoch=epoch, step=state.global_step,
                  train_loss=self.last_loss, eval_loss=self.eval_loss,
                  adapter_path=str(Path(path) / "adapter_model") if is_peft else None)


