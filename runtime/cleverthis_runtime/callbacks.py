"""The torch worker's TrainerCallback: step, epoch and validation events, the epoch checkpoints, the cancel
checkpoint at the exact step, `eval_steps` validation between epochs and early stopping.

Checkpoints are collective: every rank sends its RNG state (the Trainer's file format, compat.py), under ZeRO or
FSDP2 every rank writes its shard of the optimizer into a staging folder (sharded_state.py), rank 0 writes the
folder atomically with those shards in its `training_state/` (checkpoints.publish), and every rank learns whether
the write worked.
"""

from __future__ import annotations

import copy
import os
import time
import uuid
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from . import checkpoints, compat, events, methods, sharded_state, strategies
from .control import PeerCheckpointError, WorkerControl
from .monitoring import RayMetrics, StepTiming, Utilisation, expected_speed

# Tests only: slow each step down (numerics unchanged) so that a cancel or a kill lands mid-epoch.
STEP_DELAY_S = float(os.environ.get("CLEVERTHIS_TEST_STEP_DELAY_S") or 0)
# Tests only: the global step at which the step raises torch's out-of-memory error (a fault injected where a
# too-large model or batch would fail, so that the failure's path to the user is tested on CPU).
OOM_AT_STEP = int(os.environ.get("CLEVERTHIS_TEST_OOM_AT_STEP") or 0)


def _injected_oom(step: int) -> None:
    if OOM_AT_STEP and step == OOM_AT_STEP:
        import torch

        raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate 20.00 GiB (injected at step {step} by "
                                     "CLEVERTHIS_TEST_OOM_AT_STEP)")


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


class EventsAndCheckpoints(TrainerCallback):
    """A TrainerCallback emitting step/epoch events, writing epoch checkpoints and the cancel checkpoint."""

    def __init__(self, *, emit: Any, rank: int, world: int, tokenizer: Any, ckpt_root: str, job: str,
                 epoch_offset: int, step_offset: int, meta: dict[str, Any], control: WorkerControl,
                 torch: Any, eval_steps: int | None = None, patience: Patience | None = None) -> None:
        self.emit, self.rank, self.world, self.tokenizer = emit, rank, world, tokenizer
        self.ckpt_root, self.job, self.meta, self.torch = ckpt_root, job, meta, torch
        self.epoch_offset, self.step_offset, self.control = epoch_offset, step_offset, control
        self.trainer: Any = None
        self.merge_base: str | None = None  # QLoRA: merge into this base loaded unquantized (methods.py)
        self.weights = "fp32"  # the dtype of merged weights: the training precision (plan.weights_dtype)
        self.keep_checkpoints: int | None = None  # training_config keep_checkpoints (checkpoints.prune)
        self.t0 = time.time()
        self.last_t, self.last_tokens, self.last_step = self.t0, 0, 0
        #: workers that read each batch (tensor or pipeline parallel): the Trainer counts its tokens on each
        self.token_copies = 1
        self.job_files = f"{job}-{uuid.uuid4().hex[:8]}"  # this run's tokenizer files (checkpoints.add_job_files)
        self.timing = StepTiming()
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
        self.tune_report: Any = None  # a sweep's trial: ray.train.report (sweep.py)
        self.utilisation = Utilisation(rank, torch)
        #: ZeRO / FSDP2 (sharded_state.engine_for): every rank writes its shard of the optimizer at a checkpoint
        self.sharded_engine: str | None = None
        self.staged: str | None = None  # where those shards wait for rank 0's checkpoint folder

    # -- events ---------------------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.t0 = self.last_t = time.time()
        self.first_step = state.global_step
        self.last_tokens = int(state.num_input_tokens_seen or 0) // self.token_copies
        self.last_epoch = self.epoch_offset + int(float(state.epoch or 0) + 1e-6)
        if self.rank == 0:
            self.control.set_phase("training")
            self.emit("strategy", **strategies.describe(self.trainer),
                      **expected_speed(kw.get("model"), args, self.world, self.torch))
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
        tokens = int(state.num_input_tokens_seen or 0) // self.token_copies
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
            **self.timing.take(),
        )
        if self.metrics is not None:
            self.metrics.publish(loss=self.last_loss, learning_rate=float(logs.get("learning_rate", 0.0)),
                                 tokens_per_s=tps, step=self.step_offset + state.global_step,
                                 epoch=self.epoch_offset + float(state.epoch or 0))
        self.last_t, self.last_tokens, self.last_step = now, tokens, state.global_step

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.timing.begin()

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if STEP_DELAY_S:
            time.sleep(STEP_DELAY_S)  # (counted as compute: it stands for a slower model)
        self.timing.end()
        _injected_oom(state.global_step)
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
            self._to_tune(state)
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
            if hasattr(self.trainer.model, "peft_config") and not checkpoints.has_merged(self.last_path):
                checkpoints.add_merged(self.last_path, self._save_merged)  # epoch-final is loaded from
                self._announce(self.last_path, merged=True)
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
            self._to_tune(state)
        # With validation, Trainer evaluates after on_epoch_end; the checkpoint waits for eval_loss.

    def _to_tune(self, state: Any) -> None:
        """A sweep's trial: the epoch's losses to Ray Tune (on every rank: ray.train.report is collective).
        `objective` is what the sweep compares: the validation loss when there is one, else the training loss."""
        if self.tune_report is None or self.stopped:
            return
        losses = {"eval_loss": self.eval_loss, "loss": self.last_loss}
        objective = self.eval_loss if self.eval_loss is not None else self.last_loss
        self.tune_report({"objective": objective, "epoch": self.epoch_offset + round(state.epoch or 0),
                          **{k: v for k, v in losses.items() if v is not None}})

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
        mine = compat.rng_state(torch)
        rngs = [mine]
        self.full_state = strategies.gathered_state_dict(self.trainer)  # ZeRO-3: all ranks gather
        if self.sharded_engine:  # every rank writes its optimizer shard; rank 0's folder takes them (sharded_state)
            self.staged = sharded_state.write_shards(self.sharded_engine, self.trainer, self.ckpt_root,
                                                     rank=self.rank, world=self.world, torch=torch)
            compat.set_rng_state(torch, mine)  # what the save drew (if anything) must not change the training
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
                compat.set_rng_state(torch, mine)
                sharded_state.discard(self.staged)  # left only by a failed write (moved into the folder otherwise)
        self.staged = None
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
        eval_loss = self.eval_loss if evaluated or not partial else None
        # A LoRA checkpoint is its adapter; the merged weights, the model's size, go only where they are loaded
        # from: epoch-final, and best (the lowest validation loss so far).
        final = not partial and completed == self.meta["planned_epochs"]
        merged = is_peft and (final or checkpoints.becomes_best(eval_loss, self.best))

        def save(tmp: Path) -> None:
            if is_peft:
                model.save_pretrained(tmp / checkpoints.ADAPTER_DIR, safe_serialization=True)
                if merged:
                    self._save_merged(tmp)
                else:
                    checkpoints.adapter_at_root(tmp)
            elif getattr(self, "full_state", None) is not None:  # sharded weights, gathered for rank 0
                with strategies.saving_gathered(model):
                    model.save_pretrained(tmp, safe_serialization=True, state_dict=self.full_state)
            else:
                model.save_pretrained(tmp, safe_serialization=True)
            checkpoints.add_job_files(self.ckpt_root, self.job_files, tmp, tokenizer.save_pretrained)
            st = tmp / checkpoints.STATE_DIR
            st.mkdir()
            if self.staged is not None:  # every rank's optimizer shard (ZeRO / FSDP2), staged just before
                sharded_state.move_into(self.staged, st)
            sharded = trainer.is_deepspeed_enabled or getattr(self, "full_state", None) is not None
            if trainer.optimizer is not None and not sharded:  # ZeRO / FSDP2: in each rank's shard (above)
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
                "train_loss": self.last_loss, "eval_loss": eval_loss, "adapter": is_peft,
                "merged": merged if is_peft else None}
        path = checkpoints.publish(self.ckpt_root, self.job, name, save, meta)
        self.last_path = path
        ev = self.emit("checkpoint", name=name, path=path, epoch=completed, step=step, partial=partial,
                       train_loss=self.last_loss, eval_loss=meta["eval_loss"], base_model=self.meta["base_model"],
                       adapter_path=str(Path(path) / checkpoints.ADAPTER_DIR) if is_peft else None,
                       size_bytes=checkpoints.size_of(path), merged=merged if is_peft else None)
        before = self.best
        if partial and evaluated:  # a validation between epochs (eval_steps)
            self.best = checkpoints.link_best(self.ckpt_root, name, path, eval_loss=self.eval_loss, best=self.best,
                                              emit=self.emit)
        if not partial:
            self.last_epoch_dir, self.last_epoch = path, completed
            self.best = checkpoints.link_epoch(self.ckpt_root, name, path, completed=completed,
                                               planned_epochs=self.meta["planned_epochs"],
                                               eval_loss=self.eval_loss, best=self.best, emit=self.emit)
        if is_peft and before is not None and self.best is not None and before[1] != self.best[1]:
            self._drop_merged(before[1])  # the former best: its merged weights are no longer loaded from there
        checkpoints.prune(self.ckpt_root, self.job, self.keep_checkpoints, emit=self.emit)
        return path, ev

    def _save_merged(self, folder: Path) -> None:
        """The adapter merged into the base, in the training precision (a bf16 base stays bf16): into the weights
        loaded unquantized for QLoRA (methods.merged_unquantized), else into a copy of the model."""
        model, torch = self.trainer.model, self.torch
        merged = methods.merged_unquantized(self.merge_base, model, self.weights, torch) if self.merge_base \
            else copy.deepcopy(model).merge_and_unload()
        merged.save_pretrained(folder, safe_serialization=True)
        del merged

    def _drop_merged(self, path: str) -> None:
        """A LoRA checkpoint that is no longer best (nor final) keeps its adapter only."""
        if os.path.realpath(path) == os.path.realpath(os.path.join(self.ckpt_root, "epoch-final")):
            return
        if checkpoints.has_merged(path):
            checkpoints.drop_merged(path)
            self._announce(path, merged=False)

    def _announce(self, path: str, *, merged: bool) -> None:
        meta = checkpoints.read_meta(path) or {}
        self.emit("checkpoint", name=os.path.basename(path), path=path, epoch=meta.get("epoch"),
                  step=meta.get("global_step"), partial=meta.get("partial"), train_loss=meta.get("train_loss"),
                  eval_loss=meta.get("eval_loss"), base_model=self.meta["base_model"],
                  adapter_path=os.path.join(path, checkpoints.ADAPTER_DIR), size_bytes=checkpoints.size_of(path),
                  merged=merged)
