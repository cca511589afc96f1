"""The optimizer state that each rank holds a shard of, in a checkpoint: DeepSpeed ZeRO 1/2/3 and FSDP2.

Under DDP rank 0 holds the whole optimizer and writes `training_state/optimizer.pt`. Under ZeRO and FSDP2 each
rank holds its own part, so every rank writes its own files, in the engine's own format:

- **DeepSpeed**: `engine.save_checkpoint(dir, tag="global_step<N>")` (a `global_step<N>/` folder with the
  module, each rank's optimizer partition, and a `latest` file naming the tag). The resume goes through the
  Trainer's own path: `Trainer.train(resume_from_checkpoint=training_state/)` calls transformers'
  `deepspeed_load_checkpoint(engine, training_state/)`, which loads the engine (module, optimizer partitions,
  its scheduler) from the tag `latest` names. The module it loads holds the weights the checkpoint's
  `model.safetensors` holds (both written at the same step), so it never replaces the loaded weights with others.
  For LoRA the frozen base is left out (`exclude_frozen_parameters`): the Trainer loads a PEFT model's module
  non-strictly, and the base comes from the original model as in any LoRA resume.
- **FSDP2** (`strategies.shard_fsdp2`; the Trainer does not know the model is sharded): the optimizer's state
  dict of DTensor shards (`get_optimizer_state_dict`), written with `torch.distributed.checkpoint` into
  `training_state/fsdp2_optimizer/` (a `.metadata` file and one `.distcp` file per rank). The Trainer's
  `_load_optimizer_and_scheduler`, called once the optimizer exists and before the first step, loads it back
  (`load_fsdp2`, compat.trainer_class) with the scheduler.

Both need the same number of ranks (and for DeepSpeed the same ZeRO stage) on resume: `mismatch` says why a
checkpoint's shards do not fit a run, and the run then warm-starts from the weights (train.py).

The checkpoint stays atomic. Rank 0 picks a staging folder beside the checkpoints, named `.tmp-sharded-<id>`
(so that `checkpoints.cleanup_stale` removes it after a crash), and tells every rank; every rank writes its
shard there (a collective); every rank learns whether all did; then rank 0, writing the checkpoint into its own
hidden temporary folder, moves the staging folder's contents into `training_state/` (`move_into`, renames on the
same file system) before that folder is renamed into place. A failed write leaves no shard behind (`discard`).
The ranks must see the checkpoint folder at the same path (one machine, or a shared file system), as DeepSpeed's
own checkpoints need.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from .control import PeerCheckpointError

DEEPSPEED, FSDP2 = "deepspeed", "fsdp2"
STAGING_PREFIX = ".tmp-sharded-"
FSDP2_DIR = "fsdp2_optimizer"  # inside training_state/
META_KEY = "sharded_optimizer"  # checkpoint.json: the strategy whose shards training_state/ holds, else absent


def engine_for(strategy: str, world: int) -> str | None:
    """Which engine's sharded state a run of this plan strategy writes, None when rank 0 holds the optimizer."""
    if strategy.startswith("deepspeed"):
        return DEEPSPEED  # even on one worker: the engine's optimizer is DeepSpeed's own
    if strategy == "fsdp" and world > 1:
        return FSDP2
    return None


def mismatch(written: str | None, written_world: int | None, strategy: str, world: int) -> str | None:
    """Why a checkpoint's optimizer state (`written`: its META_KEY, over `written_world` ranks) cannot be restored by
    a run of `strategy` over `world` ranks, or None when it can."""
    mine = strategy if engine_for(strategy, world) else None
    if written is None and mine is None:
        return None
    if written is None:
        return (f"the checkpoint holds no sharded optimizer state for {strategy} (it was written by another strategy, "
                "or by an older runtime)")
    if mine is None:
        return (f"the checkpoint's optimizer state is sharded ({written} over {written_world} workers), this run's "
                f"is not ({strategy}, {world} worker{'s' if world != 1 else ''})")
    if written != mine:
        return f"the checkpoint's optimizer state was sharded by {written}, this run uses {mine}"
    if written_world != world:
        return (f"the checkpoint's optimizer state is sharded over {written_world} workers ({written}), this run has "
                f"{world}")
    return None


def write_shards(engine: str, trainer: Any, root: str, *, rank: int, world: int, torch: Any) -> str:
    """Collective: every rank writes its shard of the training state into one staging folder under `root`, whose
    path every rank returns once all have written. Raises on every rank when any rank failed (rank 0 then
    removes the folder)."""
    dist = torch.distributed
    multi = world > 1 and dist.is_initialized()
    staging = os.path.join(root, f"{STAGING_PREFIX}{uuid.uuid4().hex[:8]}") if rank == 0 else None
    if multi:
        box = [staging]
        dist.broadcast_object_list(box, src=0)
        staging = box[0]
    assert staging is not None
    err: BaseException | None = None
    try:
        if engine == DEEPSPEED:
            _save_deepspeed(trainer, staging)
        else:
            _save_fsdp2(trainer, staging)
    except Exception as e:  # noqa: BLE001 - every rank learns of it below, then it is raised
        err = e
    ok = err is None
    if multi:
        flag = torch.tensor([1 if ok else 0], dtype=torch.int32,
                            device="cuda" if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        ok = bool(flag.item())
    if not ok:
        if rank == 0:
            discard(staging)
        if err is not None:
            raise err
        raise PeerCheckpointError("another rank could not write its shard of the training state")
    return staging


def move_into(staging: str, state_dir: Path) -> None:
    """Rank 0, inside the checkpoint's temporary folder: the staged shards become part of `state_dir`."""
    src = Path(staging)
    for entry in sorted(src.iterdir()):
        os.rename(entry, state_dir / entry.name)
    src.rmdir()


def discard(staging: str | None) -> None:
    if staging:
        shutil.rmtree(staging, ignore_errors=True)


def _deepspeed_engine(trainer: Any) -> Any:
    from deepspeed import DeepSpeedEngine

    wrapped = trainer.model_wrapped
    return wrapped if isinstance(wrapped, DeepSpeedEngine) else trainer.deepspeed


def _save_deepspeed(trainer: Any, staging: str) -> None:
    # The tag must match transformers' `global_step*` glob (deepspeed_load_checkpoint); the engine names it
    # in `latest`, which its load_checkpoint reads.
    _deepspeed_engine(trainer).save_checkpoint(staging, tag=f"global_step{trainer.state.global_step}",
                                               exclude_frozen_parameters=hasattr(trainer.model, "peft_config"))


def _optimizer(trainer: Any) -> Any:
    """The torch optimizer under accelerate's AcceleratedOptimizer."""
    opt = trainer.optimizer
    return getattr(opt, "optimizer", opt)


def _save_fsdp2(trainer: Any, staging: str) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    state = get_optimizer_state_dict(trainer.model, _optimizer(trainer))
    dcp.save({"optimizer": state}, checkpoint_id=os.path.join(staging, FSDP2_DIR))


def load_fsdp2(trainer: Any, checkpoint: str) -> bool:
    """Collective: restore the FSDP2 optimizer shards and the LR scheduler from `checkpoint` (a training_state/
    folder) into the Trainer's freshly built optimizer; False when the folder holds no FSDP2 shards."""
    folder = os.path.join(checkpoint, FSDP2_DIR)
    if not os.path.isdir(folder):
        return False
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    optimizer = _optimizer(trainer)
    # A state dict of the right shape to load into: before the first step the optimizer has no state, and
    # get_optimizer_state_dict makes it with one step at learning rate 0 on zero gradients (the weights stay).
    state = {"optimizer": get_optimizer_state_dict(trainer.model, optimizer)}
    dcp.load(state, checkpoint_id=folder)
    set_optimizer_state_dict(trainer.model, optimizer, optim_state_dict=state["optimizer"])
    scheduler = os.path.join(checkpoint, "scheduler.pt")
    if trainer.lr_scheduler is not None and os.path.isfile(scheduler):
        trainer.lr_scheduler.load_state_dict(torch.load(scheduler, weights_only=True))
    return True
