"""The checkpoint folder: the page's layout, atomic writes, and who owns the folder.

Layout under the checkpoint root (README, "Checkpoints"):
  epoch-1/, epoch-2/, ...   one per finished epoch (HF safetensors weights + tokenizer, adapter_model/ for LoRA,
                            training_state/ for an exact resume, checkpoint.json)
  epoch-2-step-37/          a cancel in the middle of epoch 2, after global step 37 (checkpoint.json:
                            "partial": true); same contents, resumes at that exact position
  epoch-final -> epoch-N    a relative symlink, set when the job finishes its last epoch
  best -> epoch-K           lowest validation loss
  latest -> ...             a relative symlink, moved after every checkpoint
  .cleverthis-owner.json    the job that writes here

A checkpoint is written to a hidden temporary folder and renamed into place, so a partial checkpoint is
never visible under its final name.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

OWNER_FILE = ".cleverthis-owner.json"
META_FILE = "checkpoint.json"
STATE_DIR = "training_state"  # the transformers Trainer's resume files (optimizer, scheduler, RNG, trainer state)
ADAPTER_DIR = "adapter_model"
# Tests only: make a checkpoint write fail like a full disk or a denied write, e.g. "epoch-2:ENOSPC".
FAULT_ENV = "CLEVERTHIS_FAULT_CHECKPOINT"


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
        continuing = resuming_from is not None and is_inside(resuming_from, root)
        if owner and owner != job and not continuing:
            raise CheckpointError(
                f"checkpoint folder {root} belongs to job '{owner}'; choose another location with "
                f"output_dir (spec field or --output-dir), or resume from one of its checkpoints"
            )
    try:
        r.mkdir(parents=True, exist_ok=True)
        _atomic_write_text(owner_file, json.dumps({"job": job, "claimed_at": time.time()}))
        cleanup_stale(root)
        for left in r.glob(f"{JOB_FILES}*"):  # an earlier job's, left by a crash (add_job_files)
            shutil.rmtree(left, ignore_errors=True)
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


def is_inside(path: str, root: str) -> bool:
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
        _injected_fault(name, tmp)
        (tmp / META_FILE).write_text(json.dumps({**meta, "name": name, "written_at": time.time()}, indent=2))
        follow_umask(tmp)
        _fsync_tree(tmp)
        final = r / name
        move_into_place(tmp, final)
        fsync_path(r)  # the rename itself is durable once the root's entry is
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return str(final)


def umask() -> int:
    """The process's umask, read without changing it (os.umask sets it, which other threads would see)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def follow_umask(root: Path) -> None:
    """Give every file and folder under `root` the mode the umask gives a new one: safetensors' writer leaves its
    weights 0600, so a serving process of another account could read the tokenizer beside them, not the model."""
    mask = umask()
    os.chmod(root, 0o777 & ~mask)
    for d, dirs, files in os.walk(root):
        for name in dirs:
            p = os.path.join(d, name)
            if not os.path.islink(p):
                os.chmod(p, 0o777 & ~mask)
        for name in files:
            p = os.path.join(d, name)
            if not os.path.islink(p):
                os.chmod(p, 0o666 & ~mask)


# -- LoRA checkpoints: the adapter in each, merged weights where they are loaded from ----------------------------
#: the files of a model's full weights at a checkpoint's root (a LoRA checkpoint has them in best and epoch-final)
MERGED_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def has_merged(path: str | Path) -> bool:
    return (Path(path) / "config.json").is_file()


def adapter_at_root(folder: Path) -> None:
    """A copy of the adapter at the checkpoint's root, beside `adapter_model/`: transformers loads a folder with
    `adapter_config.json` as its base plus the adapter, so `AutoModelForCausalLM.from_pretrained(checkpoint)` works
    for a checkpoint without merged weights too (the adapter is a few MB; the merged weights are the model's size)."""
    for name in ADAPTER_FILES:
        src = folder / ADAPTER_DIR / name
        if src.is_file():
            shutil.copyfile(src, folder / name)


def _is_merged_file(name: str) -> bool:
    return name in MERGED_FILES or (name.startswith("model-") and name.endswith(".safetensors"))


def drop_merged(path: str) -> None:
    """Replace a LoRA checkpoint's merged weights by the adapter at its root (it is no longer best or final), in one
    rename: a reader sees the folder before or after, never a mix."""
    src = Path(path)
    if not has_merged(src) or not (src / ADAPTER_DIR).is_dir():
        return
    tmp = src.parent / f".tmp-{src.name}-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copytree(src, tmp, symlinks=True, ignore=lambda _d, names: [n for n in names if _is_merged_file(n)])
        adapter_at_root(tmp)
        _set_meta(tmp, merged=False)
        _fsync_tree(tmp)
        move_into_place(tmp, src)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def add_merged(path: str, write: Callable[[Path], None]) -> None:
    """Give a LoRA checkpoint its merged weights (`write(folder)` saves them), in one rename."""
    src = Path(path)
    if has_merged(src):
        return
    tmp = src.parent / f".tmp-{src.name}-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copytree(src, tmp, symlinks=True, ignore=lambda _d, names: [n for n in names if n in ADAPTER_FILES])
        write(tmp)
        _set_meta(tmp, merged=True)
        follow_umask(tmp)
        _fsync_tree(tmp)
        move_into_place(tmp, src)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _set_meta(folder: Path, **values: Any) -> None:
    meta = read_meta(str(folder)) or {}
    (folder / META_FILE).write_text(json.dumps({**meta, **values}, indent=2))


def becomes_best(eval_loss: float | None, best: tuple[float, str] | None) -> bool:
    """Whether a checkpoint of this validation loss takes the `best` link (link_best's rule)."""
    return eval_loss is not None and (best is None or eval_loss < best[0])


def prune(root: str, job: str, keep: int | None, emit: Any = None) -> list[str]:
    """Delete this job's checkpoints beyond its last `keep`, never the targets of best, epoch-final and latest;
    returns the names deleted (each announced by a `checkpoint` event with `deleted`)."""
    if not keep:
        return []
    r = Path(root)
    protected = {os.path.realpath(r / link) for link in ("best", "epoch-final", "latest") if (r / link).is_symlink()}
    mine = [c for c in list_checkpoints(root) if c.get("job") == job]
    deleted = []
    for c in mine[:-keep]:
        if os.path.realpath(c["path"]) in protected:
            continue
        old = r / f".old-{c['name']}-{uuid.uuid4().hex[:8]}"
        os.rename(c["path"], old)  # out of sight in one step, then removed
        shutil.rmtree(old, ignore_errors=True)
        deleted.append(c["name"])
        if emit is not None:
            emit("checkpoint", name=c["name"], path=c["path"], deleted=True)
    return deleted


def move_into_place(tmp: Path, final: Path) -> None:
    """Rename a finished temporary folder to `final` in one step; an older folder of that name is moved aside
    first, then removed (a reader sees the old one or the new one, never a mix)."""
    if final.exists():
        old = final.parent / f".old-{final.name}-{uuid.uuid4().hex[:8]}"
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)


def _injected_fault(name: str, tmp: Path) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    target, _, kind = spec.partition(":")
    if target != name:
        return
    code = {"ENOSPC": errno.ENOSPC, "EACCES": errno.EACCES, "EROFS": errno.EROFS}.get(kind or "ENOSPC", errno.EIO)
    raise OSError(code, os.strerror(code), str(tmp / "model.safetensors"))


DONE_MARK = ".complete"
JOB_FILES = ".job-files-"


def remove_job_files(root: str, key: str) -> None:
    shutil.rmtree(Path(root) / f"{JOB_FILES}{key}", ignore_errors=True)


def cleanup_stale(root: str) -> list[str]:
    """Remove temporary folders left by a writer that was killed mid-write (never visible as checkpoints)."""
    r = Path(root)
    removed = []
    if not r.is_dir():
        return removed
    for d in r.iterdir():
        if d.name.startswith((".tmp-", ".old-")) and d.is_dir() and not d.is_symlink():
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d.name)
    return removed


def partial_name(epoch_in_progress: int, global_step: int) -> str:
    """The name of a mid-epoch checkpoint: `epoch-2-step-37` = in epoch 2, after global step 37."""
    return f"epoch-{epoch_in_progress}-step-{global_step}"


PARTIAL_RE = re.compile(r"^epoch-(\d+)-step-(\d+)$")


def latest_of_job(root: str, job: str) -> dict[str, Any] | None:
    """The newest complete checkpoint that `job` wrote under root (what a recovery continues from)."""
    mine = [c for c in list_checkpoints(root) if c.get("job") == job]
    return mine[-1] if mine else None


def original_base(path: str, limit: int = 64) -> str:
    """The base model a checkpoint lineage started from (a resumed job's base is a checkpoint: follow it)."""
    cur = path
    for _ in range(limit):
        meta = read_meta(cur) if os.path.isdir(cur) else None
        if meta is None:
            return cur
        nxt = meta.get("original_base_model") or meta.get("base_model")
        if not nxt or os.path.realpath(nxt) == os.path.realpath(cur):
            return cur
        cur = nxt
    return cur


# -- the cancel grace -------------------------------------------------------------------------------------------
WRITE_BYTES_PER_S = 200e6  # a conservative sequential write speed for the checkpoint folder
GRACE_FLOOR_S = 20
GRACE_CAP_S = 3600


def estimate_parameters(base_model: str) -> float | None:
    """Parameters of a model from its local config.json, else from a size tag in its name (7b, 8x7B, 1.1B)."""
    cfg_file = Path(base_model) / "config.json"
    if cfg_file.is_file():
        try:
            cfg = json.loads(cfg_file.read_text())
            h = int(cfg["hidden_size"])
            layers = int(cfg["num_hidden_layers"])
            inter = int(cfg.get("intermediate_size") or 4 * h)
            vocab = int(cfg.get("vocab_size") or 32000)
            return float(2 * vocab * h + layers * (4 * h * h + 3 * h * inter))
        except (ValueError, KeyError, TypeError):
            pass
    name = os.path.basename(base_model.rstrip("/")).lower()
    m = re.search(r"(\d+)x(\d+(?:\.\d+)?)b(?![a-z])", name)
    if m:
        return float(m.group(1)) * float(m.group(2)) * 1e9
    m = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)b(?![a-z])", name)
    if m:
        return float(m.group(1)) * 1e9
    m = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)m(?![a-z])", name)
    if m:
        return float(m.group(1)) * 1e6
    return None


def checkpoint_bytes(params: float, method: str | None) -> float:
    """Bytes one checkpoint writes: fp32 weights (merged, for LoRA) plus, for a full fine-tune, Adam's two
    fp32 moments (a LoRA optimizer state is small)."""
    per_param = 4.0 if method in ("lora", "qlora") else 12.0
    return params * per_param


def stop_grace_seconds(base_model: str, method: str | None = None, override: float | None = None) -> int:
    """RAY_JOB_STOP_WAIT_TIME_S: how long a cancelled job may take to write its checkpoint before Ray
    SIGKILLs it. Rule: 20 s (finish the current step, print, exit) + 2 x one checkpoint write at 200 MB/s,
    capped at one hour; the model size comes from its config.json or its name (7B when unknown)."""
    if override is not None:
        return int(override)
    params = estimate_parameters(base_model) or 7e9
    write_s = checkpoint_bytes(params, method or "lora") / WRITE_BYTES_PER_S
    return int(min(GRACE_CAP_S, GRACE_FLOOR_S + round(2 * write_s)))


def _fsync_tree(p: Path) -> None:
    """Each file once, then each folder once (its entries: the files' names)."""
    folders = [p]
    for f in p.rglob("*"):
        if f.is_symlink():
            continue
        if f.is_dir():
            folders.append(f)
        elif f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    for d in reversed(folders):
        fsync_path(d)


def fsync_path(d: Path) -> None:
    """fsync a file or a folder (a folder's entries: the names of what it holds)."""
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def add_job_files(root: str, key: str, dest: Path, write: Callable[[Path], None]) -> None:
    """Files that stay the same for a whole run of a job (the tokenizer's, with its chat template): serialised
    once, into root/.job-files-<key>/, then copied byte for byte into each checkpoint folder `dest` (a copy, not
    a link: a user who edits one checkpoint's tokenizer_config.json changes that checkpoint only). `key` is one
    run's (the job's name and a random part); the folder is removed when the run's training ends, finished or
    failed (`remove_job_files`, train.py), or by the next job's claim on the folder after a killed worker."""
    shared = Path(root) / f"{JOB_FILES}{key}"
    if not (shared / DONE_MARK).exists():
        tmp = Path(root) / f".tmp-job-files-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            write(tmp)
            (tmp / DONE_MARK).write_text("")
            if shared.exists():
                shutil.rmtree(shared, ignore_errors=True)
            os.rename(tmp, shared)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    for f in sorted(shared.rglob("*")):
        if f.name == DONE_MARK:
            continue
        target = dest / f.relative_to(shared)
        if f.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)


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


def size_of(path: str) -> int:
    """Bytes of the files in a checkpoint folder (links not followed)."""
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            p = os.path.join(d, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def publish(root: str, job: str, name: str, save: Any, meta: dict[str, Any]) -> str:
    """Write checkpoint `name` atomically and point `latest` at it; a failed write is a CheckpointError that
    names the folder and the newest checkpoint still intact."""
    try:
        path = write_checkpoint(root, name, save, meta)
        point(root, "latest", name)
    except OSError as e:
        latest = latest_of_job(root, job) or {}
        raise CheckpointError(
            f"cannot write checkpoint {name} in checkpoint folder {root}: [Errno {e.errno}] {e.strerror or e}"
            + (f"; earlier checkpoints are intact (latest: {latest.get('name')})" if latest.get("name") else "")
        ) from e
    return path


def link_epoch(root: str, name: str, path: str, *, completed: int, planned_epochs: int, eval_loss: float | None,
               best: tuple[float, str] | None, emit: Any) -> tuple[float, str] | None:
    """After an epoch's checkpoint: point `best` at it when its validation loss is the lowest so far and
    `epoch-final` after the job's last epoch (each announced by a `checkpoint` event); returns the best."""
    best = link_best(root, name, path, eval_loss=eval_loss, best=best, emit=emit)
    if completed == planned_epochs:
        link_final(root, name, path, epoch=completed, emit=emit)
    return best


def link_best(root: str, name: str, path: str, *, eval_loss: float | None, best: tuple[float, str] | None,
              emit: Any) -> tuple[float, str] | None:
    """Point `best` at this checkpoint when its validation loss is the lowest so far; returns the best."""
    if becomes_best(eval_loss, best):
        best = (eval_loss, path)
        point(root, "best", name)
        emit("checkpoint", name="best", path=os.path.join(root, "best"), target=path, eval_loss=eval_loss)
    return best


def link_final(root: str, name: str, path: str, *, epoch: int, emit: Any) -> None:
    """Point `epoch-final` at the job's last checkpoint (after its last epoch, or where it stopped early)."""
    point(root, "epoch-final", name)
    emit("checkpoint", name="epoch-final", path=os.path.join(root, "epoch-final"), target=path, epoch=epoch)


def existing_best(root: str) -> tuple[float, str] | None:
    """(validation loss, folder) of the `best` link a previous run of the job left, if any."""
    link = os.path.join(root, "best")
    meta = read_meta(link) if os.path.isdir(link) else None
    if meta and meta.get("eval_loss") is not None:
        return float(meta["eval_loss"]), os.path.realpath(link)
    return None
