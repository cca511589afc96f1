"""The model cache: pre-fetch a Hub model onto every node (`%train download`), and download with progress.

`python -m cleverthis_runtime.download MODEL [--revision R]` runs as a short Ray job: one task pinned to each
alive node (`NodeAffinitySchedulingStrategy(soft=False)`) calls `huggingface_hub.snapshot_download` into that
node's own cache (`HF_HOME`, default `~/.cache/huggingface`), and the job prints one `download` event with a
result per node: `cached` (already there: nothing fetched), `downloaded`, or `error` with the reason.

The training runtime calls `ensure_model` before `loading_model`: a local path is used as is, a cached Hub id
starts without any network access, and an uncached one is downloaded with `phase: downloading` and
`download_progress` events; under `HF_HUB_OFFLINE=1` an uncached id fails at once, naming the model and the
pre-fetch command.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import time
from typing import Any

from . import events

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
# Formats transformers' PyTorch classes never read (Flax/TF/ONNX exports, Meta's consolidated originals).
IGNORE = ["original/*", "*.msgpack", "*.h5", "*.ot", "*.onnx", "*.onnx_data", "*.tflite", "consolidated*.pth"]
PROGRESS_EVERY_S = 2.0


class ModelNotCached(RuntimeError):
    """The model is neither a local path nor in this node's cache, and it may not be downloaded."""


def is_hub_id(name: str) -> bool:
    return not os.path.exists(name) and not name.startswith(("/", ".", "~")) and bool(HUB_ID.match(name))


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def cache_dir() -> str:
    """This node's Hub cache, read from the environment now (huggingface_hub reads it once, at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return os.path.join(home, "hub")


def cached_snapshot(repo_id: str, revision: str | None = None) -> str | None:
    """The local snapshot folder of a cached model, without any network access; None when not cached."""
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(repo_id, revision=revision, local_files_only=True, cache_dir=cache_dir())
    except Exception:  # LocalEntryNotFoundError, a missing snapshot folder...
        return None
    return path if os.path.isdir(path) and os.listdir(path) else None


def not_cached_message(repo_id: str) -> str:
    return (
        f"model '{repo_id}' is not in the model cache of node {socket.gethostname()} ({cache_dir()}) and "
        f"HF_HUB_OFFLINE=1 forbids downloading it: pre-fetch it onto every node with "
        f"`%train download {repo_id} --cluster C` (or `cleverthis-train download {repo_id} --cluster C`) from a "
        f"setting where the nodes can reach the Hub, or copy the model folder to the nodes and pass its local path"
    )


def _progress_class(emit: Any, repo_id: str) -> Any:
    """A tqdm class that turns huggingface_hub's byte counters into throttled `download_progress` events."""
    from tqdm import tqdm

    class _Progress(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("name", None)
            kwargs["disable"] = False
            kwargs["file"] = open(os.devnull, "w")  # noqa: SIM115 - closed with the bar
            super().__init__(*args, **kwargs)
            self._last = 0.0

        def update(self, n: float | None = 1) -> bool | None:
            out = super().update(n)
            now = time.time()
            if self.unit == "B" and (now - self._last >= PROGRESS_EVERY_S or (self.total and self.n >= self.total)):
                self._last = now
                emit("download_progress", model=repo_id, node=socket.gethostname(), what=str(self.desc or ""),
                     downloaded=int(self.n), total=int(self.total or 0) or None)
            return out

        def close(self) -> None:
            super().close()
            try:
                self.fp.close()
            except Exception:
                pass

    return _Progress


def download(repo_id: str, revision: str | None = None, emit: Any = None) -> str:
    """Fetch a model into this node's cache (what the product page calls model.download); returns its folder."""
    from huggingface_hub import snapshot_download

    kwargs: dict[str, Any] = {"revision": revision, "ignore_patterns": IGNORE, "cache_dir": cache_dir()}
    if emit is not None:
        kwargs["tqdm_class"] = _progress_class(emit, repo_id)
    return str(snapshot_download(repo_id, **kwargs))


def ensure_model(name: str, emit: Any = None, revision: str | None = None) -> str:
    """A folder holding the model: the local path itself, the cached snapshot, or a fresh download."""
    if os.path.exists(name) or not is_hub_id(name):
        return name
    path = cached_snapshot(name, revision)
    if path:
        return path
    if offline():
        raise ModelNotCached(not_cached_message(name))
    if emit is not None:
        emit("phase", phase="downloading", model=name, cache_dir=cache_dir())
    t0 = time.time()
    path = download(name, revision, emit)
    if emit is not None:
        emit("download_done", model=name, path=path, seconds=round(time.time() - t0, 1))
    return path


def _folder_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size  # follows the snapshot's links to blobs
            except OSError:
                pass
    return total


def prefetch_here(repo_id: str, revision: str | None = None) -> dict[str, Any]:
    """One node's part of `%train download`: cached, downloaded, or the error (never raises)."""
    import ray

    t0 = time.time()
    out: dict[str, Any] = {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
                           "cache_dir": None, "status": "error", "path": None}
    try:
        out["cache_dir"] = cache_dir()
        path = cached_snapshot(repo_id, revision)
        if path:
            out.update(status="cached", path=path)
        elif offline():
            out.update(error=not_cached_message(repo_id), kind="model_not_cached")
        else:
            events.set_source(f"download-{out['node_id'][:8]}")
            path = download(repo_id, revision, events.emit)
            out.update(status="downloaded", path=path)
        if out["path"]:
            out["bytes"] = _folder_bytes(out["path"])
    except Exception as e:
        from .triage import classify_exception

        out.update(error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:1000],
                   kind=classify_exception(e)[0])
    out["seconds"] = round(time.time() - t0, 2)
    return out


def prefetch_all_nodes(repo_id: str, revision: str | None = None) -> list[dict[str, Any]]:
    """One task pinned to each alive node; the per-node results, in node order."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    task = ray.remote(num_cpus=0, max_retries=0)(prefetch_here)
    refs = [
        task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)).remote(
            repo_id, revision)
        for n in nodes
    ]
    results = []
    for n, ref in zip(nodes, refs, strict=True):
        try:
            r = ray.get(ref)
        except Exception as e:  # the node died, or the task could not start there
            r = {"node_id": n["NodeID"], "status": "error", "error": f"{type(e).__name__}: {e}"[:1000],
                 "kind": "worker_lost"}
        r["node_ip"] = n.get("NodeManagerAddress")
        r.setdefault("hostname", n.get("NodeManagerHostname"))
        results.append(r)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cleverthis_runtime.download", description=__doc__)
    ap.add_argument("model")
    ap.add_argument("--revision", default=None)
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    events.set_source("download")
    events.keep_in_ray_logs()
    import ray

    ray.init()
    t0 = time.time()
    if os.path.exists(a.model) or not is_hub_id(a.model):
        events.emit("download", model=a.model, ok=False, nodes=[],
                    error=f"'{a.model}' is not a Hugging Face Hub model id (org/name); a local path needs no download")
        return 1
    nodes = prefetch_all_nodes(a.model, a.revision)
    ok = bool(nodes) and all(n["status"] in ("cached", "downloaded") for n in nodes)
    events.emit("download", model=a.model, revision=a.revision, ok=ok, nodes=nodes,
                seconds=round(time.time() - t0, 2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
