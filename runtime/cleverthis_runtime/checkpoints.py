"""The checkpoint folder: the page's layout, atomic writes, and who owns the folder.

Layout under the checkpoint root (README, "Checkpoints"):
  epoch-1/, epoch-2/, ...   one per finished epoch (HF safetensors weights + tokenizer, adapter_model/ for LoRA)
  epoch-final -> epoch-N    a relative symlink, set when the job finishes its last epoch
  latest -> epoch-N         a relative symlink, moved after every checkpoint
  .cleverthis-owner.json    the job that writes here

A checkpoint is written to a hidden temporary folder and renamed into place, so a partial checkpoint is
never visible under its final name.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

OWNER_FILE = ".cleverthis-owner.json"
META_FILE = "checkpoint.json"
STATE_FILE = "training_state.pt"


class CheckpointError(RuntimeError):
    """The checkpoint folder cannot be used (owned by another job, not writable)."""


def claim(root: str, job: str, *, resuming_from: str | None = None) -> None:
    """Make `job` the owner of `root`, unless another job owns it and we are not continuing from it."""
    r = Path(root)
    owner_file = r / OWNER_FILE
    if owner_file.exists():
        try:
            owner = json.loads(owner_file.read_text()).get("job")
        except ValueError:
            owner = None
        continuing = resuming_from is not None and _is_inside(resuming_from, root)
        if owner and owner != job and not continuing:
            raise CheckpointError(
                f"checkpoint folder {root} belongs to job '{owner}'; choose another location with "
                f"output_dir (spec field or --output-dir), or resume from one of its checkpoints"
            )
    try:
        r.mkdir(parents=True, exist_ok=True)
        _atomic_write_text(owner_file, json.dumps({"job": job, "claimed_at": time.time()}))
    except OSError as e:
        raise CheckpointError(f"checkpoint folder {root} is not writable: {e.strerror or e}") from e


def owner_of(root: str) -> str | None:
    f = Path(root) / OWNER_FILE
    if not f.exists():
        return None
    try:
        return json.loads(f.read_text()).get("job")
    except ValueError:
        return None


def _is_inside(path: str, root: str) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(root))
        return True
    except ValueError:
        return False


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_checkpoint(root: str, name: str, save: Callable[[Path], None], meta: dict[str, Any]) -> str:
    """Run `save(tmp_dir)`, add checkpoint.json, then rename the folder to root/name in one step."""
    r = Path(root)
    tmp = r / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        save(tmp)
        (tmp / META_FILE).write_text(json.dumps({**meta, "name": name, "written_at": time.time()}, indent=2))
        _fsync_tree(tmp)
        final = r / name
        if final.exists():
            # Replace an older checkpoint of the same name: move it aside first, then swap.
            old = r / f".old-{name}-{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return str(final)


def _fsync_tree(p: Path) -> None:
    for f in p.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())


def point(root: str, link: str, target: str) -> None:
    """Atomically make root/link a relative symlink to root/target."""
    r = Path(root)
    tmp = r / f".{link}.{uuid.uuid4().hex[:8]}.lnk"
    os.symlink(target, tmp)
    os.replace(tmp, r / link)


def list_checkpoints(root: str) -> list[dict[str, Any]]:
    """Complete checkpoints under root (those with checkpoint.json), oldest epoch first."""
    r = Path(root)
    out = []
    if not r.is_dir():
        return out
    for d in r.iterdir():
        if d.name.startswith(".") or d.is_symlink() or not (d / META_FILE).exists():
            continue
        try:
            meta = json.loads((d / META_FILE).read_text())
        except ValueError:
            continue
        out.append({**meta, "name": d.name, "path": str(d)})
    out.sort(key=lambda m: (m.get("epoch", 0), m.get("global_step", 0)))
    return out


def read_meta(path: str) -> dict[str, Any] | None:
    f = Path(path) / META_FILE
    if not f.exists():
        return None
    try:
        return json.loads(f.read_text())
    except ValueError:
        return None
