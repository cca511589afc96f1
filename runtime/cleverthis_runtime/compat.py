"""Where this runtime leans on a private name of Ray or torch: each patch says why it exists and which versions
it was read in, and tests/unit/test_compat.py fails loudly when a patched name changes.

- **The rendezvous store listens only on the address it is given.** Ray Train's torch backend sets MASTER_ADDR
  to rank 0's node address and calls `init_process_group("env://")`; torch's `_create_c10d_store` then starts
  the TCPStore server, which binds every interface (`::`), whatever MASTER_ADDR says. On the managed `local`
  cluster that is the one socket of a job open beyond loopback (an unauthenticated key-value store). Rank 0
  binds the socket itself, on MASTER_ADDR, and hands it to the store (`master_listen_fd`, public since torch
  2.4). Read in torch 2.13 (`torch/distributed/rendezvous.py`) and Ray 2.60 (`ray/train/torch/config.py`).
- **A resume restores the training state only** (`trainer_class`). We load the weights ourselves (the original
  base plus the trainable adapter, or the full weights, or a 4-bit base) and hand `training_state/` to
  `Trainer.train(resume_from_checkpoint=...)` for the optimizer, scheduler, RNG, step and data position: the
  Trainer's `_load_from_checkpoint` would load weights from that folder, so it is a no-op. Read in
  transformers 5.24 (`Trainer._load_from_checkpoint(self, resume_from_checkpoint, model=None)`).
  Under DeepSpeed the Trainer does not call it: it calls `deepspeed_load_checkpoint(engine, folder)`, which needs
  the engine's own `global_step*` folder there and loads module, optimizer partitions and scheduler from it
  (sharded_state.py writes them; the module holds the weights we loaded). The Trainer's
  `_load_optimizer_and_scheduler` does not know an FSDP2 model it was not told of (strategies.shard_fsdp2): it
  restores the optimizer's shards with torch.distributed.checkpoint when `training_state/` holds them
  (`sharded_state.load_fsdp2`), else does what the Trainer does. Read in transformers 5.25.
- **Length-grouped batches seeded per epoch** (`trainer_class(sampler=...)`). The Trainer's own
  `train_sampling_strategy="group_by_length"` draws its order from the global RNG when an epoch starts, so a
  resume in the middle of an epoch (RNG restored to the checkpoint's moment) would see another order. The
  Trainer's `_get_train_sampler` returns `methods.grouped_sampler` instead, whose order depends on (seed, epoch)
  alone; the Trainer calls its `set_epoch` through accelerate's wrappers. Read in transformers 5.25.
- **The Trainer's RNG file** (`rng_state`, `set_rng_state`). A checkpoint written between Trainer saves holds
  `rng_state.pth` (`rng_state_{rank}.pth` with several workers) in the layout `Trainer._load_rng_state` reads:
  keys python, numpy, cpu and cuda. Read in transformers 5.24.
- **An FSDP2-sharded model stays sharded** (`keep_sharded`). On CPU, accelerate's `prepare_model` wraps the
  model in DDP; a model whose parameters are DTensors (`fully_shard`) must not be, so `prepare_model` is
  replaced on the Trainer's accelerator and records the model in `Accelerator._models` as the original does.
  Read in accelerate 1.15.
- **One pipeline stage per rank** (`trainer_class(pipeline)`, pipeline.py). The Trainer's gradient clipping and
  norm (`Trainer._clip_grad_norm`, `Trainer._get_grad_norm`) see one stage's gradients only: they take the
  norm over every stage instead. accelerate's `BatchSamplerShard` (`num_processes`, `process_index`) deals each
  rank its own batches: the stages all read every batch, as the Trainer itself does for its rank-aware sampler.
  Read in transformers 5.25 and accelerate 1.16.
- **Tensor parallelism on CPU** (`allow_cpu_tensor_parallel`). The Trainer hands a model loaded with
  `DistributedConfig(tp_size=N)` to accelerate as a `ParallelismConfig`, and accelerate's
  `ParallelismConfig._validate_accelerator` refuses it unless the run is multi-GPU, FSDP2 or DeepSpeed: "ParallelismConfig
  is only compatible DistributedType.FSDP (version 2) or DistributedType.Multi{Device} or DistributedType.DEEPSPEED,
  but got DistributedType.MULTI_CPU." The rest of accelerate's tensor-parallel path (the mesh, one data shard per
  tensor-parallel group, no DDP wrap) runs on CPU over gloo: with the check passed, a 2-worker TP run's per-step
  losses equal the DDP run's (tests/integration/test_parallelism.py). The check is run as for a multi-device run.
  Read in accelerate 1.16.
- **No DatasetManager without datasets** (`lean_trainer`). Ray Train V2's `DatasetsCallback` starts a
  `DatasetManager` actor for every run, Ray Datasets or not: one more Python process per job that imports
  ray.data (~2.4 CPU-seconds on 2 cores, and Ray Data's `_AutoscalingCoordinatorActor` once per cluster).
  Our workers read their own shard of the data (train.py), never a Ray Dataset, so a trainer given no
  `datasets` leaves that callback out of `_create_default_callbacks`; the workers' `dataset_shard_provider`
  is then None, which only `ray.train.get_dataset_shard` reads. Read in Ray 2.60
  (`ray/train/v2/api/data_parallel_trainer.py`, `ray/train/v2/_internal/callbacks/datasets.py`).
- **No PlacementGroupCleaner for a job's own run** (`lean_trainer(pg_cleaner=False)`). Ray Train V2's
  `PlacementGroupCleanerCallback` starts a detached actor per run (~2.2 CPU-seconds of one more process) that
  removes the workers' placement group if the controller dies while its driver lives on. A placement group is
  scoped to the job that made it: when a job's controller dies, `fit` raises, the driver ends and the job's
  placement groups go with it. A sweep's trials keep the cleaner: there the driver runs on to the next trial and a
  dead trial's placement group would hold its CPUs until the sweep ends. Read in Ray 2.60
  (`ray/train/v2/_internal/callbacks/placement_group_callback.py`).
- **A job's control state lives in the GCS's key-value store** (`kv_get`, `kv_put`, `kv_keys`, `kv_delete`;
  control_state.py). The stop request, phase, attempts, cancel acknowledgement and fatal error that the driver
  and rank 0 exchange were an actor per job: one more Python process (~1.3 CPU-seconds to start, and a Ray
  worker's memory) for a few small values. Ray's internal KV (`ray.experimental.internal_kv`, what Ray Tune,
  Serve and the dashboard keep their own state in) holds them in the GCS instead, under our namespace; a put
  that must not overwrite is atomic there, which is what "the first fatal error wins" needs. Read in Ray 2.60.
- **ZeRO-3's full weights** (`zero3_full_state`): DeepSpeed's engine gathers them for a save with
  `_zero3_consolidated_16bit_state_dict()` (what transformers' own ZeRO-3 save calls). Read in DeepSpeed 0.18.
- **peft reads a name transformers 5 deprecated** (`quiet_peft_checkpointing_warning`). Every PeftModel peft
  builds reads `model.is_gradient_checkpointing`, which transformers 5 renamed `is_activation_checkpointing`:
  each LoRA job's log (and chat's) carried a FutureWarning its user could do nothing about. Workers and the chat
  helper ignore that one message (a filter on its text, nothing else); the test fails when peft stops reading
  the old name or transformers changes the text. Read in peft 0.21 (`peft_model.py`), transformers 5.25.
"""

from __future__ import annotations

import importlib
import socket
from typing import Any

#: The private names patched or subclassed here, checked by the test: (module, attribute).
PATCHED = (
    ("torch.distributed.rendezvous", "_create_c10d_store"),
    ("torch.distributed.rendezvous", "_torchelastic_use_agent_store"),
    ("ray.train.torch.config", "_TorchBackend"),
    ("ray.train.v2.api.data_parallel_trainer", "DataParallelTrainer._create_default_callbacks"),
    ("ray.train.v2._internal.callbacks.datasets", "DatasetsCallback"),
    ("ray.train.v2._internal.callbacks.placement_group_callback", "PlacementGroupCleanerCallback"),
    ("transformers.trainer", "Trainer._load_from_checkpoint"),
    ("transformers.trainer", "Trainer._load_rng_state"),
    ("transformers.trainer", "Trainer._load_optimizer_and_scheduler"),
    ("transformers.integrations.deepspeed", "deepspeed_load_checkpoint"),
    ("transformers.trainer", "Trainer._get_train_sampler"),
    ("transformers.trainer", "Trainer._clip_grad_norm"),
    ("transformers.trainer", "Trainer._get_grad_norm"),
    ("accelerate.data_loader", "BatchSamplerShard"),
    ("accelerate.accelerator", "Accelerator.prepare_model"),
    ("accelerate.parallelism_config", "ParallelismConfig._validate_accelerator"),
    ("deepspeed.runtime.engine", "DeepSpeedEngine._zero3_consolidated_16bit_state_dict"),
    ("ray.experimental.internal_kv", "_internal_kv_get"),
    ("ray.experimental.internal_kv", "_internal_kv_put"),
    ("ray.experimental.internal_kv", "_internal_kv_list"),
    ("ray.experimental.internal_kv", "_internal_kv_del"),
)

KV_NAMESPACE = "cleverthis"

#: How transformers' deprecation warning for `is_gradient_checkpointing` begins.
PEFT_CHECKPOINTING_WARNING = "`is_gradient_checkpointing` is deprecated"


def quiet_peft_checkpointing_warning() -> None:
    """Ignore, in this process, transformers' FutureWarning for the `is_gradient_checkpointing` peft reads."""
    import re
    import warnings

    warnings.filterwarnings("ignore", message=re.escape(PEFT_CHECKPOINTING_WARNING), category=FutureWarning)


def kv_get(key: str) -> bytes | None:
    """The value at `key` in Ray's internal KV (our namespace), None when there is none; needs a connected
    process (`ray.init`, or a Ray worker)."""
    from ray.experimental.internal_kv import _internal_kv_get

    return _internal_kv_get(key, namespace=KV_NAMESPACE)


def kv_put(key: str, value: bytes, overwrite: bool = True) -> bool:
    """Store `value` at `key`; with overwrite=False an existing value stays (atomically, in the GCS). True when
    the key was new."""
    from ray.experimental.internal_kv import _internal_kv_put

    return not _internal_kv_put(key, value, overwrite, namespace=KV_NAMESPACE)


def kv_keys(prefix: str) -> list[str]:
    from ray.experimental.internal_kv import _internal_kv_list

    return [k.decode() for k in _internal_kv_list(prefix, namespace=KV_NAMESPACE)]


def kv_delete(prefix: str) -> int:
    """Delete every key under `prefix`; returns how many."""
    from ray.experimental.internal_kv import _internal_kv_del

    return int(_internal_kv_del(prefix, del_by_prefix=True, namespace=KV_NAMESPACE))


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=1024)


def bind_store_to_master_addr() -> None:
    """In a worker process: rank 0's TCPStore listens on MASTER_ADDR only. Idempotent."""
    # `import torch.distributed.rendezvous as ...` would give the function torch.distributed.rendezvous
    rdzv = importlib.import_module("torch.distributed.rendezvous")
    original = rdzv._create_c10d_store
    if getattr(original, "_cleverthis", False):
        return

    def create_store(hostname: str, port: int, rank: int, world_size: int, timeout: Any,
                     use_libuv: bool = True) -> Any:
        if rank != 0 or rdzv._torchelastic_use_agent_store() or not 0 < port < 2**16:
            return original(hostname, port, rank, world_size, timeout, use_libuv)
        sock = _listening_socket(hostname, port)
        return rdzv.TCPStore(host_name=hostname, port=port, world_size=world_size, is_master=True,
                             timeout=timeout, multi_tenant=True, master_listen_fd=sock.detach(),
                             use_libuv=use_libuv)

    create_store._cleverthis = True  # type: ignore[attr-defined]
    rdzv._create_c10d_store = create_store


def torch_config(**kwargs: Any) -> Any:
    """Ray Train's `TorchConfig`, whose backend installs `bind_store_to_master_addr` on every worker before
    Ray sets up the process group (`TorchTrainer(torch_config=...)`)."""
    from ray.train.torch import TorchConfig
    from ray.train.torch.config import _TorchBackend

    class Backend(_TorchBackend):
        def on_start(self, worker_group: Any, backend_config: Any) -> None:
            worker_group.execute(bind_store_to_master_addr)
            super().on_start(worker_group, backend_config)

    class Config(TorchConfig):
        @property
        def backend_cls(self) -> type:
            return Backend

    return Config(**kwargs)


def lean_trainer(trainer_cls: type, pg_cleaner: bool = True) -> type:
    """`trainer_cls` (TorchTrainer, TensorflowTrainer) without Ray Data's DatasetManager actor when it is given
    no `datasets`, and without the PlacementGroupCleaner actor unless `pg_cleaner` (see the module's notes); the
    callbacks are built in the driver and sent to the controller."""
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback

    class Trainer(trainer_cls):  # type: ignore[misc, valid-type]
        def _create_default_callbacks(self) -> list[Any]:
            left_out = (() if self.datasets else (DatasetsCallback,)) + (() if pg_cleaner else
                                                                          (PlacementGroupCleanerCallback,))
            return [c for c in super()._create_default_callbacks() if not isinstance(c, left_out)]

    Trainer.__name__ = Trainer.__qualname__ = trainer_cls.__name__
    return Trainer


def trainer_class(pipeline: Any = None, sampler: Any = None) -> Any:
    """The transformers Trainer whose resume restores the training state and leaves the weights loaded; with a
    `pipeline.Pipeline`, the Trainer that trains one pipeline stage; with a `sampler`, the training order is the
    sampler's (see the module's notes)."""
    from transformers import Trainer

    class _Trainer(Trainer):
        """The weights were loaded before (base + trainable adapter, or the full weights); a resume only
        restores optimizer, scheduler, RNG, step and data position from `training_state/`."""

        def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
            return None

        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            return sampler if sampler is not None else super()._get_train_sampler(train_dataset)

        def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
            from . import sharded_state

            if checkpoint is not None and sharded_state.load_fsdp2(self, checkpoint):
                return
            super()._load_optimizer_and_scheduler(checkpoint)

    if pipeline is None:
        return _Trainer

    class _PipelineTrainer(_Trainer):
        """One stage of a pipeline: the schedule does forward and backward; every rank reads every batch."""

        def training_step(self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> Any:
            model.train()
            return pipeline.train_step(inputs, num_items_in_batch)

        def prediction_step(self, model: Any, inputs: dict[str, Any], prediction_loss_only: bool,
                            ignore_keys: Any = None) -> tuple[Any, None, None]:
            model.eval()
            return pipeline.eval_step(inputs), None, None

        def get_train_dataloader(self) -> Any:
            return _unsharded(super().get_train_dataloader())

        def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
            return _unsharded(super().get_eval_dataloader(eval_dataset))

        def _clip_grad_norm(self, model: Any) -> Any:
            return pipeline.grad_norm(model.parameters(), self.args.max_grad_norm)

        def _get_grad_norm(self, model: Any, grad_norm: Any = None) -> Any:
            return pipeline.grad_norm(model.parameters(), float("inf")) if grad_norm is None else grad_norm

    return _PipelineTrainer


def _unsharded(loader: Any) -> Any:
    """accelerate deals each process its own batches (`BatchSamplerShard`); the stages of a pipeline all read
    every batch. The Trainer neutralises the shard the same way for its own rank-aware sampler."""
    shard = getattr(loader, "batch_sampler", None)
    if shard is not None and hasattr(shard, "num_processes"):
        shard.num_processes, shard.process_index = 1, 0
    return loader


def rng_state(torch: Any) -> dict[str, Any]:
    """This process's RNG state in the Trainer's `rng_state.pth` format."""
    import random

    import numpy as np

    st: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(),
                          "cpu": torch.random.get_rng_state()}
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.random.get_rng_state_all() if torch.distributed.is_initialized() \
            else torch.cuda.random.get_rng_state()
    return st


def set_rng_state(torch: Any, st: dict[str, Any] | None) -> None:
    """Put back a state `rng_state` took."""
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


def keep_sharded(trainer: Any, is_sharded: Any) -> None:
    """The Trainer's accelerator leaves a model for which `is_sharded(model)` holds as it is (no DDP wrap)."""
    acc = trainer.accelerator
    original = acc.prepare_model

    def prepare_model(model: Any, device_placement: Any = None, evaluation_mode: bool = False) -> Any:
        if is_sharded(model):
            acc._models.append(model)
            return model
        return original(model, device_placement=device_placement, evaluation_mode=evaluation_mode)

    acc.prepare_model = prepare_model


def zero3_full_state(engine: Any) -> dict[str, Any] | None:
    """Collective under ZeRO-3: the full 16-bit weights, on CPU, on rank 0 (None elsewhere)."""
    state = engine._zero3_consolidated_16bit_state_dict()
    return {k: v.detach().cpu() for k, v in state.items()} if state else None


class _AsMultiDevice:
    """An accelerator seen as multi-device (for the one check that refuses tensor parallelism on CPU)."""

    multi_device = True

    def __init__(self, accelerator: Any) -> None:
        self._accelerator = accelerator

    def __getattr__(self, name: str) -> Any:
        return getattr(self._accelerator, name)


def allow_cpu_tensor_parallel() -> None:
    """accelerate's ParallelismConfig accepts a multi-process CPU run (idempotent; see the module's notes)."""
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import DistributedType

    original = ParallelismConfig._validate_accelerator
    if getattr(original, "_cleverthis", False):
        return

    def validate(self: Any, accelerator: Any) -> Any:
        if accelerator.distributed_type == DistributedType.MULTI_CPU:
            return original(self, _AsMultiDevice(accelerator))
        return original(self, accelerator)

    validate._cleverthis = True  # type: ignore[attr-defined]
    ParallelismConfig._validate_accelerator = validate
