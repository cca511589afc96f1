"""Distributed strategies beside DDP: DeepSpeed ZeRO 1/2/3 (with CPU offload) through the HF Trainer.

DeepSpeed. training_config.json's `deepspeed` section becomes the Trainer's `deepspeed=` dict: ZeRO stage,
`offload_optimizer` (optimizer states on CPU, stepped by DeepSpeed's `cpu_adam` op) and `offload_param`
(ZeRO-3: parameters on CPU between uses), fp16/bf16. Batch size, accumulation, clipping and the optimizer's
hyper-parameters stay "auto" (taken from the TrainingArguments). DeepSpeed JIT-builds its ops (`cpu_adam`
~65 s on 2 cores) into `TORCH_EXTENSIONS_DIR`: unless the job sets it, it is
`$CLEVERTHIS_HOME/torch_extensions/<environment_key()>` (else under `~/.cache/cleverthis/torch_extensions`), so
a node builds once per environment.
Under ZeRO-3 every rank holds a shard of each weight: checkpoints gather the full weights with a
collective that every rank joins (`gathered_state_dict`), and rank 0 alone writes them. The optimizer states,
sharded under ZeRO 1/2/3 and FSDP2, are written by every rank for an exact resume (sharded_state.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from .spec import TrainingConfig


def torch_extensions_dir() -> str:
    """Where DeepSpeed's JIT-built ops go unless the job says: one folder per Python environment, because torch's
    build commands name the environment's include paths, and a second environment (another checkout's venv) would
    rebuild the ops over the first one's every time they alternate."""
    home = os.environ.get("CLEVERTHIS_HOME")
    root = os.path.join(home, "torch_extensions") if home else os.path.expanduser("~/.cache/cleverthis/torch_extensions")
    return os.path.join(root, environment_key())


def environment_key() -> str:
    """A short name for this Python environment and the versions its ops are built against, e.g. `py3.11-1a2b3c4d`:
    its prefix, torch and deepspeed (a venv re-made at the same path with other versions gets another folder)."""
    import hashlib
    import sys
    from importlib import metadata

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "none"

    what = f"{os.path.realpath(sys.prefix)}|torch {version('torch')}|deepspeed {version('deepspeed')}"
    digest = hashlib.sha1(what.encode()).hexdigest()[:8]
    return f"py{sys.version_info.major}.{sys.version_info.minor}-{digest}"


def deepspeed_config(tc: TrainingConfig) -> dict[str, Any] | None:
    ds = tc.deepspeed
    if ds is None:
        return None
    zero: dict[str, Any] = {"stage": ds.zero_stage}
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": "auto",
        "train_batch_size": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "zero_optimization": zero,
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
    }
    if ds.offload_optimizer and ds.zero_stage > 0:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
        # DeepSpeed's own AdamW: with offload it is the CPU Adam op (a torch optimizer is refused there).
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                        "weight_decay": "auto"}}
    if ds.offload_param:
        zero["offload_param"] = {"device": "cpu", "pin_memory": False}
    if ds.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    return cfg


def setup_deepspeed(tc: TrainingConfig) -> dict[str, Any] | None:
    """Before TrainingArguments: the op cache folder, and DeepSpeed's view of the (Ray-made) process group."""
    cfg = deepspeed_config(tc)
    if cfg is None:
        return None
    path = os.environ.setdefault("TORCH_EXTENSIONS_DIR", torch_extensions_dir())
    os.makedirs(path, exist_ok=True)
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo" if not _cuda() else "nccl")
    return cfg


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def is_zero3(trainer: Any) -> bool:
    plugin = getattr(getattr(trainer, "accelerator", None), "state", None)
    ds = getattr(plugin, "deepspeed_plugin", None) if plugin is not None else None
    return bool(ds is not None and getattr(ds, "zero_stage", 0) == 3)


def gathered_state_dict(trainer: Any) -> dict[str, Any] | None:
    """Collective (every rank calls it): the full weights on rank 0 when they are sharded, else None."""
    from . import pipeline

    if trainer is not None and pipeline.is_stage(trainer.model):  # each stage's weights, merged on rank 0
        return pipeline.gathered_state(trainer.model)
    if trainer is not None and _has_dtensor(trainer.model):  # FSDP2: full weights, on rank 0 only
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(trainer.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return full or None
    if not getattr(trainer, "is_deepspeed_enabled", False) or not is_zero3(trainer):
        return None
    engine = trainer.model_wrapped if trainer.model_wrapped is not trainer.model else trainer.deepspeed
    from . import compat

    return compat.zero3_full_state(engine)



@contextlib.contextmanager
def saving_gathered(model: Any) -> Iterator[None]:
    """Rank 0 alone writes weights that every rank already gathered (`gathered_state_dict`): a model that
    transformers split as it loaded it (tensor parallelism, parallel.py) would gather them again in
    `save_pretrained`, a collective with a barrier that the other ranks never join. Without its
    `distributed_config` for the write, save_pretrained writes the given full weights as for a plain model."""
    config = getattr(model, "config", None)
    held = getattr(config, "distributed_config", None)
    if held is None:
        yield
        return
    config.distributed_config = None
    try:
        yield
    finally:
        config.distributed_config = held


def shard_fsdp2(model: Any, world: int) -> Any:
    """FSDP2: `fully_shard` each decoder layer, then the root, over a 1-D device mesh of all workers (a CPU
    mesh on gloo works, where Ray's `prepare_model(parallel_strategy="fsdp")` and accelerate's FSDP refuse
    CPU). Parameters, gradients and optimizer states are sharded; each layer is gathered for its compute."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cuda" if torch.cuda.is_available() else "cpu", (world,))
    for module in list(model.modules()):
        if type(module).__name__.endswith("DecoderLayer"):
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def keep_sharded(trainer: Any) -> None:
    """The Trainer's accelerator wraps CPU training in DDP; an FSDP2-sharded model must stay as it is."""
    from . import compat

    compat.keep_sharded(trainer, _has_dtensor)


def _has_dtensor(model: Any) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover
        return False
    return any(isinstance(p, DTensor) for p in model.parameters())

def describe(trainer: Any) -> dict[str, Any]:
    """What the Trainer actually runs (for the `strategy` event): the wrapper, and whether weights are sharded."""
    model = trainer.model
    try:
        from torch.distributed.tensor import DTensor

        sharded = any(isinstance(p, DTensor) for p in model.parameters())
    except ImportError:  # pragma: no cover
        sharded = False
    tp = int(getattr(model, "_tp_size", None) or 1)
    fsdp = sharded and (tp == 1 or int(getattr(model, "_fsdp_size", None) or 1) > 1)
    out: dict[str, Any] = {"wrapper": type(trainer.model_wrapped).__name__, "model_class": type(model).__name__,
                           "fsdp2_sharded": fsdp, "deepspeed": bool(getattr(trainer, "is_deepspeed_enabled", False)),
                           # what transformers' is_activation_checkpointing reads, under PEFT's and DDP's wrappers too
                           "activation_checkpointing": any(getattr(m, "gradient_checkpointing", False) is True
                                                           for m in model.modules())}
    if getattr(model, "pp", 1) > 1:  # this rank's pipeline stage (pipeline.py)
        lo, hi = model.layers
        out["pipeline"] = {"stage": model.rank, "stages": model.pp, "layers": [lo, hi - 1],
                           "embeddings": model.first, "head": model.last,
                           "parameters": sum(p.numel() for p in model.parameters())}
    if tp > 1:  # transformers' tensor-parallel loading (parallel.py): the mesh it built, what it split
        mesh = getattr(model, "_device_mesh", None)
        out["tensor_parallel"] = {
            "tp_size": tp, "mesh": dict(zip(mesh.mesh_dim_names, mesh.shape, strict=True)) if mesh is not None else None,
            "split_parameters": sum(1 for p in model.parameters() if isinstance(p, DTensor)),
            "sharded_modules": dict(getattr(model.config, "base_model_tp_plan", None) or {})}
    if out["deepspeed"]:
        out["zero_stage"] = 3 if is_zero3(trainer) else int(trainer.accelerator.state.deepspeed_plugin.zero_stage)
    return out
