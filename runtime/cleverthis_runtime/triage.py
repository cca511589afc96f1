"""Failure triage: a failed job's error classified, paired with the product page's troubleshooting advice.

An exception is classified by its type first (`classify_exception`: the class names along its MRO and its causes,
and the errno of an OSError), its message only when no type says; an error known only as text (Ray's message of a
job whose runtime printed nothing) by its patterns (`classify`).
"""

from __future__ import annotations

import errno
import re

# (kind, patterns, advice) in priority order; the first kind whose pattern matches wins.
RULES: list[tuple[str, tuple[str, ...], str]] = [
    ("out_of_memory", (r"out of memory", r"running low on memory", r"OutOfMemoryError", r"CUDA error: out of memory",
                       r"MemoryError"),
     "The model + optimizer + activations exceed available memory. Try: 1. QLoRA (method: qlora in "
     "training_config.json) 2. a smaller batch size 3. gradient checkpointing 4. DeepSpeed ZeRO stage 2 or 3."),
    # Never matched by text: the service names it when memory ran out while the job's phase was loading_data.
    ("data_out_of_memory", (),
     "The node ran out of memory while the job read or tokenized its dataset, before any training step: the model "
     "is not the cause (QLoRA or a smaller batch would not help). The runtime reads data memory-mapped and "
     "tokenizes it lazily; what holds a whole dataset in memory is packing (set packing to false), a TensorFlow "
     "job (its loop keeps every row), or other jobs on the node. Give the job fewer workers per node or a node "
     "with more memory."),
    ("disk_full", (r"No space left on device", r"ENOSPC", r"Disk quota exceeded"),
     "A node ran out of disk while writing. Free space under the checkpoint folder (or set output_dir "
     "elsewhere); earlier checkpoints are intact."),
    ("permission_denied", (r"Permission denied", r"EACCES", r"Read-only file system", r"EROFS",
                           r"Operation not permitted"),
     "A node was refused access to a path (permissions, or a read-only mount). Make it accessible to the user "
     "that runs Ray on every node (for a failed checkpoint write: the checkpoint folder, or set output_dir "
     "elsewhere); earlier checkpoints are intact."),
    ("gated_model", (r"GatedRepoError", r"gated repo", r"401 Client Error", r"Access to model .* is restricted"),
     "The model is gated or needs authentication: accept its licence on the Hub and set HF_TOKEN on the "
     "cluster nodes (or pre-fetch it with `%train download`)."),
    ("model_not_cached", (r"LocalEntryNotFoundError", r"offline mode", r"HF_HUB_OFFLINE", r"couldn't connect to",
                          r"Can't load .* is not a local folder", r"is not a local folder and is not a valid model"),
     "The base model is neither a local path nor in the nodes' model cache, and it cannot be downloaded. "
     "Pre-fetch it with `%train download MODEL --cluster C`, or pass a local path."),
    ("dataset", (r"DatasetError", r"dataset path", r"broken JSON", r"unknown record shape", r"mixes formats"),
     "The dataset could not be used: check the path (it must exist on every node) and the format named "
     "in the error (line number included)."),
    ("checkpoint", (r"CheckpointError", r"checkpoint folder"),
     "The checkpoint folder cannot be used: choose another location with output_dir."),
    ("worker_lost", (r"ActorDiedError", r"ActorUnavailableError", r"WorkerGroupError", r"node .* died",
                     r"SIGKILL", r"killed", r"RayActorError"),
     "A training worker died (node lost, killed, or out of host memory). Check the cluster's nodes; "
     "resume from the last checkpoint."),
    ("spec", (r"ValidationError", r"invalid job spec", r"training_config"),
     "The job spec or training_config.json is invalid: the message names the key."),
]


# exception class name -> kind (matched along the MRO, so torch.cuda.OutOfMemoryError and subclasses count)
TYPES: dict[str, str] = {
    "OutOfMemoryError": "out_of_memory", "MemoryError": "out_of_memory",
    "PermissionError": "permission_denied",
    "GatedRepoError": "gated_model",
    "LocalEntryNotFoundError": "model_not_cached", "ModelNotCached": "model_not_cached",
    "DatasetError": "dataset", "CheckpointError": "checkpoint", "ValidationError": "spec",
    "ActorDiedError": "worker_lost", "ActorUnavailableError": "worker_lost", "RayActorError": "worker_lost",
    "NodeDiedError": "worker_lost", "WorkerGroupError": "worker_lost",
}
ERRNOS = {errno.ENOSPC: "disk_full", errno.EDQUOT: "disk_full", errno.EACCES: "permission_denied",
          errno.EROFS: "permission_denied", errno.EPERM: "permission_denied"}


def kind_of_exception(exc: BaseException) -> str | None:
    """The kind the types along its chain of causes say (a CheckpointError raised from a full disk's OSError is
    disk_full: where several say, the first in RULES' order wins), or None."""
    found: set[str] = set()
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in ERRNOS:
            found.add(ERRNOS[e.errno])
        found.update(TYPES[c.__name__] for c in type(e).__mro__ if c.__name__ in TYPES)
        e = e.__cause__ or e.__context__
    return next((kind for kind, _, _ in RULES if kind in found), None)


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """(kind, advice) for an exception: by its type, else by its text."""
    kind = kind_of_exception(exc)
    return (kind, advice_for(kind)) if kind else classify(f"{type(exc).__name__}: {exc}")


def classify(text: str) -> tuple[str, str]:
    """(kind, advice) for an error message or traceback; ("training", generic advice) otherwise."""
    for kind, patterns, advice in RULES:
        if any(re.search(p, text, flags=re.IGNORECASE) for p in patterns):
            return kind, advice
    return "training", "Training crashed: see the traceback below and the job's log."


def advice_for(kind: str) -> str:
    for k, _, advice in RULES:
        if k == kind:
            return advice
    return "Training crashed: see the traceback below and the job's log."
