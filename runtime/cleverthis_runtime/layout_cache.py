"""Create's quick pre-flight remembers what a model's layout answered.

The architecture checks at create (LoRA target modules, packing, tensor and pipeline parallelism:
torch_backend._architecture_checks) build the model on the meta device. That imports torch and transformers
and costs about 4 CPU-seconds on 2 cores, for every create. Their answer depends only on:

- the model's `config.json`;
- the transformers and peft versions;
- this runtime's code that decides (`CODE`);
- the few training_config fields the checks read (`FIELDS`).

So the answer is kept on disk under a hash of all of these, and the next create of the same model answers
without importing torch. The folder is `$CLEVERTHIS_HOME/cache/layout-checks`, else
`~/.cache/cleverthis/layout-checks`. A model whose `config.json` is not on this node (a Hub id not in the
local cache) is checked every time, as before. Entries are written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from importlib import metadata
from typing import Any

#: the training_config fields the architecture checks read
FIELDS = ("method", "packing", "target_modules", "tensor_parallel_size", "pipeline_parallel_size")
#: the runtime modules whose code decides the answer
CODE = ("layout_cache.py", "lora_targets.py", "methods.py", "parallel.py", "pipeline.py", "torch_backend.py")


def cache_dir() -> str:
    home = os.environ.get("CLEVERTHIS_HOME")
    if home:
        return os.path.join(home, "cache", "layout-checks")
    return os.path.expanduser("~/.cache/cleverthis/layout-checks")


def config_file(base_model: str) -> str | None:
    """The model's config.json on this node: in its folder, or in the model cache for a Hub id (None if absent)."""
    from .download import cached_snapshot, is_hub_id

    folder = base_model if os.path.isdir(base_model) else cached_snapshot(base_model) if is_hub_id(base_model) else None
    path = os.path.join(folder, "config.json") if folder else None
    return path if path and os.path.isfile(path) else None


def key(base_model: str, fields: dict[str, Any]) -> str | None:
    """The hash the answer is kept under, or None when the model's config is not on this node."""
    cfg = config_file(base_model)
    if cfg is None:
        return None
    h = hashlib.sha256()
    with open(cfg, "rb") as f:
        h.update(f.read())
    for dist in ("transformers", "peft"):
        try:
            h.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=none".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for name in CODE:
        with open(os.path.join(here, name), "rb") as f:
            h.update(f.read())
    h.update(json.dumps(fields, sort_keys=True, default=str).encode())
    return h.hexdigest()


def remembered(base_model: str, fields: dict[str, Any], compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """compute()'s answer (JSON-able), read from the cache when this model and these fields were checked
    before; an exception from compute() is not kept."""
    k = key(base_model, fields)
    if k is None:
        return compute()
    path = os.path.join(cache_dir(), k + ".json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        pass
    answer = compute()
    try:
        os.makedirs(cache_dir(), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir(), prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump(answer, f)
        os.replace(tmp, path)
    except OSError:  # a read-only home: the answer is still right, only not kept
        pass
    return answer
