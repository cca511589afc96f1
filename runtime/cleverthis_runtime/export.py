"""Export merged: a checkpoint written as a standalone model folder in fp16 or bf16, on the cluster.

`python -m cleverthis_runtime.export CHECKPOINT --dtype bf16|fp16` runs as a short Ray job (the service's
"Export merged", `%train export`). A LoRA checkpoint holds the merged weights next to its `adapter_model/`
(checkpoints.py); the export loads them in the chosen precision and writes the weights, config and tokenizer,
without the adapter and the training state, to `<checkpoint root>/exports/<checkpoint>-merged-<dtype>`,
atomically (a temporary folder renamed into place, an older export of that name replaced). The job prints one
`export` event: {source, path, dtype, size_bytes} or {source, error}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from . import checkpoints, events

DTYPES = ("bf16", "fp16")
EXPORTS_DIR = "exports"
META_FILE = "export.json"


def export_path(source: str, dtype: str) -> Path:
    src = Path(source).resolve()
    return src.parent / EXPORTS_DIR / f"{src.name}-merged-{dtype}"


def export(source: str, dtype: str) -> dict[str, Any]:
    """Write the export of checkpoint `source`; returns {source, path, dtype, size_bytes}."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)} (got '{dtype}')")
    src = Path(source).resolve()  # `epoch-final` and `best` are links to a checkpoint
    adapter_only = not checkpoints.has_merged(src) and (src / checkpoints.ADAPTER_DIR).is_dir()
    if not (src / "config.json").is_file() and not adapter_only:
        raise ValueError(f"'{source}' is not a model checkpoint: it has no config.json")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    if adapter_only:  # a LoRA epoch that was neither best nor final: its base plus the adapter, merged here
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(checkpoints.original_base(str(src)), dtype=torch_dtype)
        model = PeftModel.from_pretrained(base, str(src / checkpoints.ADAPTER_DIR)).merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch_dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(src))
    final = export_path(source, dtype)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        meta = checkpoints.read_meta(str(src)) or {}
        (tmp / META_FILE).write_text(json.dumps({
            "source": str(src), "dtype": dtype, "base_model": meta.get("base_model"), "epoch": meta.get("epoch"),
            "global_step": meta.get("global_step"), "exported_at": time.time()}, indent=2))
        checkpoints.follow_umask(tmp)
        checkpoints.move_into_place(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"source": str(src), "path": str(final), "dtype": dtype, "size_bytes": checkpoints.size_of(str(final))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cleverthis_runtime.export", description=__doc__)
    ap.add_argument("checkpoint")
    ap.add_argument("--dtype", default="bf16", choices=DTYPES)
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    events.set_source("export")
    events.keep_in_ray_logs()
    try:
        result = export(a.checkpoint, a.dtype)
    except (OSError, ValueError) as e:
        events.emit("export", source=a.checkpoint, error=str(e))
        return 1
    events.emit("export", **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
