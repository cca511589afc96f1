"""Datasets: finding, reading and auto-detecting the formats the product page names (tokenizing:
tokenization.py; where the data lives: paths.py).

Formats: JSONL with `messages` (ChatML conversations) or `instruction`/`output` (optional `input`), a single
file or a folder of `.jsonl` files; or a `datasets.Dataset.save_to_disk` folder (Arrow). Every defect is
reported with the file and line number.

Remote paths (`s3://`, `gs://`/`gcs://`, or any other fsspec URL) are read through fsspec the same way as
local ones (s3fs, gcsfs; credentials from the node's usual environment: AWS_*, AWS_ENDPOINT_URL,
GOOGLE_APPLICATION_CREDENTIALS...). Their checkpoints go to a local folder (`default_checkpoint_dir`).
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Any

from .formats import (  # noqa: F401 - the dataset API in one place
    ARROW,
    CHATML,
    DEFAULT_CHAT_TEMPLATE,
    INSTRUCTION,
    VALIDATION_FILE,
    Dataset,
    DatasetError,
)
from .paths import (  # noqa: F401
    data_root,
    default_checkpoint_dir,
    exists,
    fs_of,
    is_arrow_dir,
    is_remote,
    join_url,
    remote_call,
    remote_checkpoint_dir,
    remote_exists,
    remote_is_arrow,
)
from .spec import TRAINING_CONFIG_FILE
from .tokenization import (  # noqa: F401
    PackedCollator,
    ensure_chat_template,
    instruction_to_messages,
    pack_rows,
    preview,
    tokenize_all,
    tokenize_example,
    tokenized,
)


def read_training_config(dataset_path: str) -> tuple[dict[str, Any] | None, str | None]:
    """The training_config.json found beside the data, as a raw dict (validated by the caller)."""
    if is_remote(dataset_path):
        cfg_url = join_url(data_root(dataset_path), TRAINING_CONFIG_FILE)
        if not remote_exists(cfg_url):
            return None, None
        fs, p = fs_of(cfg_url)
        raw = remote_call(cfg_url, "read it", fs.cat_file, p)
        return _parse_training_config(raw.decode("utf-8-sig", errors="replace"), cfg_url)
    cfg = Path(data_root(dataset_path)) / TRAINING_CONFIG_FILE
    if not cfg.exists():
        return None, None
    return _parse_training_config(cfg.read_text(encoding="utf-8-sig"), cfg)


def _parse_training_config(text: str, cfg: Any) -> tuple[dict[str, Any], str]:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise DatasetError(f"{cfg}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise DatasetError(f"{cfg}: expected a JSON object")
    return data, str(cfg)


def detect_record_format(rec: Any, where: str) -> str:
    if not isinstance(rec, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    if "messages" in rec:
        msgs = rec["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise DatasetError(f"{where}: 'messages' must be a non-empty list")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise DatasetError(f"{where}: messages[{i}] needs string 'role' and 'content'")
        if not any(m["role"] == "assistant" for m in msgs):
            raise DatasetError(f"{where}: a conversation needs at least one 'assistant' message")
        return CHATML
    if "instruction" in rec or "output" in rec:
        for k in ("instruction", "output"):
            if not isinstance(rec.get(k), str):
                raise DatasetError(f"{where}: instruction format needs a string '{k}'")
        if "input" in rec and not isinstance(rec["input"], (str, type(None))):
            raise DatasetError(f"{where}: 'input' must be a string")
        return INSTRUCTION
    keys = ", ".join(sorted(rec)[:6]) or "none"
    raise DatasetError(
        f"{where}: unknown record shape (keys: {keys}); expected 'messages' (ChatML) or 'instruction'/'output'"
    )


def _open_binary(path: str) -> Any:
    if is_remote(path):
        fs, p = fs_of(path)
        return remote_call(path, "open it", fs.open, p, "rb")
    return open(path, "rb")


def read_jsonl(path: str) -> tuple[str, list[dict[str, Any]]]:
    fmt: str | None = None
    records: list[dict[str, Any]] = []
    with _open_binary(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path} line {lineno}"
            text = None
            try:
                try:
                    text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
                except UnicodeDecodeError as e:
                    raise DatasetError(f"{where}: not UTF-8 text ({e.reason})") from e
                if not text.strip():
                    continue
                try:
                    rec = json.loads(text)
                except ValueError as e:
                    raise DatasetError(f"{where}: broken JSON ({e})") from e
                f = detect_record_format(rec, where)
                if fmt is None:
                    fmt = f
                elif f != fmt:
                    raise DatasetError(f"{where}: mixes formats ({f} after {fmt} on earlier lines)")
            except DatasetError as e:
                e.locate(path, lineno, text if text is not None else raw.decode("utf-8", "replace"))
                raise
            records.append(rec)
    if fmt is None:
        raise DatasetError(f"{path}: empty file (no JSON lines)")
    return fmt, records


def load_dataset(dataset_path: str) -> Dataset:
    if is_remote(dataset_path):
        return _load_remote(dataset_path)
    p = Path(dataset_path)
    if not p.exists():
        raise DatasetError(f"dataset path {dataset_path} does not exist on this node")
    if is_arrow_dir(p):
        return _load_arrow(p)
    if p.is_dir():
        files = sorted(str(f) for f in p.glob("*.jsonl") if f.name != VALIDATION_FILE)
        if not files:
            raise DatasetError(f"dataset path {dataset_path}: no .jsonl files and not a saved datasets.Dataset")
    else:
        files = [str(p)]
    fmt, records = _read_files(files)
    validation: list[dict[str, Any]] = []
    vfile = Path(data_root(dataset_path)) / VALIDATION_FILE
    if vfile.exists() and str(vfile) not in files:
        vfmt, validation = read_jsonl(str(vfile))
        if vfmt != fmt:
            raise DatasetError(f"{vfile}: format {vfmt} differs from the training data's {fmt}")
    return Dataset(path=dataset_path, format=fmt, records=records, validation=validation, files=files)


def _read_files(files: list[str]) -> tuple[str, list[dict[str, Any]]]:
    fmt: str | None = None
    records: list[dict[str, Any]] = []
    for f in files:
        ffmt, recs = read_jsonl(f)
        if fmt is not None and ffmt != fmt:
            raise DatasetError(f"{f}: format {ffmt} differs from {fmt} in {files[0]}")
        fmt = ffmt
        records.extend(recs)
    assert fmt is not None
    return fmt, records


def _load_remote(url: str) -> Dataset:
    """The same formats and rules as a local path, read through fsspec; errors name the URL."""
    url = url.rstrip("/")
    fs, p = fs_of(url)
    if not remote_call(url, "read it", fs.exists, p):
        bucket = p.split("/", 1)[0]
        if bucket != p and not remote_call(url, "read it", fs.exists, bucket):
            raise DatasetError(f"dataset path {url} does not exist: no bucket '{bucket}' (or these credentials "
                               "cannot see it)")
        raise DatasetError(f"dataset path {url} does not exist (no such object or prefix in the bucket)")
    if remote_call(url, "list it", fs.isdir, p):
        if remote_is_arrow(url):
            return _load_arrow(url)
        listed = remote_call(url, "list it", fs.ls, p, False)
        names = sorted(str(x) for x in listed if str(x).endswith(".jsonl")
                       and posixpath.basename(str(x)) != VALIDATION_FILE)
        files = [join_url(url, posixpath.basename(n)) for n in names]
        if not files:
            raise DatasetError(f"dataset path {url}: no .jsonl files and not a saved datasets.Dataset")
    else:
        files = [url]
    fmt, records = _read_files(files)
    validation: list[dict[str, Any]] = []
    vurl = join_url(data_root(url), VALIDATION_FILE)
    if vurl not in files and remote_exists(vurl):
        vfmt, validation = read_jsonl(vurl)
        if vfmt != fmt:
            raise DatasetError(f"{vurl}: format {vfmt} differs from the training data's {fmt}")
    return Dataset(path=url, format=fmt, records=records, validation=validation, files=files)


def _load_arrow(p: Path | str) -> Dataset:
    import datasets

    if isinstance(p, str) and is_remote(p):  # datasets reads the folder through fsspec itself
        ds = remote_call(p, "load the saved dataset", datasets.load_from_disk, p)
    else:
        ds = datasets.load_from_disk(str(p))
    if isinstance(ds, datasets.DatasetDict):
        train = ds["train"] if "train" in ds else next(iter(ds.values()))
        val = ds["validation"] if "validation" in ds else None
    else:
        train, val = ds, None
    cols = set(train.column_names)
    if "input_ids" not in cols:
        # Not tokenized: the rows are records in one of the JSONL shapes.
        recs = [dict(r) for r in train]
        fmt = detect_record_format(recs[0], f"{p} row 0") if recs else None
        if fmt is None:
            raise DatasetError(f"{p}: the saved dataset has no rows")
        for i, r in enumerate(recs):
            if detect_record_format(r, f"{p} row {i}") != fmt:
                raise DatasetError(f"{p} row {i}: mixes formats")
        return Dataset(path=str(p), format=fmt, records=recs, validation=[dict(r) for r in val] if val else [])
    recs = [dict(r) for r in train]
    return Dataset(path=str(p), format=ARROW, records=recs, validation=[dict(r) for r in val] if val else [])
