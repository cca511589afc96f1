"""Where data lives: local paths and fsspec URLs (`s3://`, `gs://`/`gcs://`, ...), read the same way (s3fs,
gcsfs; credentials from the node's usual environment: AWS_*, AWS_ENDPOINT_URL, GOOGLE_APPLICATION_CREDENTIALS).
A remote dataset's checkpoints go to a local folder (`default_checkpoint_dir`): they are written with an
atomic rename, which object stores lack.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path
from typing import Any

from .formats import DatasetError

URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def is_remote(path: str) -> bool:
    """An fsspec URL (s3://, gs://...) rather than a path on this node (file:// counts as local)."""
    m = URL.match(path)
    return bool(m) and m.group(1).lower() not in ("file", "local")


def fs_of(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path without the protocol); a missing backend is a clear error."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as e:
        raise DatasetError(f"dataset path {url}: no fsspec backend for this URL on this node ({e}); "
                           "install jupyter-cleverthis[train] (s3fs, gcsfs)") from e


def remote_call(url: str, what: str, fn: Any, *args: Any) -> Any:
    """A filesystem call whose failure (missing bucket, no credentials, refused) names the path."""
    try:
        return fn(*args)
    except DatasetError:
        raise
    except FileNotFoundError as e:
        raise DatasetError(f"dataset path {url} does not exist ({what}: {e})") from e
    except Exception as e:  # botocore/google errors are not all OSErrors
        raise DatasetError(f"dataset path {url}: cannot {what} ({type(e).__name__}: {e}); check the bucket "
                           "name and the node's credentials (AWS_*, AWS_ENDPOINTURL, "
                           "GOOGLE_APPLICATION_CREDENTIALS)") from e


def join_url(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


def remote_parent(url: str) -> str:
    m = URL.match(url)
    assert m
    rest = url[m.end():].rstrip("/")
    parent = posixpath.dirname(rest)
    return f"{m.group(0)}{parent or rest}"


def remote_isdir(url: str) -> bool:
    fs, p = fs_of(url)
    return bool(remote_call(url, "list it", fs.isdir, p))


def remote_exists(url: str) -> bool:
    fs, p = fs_of(url)
    return bool(remote_call(url, "read it", fs.exists, p))


def exists(path: str) -> bool:
    """The dataset path exists (on this node, at its URL, or as a Hub dataset in this node's HF cache)."""
    if is_remote(path):
        return remote_exists(path)
    return os.path.exists(path) or hub_dataset(path) is not None


HUB_DATASET = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")


def hub_dataset(name: str) -> str | None:
    """The snapshot folder of a Hub dataset id ("org/name", optionally "@revision") in this node's HF cache,
    found offline; None when `name` is a local path, not an id, or not cached."""
    if os.path.exists(name) or name.startswith(("/", ".", "~")) or not HUB_DATASET.match(name):
        return None
    from huggingface_hub import snapshot_download

    from .download import cache_dir

    repo, _, revision = name.partition("@")
    try:
        return str(snapshot_download(repo, repo_type="dataset", revision=revision or None, local_files_only=True,
                                     cache_dir=cache_dir()))
    except Exception:  # noqa: BLE001 - not cached here (LocalEntryNotFoundError and kin)
        return None


def data_root(dataset_path: str) -> str:
    """The folder that holds the data: the path itself for a folder of JSONL files, else its parent.

    An Arrow folder (`save_to_disk`) and a single file are both "the dataset"; their parent holds it.
    """
    if is_remote(dataset_path):
        if remote_isdir(dataset_path) and not remote_is_arrow(dataset_path):
            return dataset_path.rstrip("/")
        return remote_parent(dataset_path)
    p = Path(dataset_path)
    if not p.exists() and (hub := hub_dataset(dataset_path)) is not None:
        return hub  # a training_config.json in the dataset's repository applies
    if p.is_dir() and not is_arrow_dir(p):
        return str(p)
    return str(p.parent)


def remote_checkpoint_dir(dataset_url: str) -> str:
    """A local folder for a remote dataset's checkpoints: `$CLEVERTHIS_HOME/checkpoints/<scheme>/<bucket>/<key>`
    (CLEVERTHIS_HOME defaults to ~/.cleverthis), computed without touching the bucket. Checkpoints are written
    with a local atomic rename, which object stores do not have."""
    m = URL.match(dataset_url)
    assert m
    home = os.environ.get("CLEVERTHIS_HOME") or os.path.expanduser("~/.cleverthis")
    parts = [x for x in dataset_url[m.end():].split("/") if x not in ("", ".", "..")]
    return os.path.join(home, "checkpoints", m.group(1).lower(), *parts)


def default_checkpoint_dir(dataset_path: str) -> str:
    if is_remote(dataset_path):
        return remote_checkpoint_dir(dataset_path)
    if not os.path.exists(dataset_path) and HUB_DATASET.match(dataset_path):
        return remote_checkpoint_dir("hub://" + dataset_path.replace("@", "/"))  # never inside the HF cache
    return os.path.join(data_root(dataset_path), "checkpoints")


def remote_is_arrow(url: str) -> bool:
    fs, p = fs_of(url)

    def has(name: str) -> bool:
        return bool(remote_call(url, "read it", fs.exists, posixpath.join(p, name)))

    return (has("dataset_info.json") or has("dataset_dict.json")) and (has("state.json") or has("dataset_dict.json"))


def is_arrow_dir(p: Path) -> bool:
    return p.is_dir() and ((p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists()) and (
        (p / "state.json").exists() or (p / "dataset_dict.json").exists()
    )
