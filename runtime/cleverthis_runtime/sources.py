"""Reading a dataset once per node into memory-mapped Arrow, whatever form it arrives in.

A dataset path is a file, a folder of files, a `datasets.Dataset.save_to_disk` folder, an object-store URL
(fsspec), or a Hub dataset id found in this node's Hugging Face cache. Files may be `.jsonl`, `.json` (an array
of records, or one record per line), `.parquet`, `.csv` and `.txt` (one document per non-empty line, as the
`datasets` text loader reads it); a folder may mix them, and may mix the conversational formats (records.py).

One streaming pass reads each file, checks every record (an error names the file and line, or the row) and
writes the records as JSON text into an Arrow file under the node's HF cache
(`$HF_HOME/cleverthis-data/<key>/`), keyed by the files' names, sizes and modification times and the column
mapping. The pass is the pre-flight's; the driver and every worker then open the same file memory-mapped, so
memory does not grow with the dataset and a worker touches only the rows it trains on. Why this and not
`datasets.load_dataset`'s own builders: those infer one Arrow type per column, and real files mix types within
a column (OpenAI content as text in one message and parts in the next; LLaMA-Factory's `tools` as text), which
the builders refuse without naming the line; and they lose the line numbers the errors need. The pre-tokenized
case (a saved dataset with `input_ids`) is used as saved.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import records
from .formats import ARROW, Dataset, DatasetError
from .paths import (
    HUB_DATASET,
    fs_of,
    hub_dataset,
    is_arrow_dir,
    is_remote,
    join_url,
    remote_call,
    remote_is_arrow,
)

EXTENSIONS = (".jsonl", ".json", ".parquet", ".csv", ".txt")
#: One source of records: (its name in errors, its records as (number, record, raw line or None), "line" or "row"
#: (what the number counts), its size in bytes for the progress, asked only when the copy is written: a read of
#: the node's copy that is already there touches the files no more than its key does).
Part = tuple[str, Callable[[], Iterator[tuple[int, Any, "str | None"]]], str, Callable[[], int]]
#: Files that are not training records, beside the data.
NOT_DATA = {"training_config.json", "dataset_info.json", "state.json", "dataset_dict.json"}
CACHE_VERSION = "2"  # the layout of the copy and its meta.json
BATCH = 20_000
PROGRESS_EVERY_S = 5.0


def cache_root() -> str:
    return os.path.join(os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "cleverthis-data")


def is_validation(name: str) -> bool:
    """validation.jsonl, validation-00000-of-00001.parquet, val.csv, ...: held-out data beside the training files."""
    stem = posixpath.basename(name).split(".")[0].lower()
    return stem in ("validation", "val", "valid", "dev") or stem.startswith(("validation-", "validation_"))


def load(path: str, *, columns: dict[str, str] | None = None, progress: Any = None,
         limit: int | None = None) -> Dataset:
    """The dataset at `path` (DatasetError names what is wrong); `progress(rows, done_bytes, total_bytes)` is
    called every few seconds of a first read. `limit`: check only the first records, without the node's copy
    (create's quick check: its time does not grow with the dataset; the job's driver checks every record)."""
    if is_remote(path):
        path = path.rstrip("/")
        found = _remote_files(path)
        if found is None:
            return _saved(path, columns, limit)
        train, val = found
    else:
        p = Path(path)
        if not p.exists():
            hub = _hub_snapshot(path)
            if hub is None:
                raise DatasetError(f"dataset path {path} does not exist on this node")
            train, val = _files_in(Path(hub), path, recursive=True)
        elif is_arrow_dir(p):
            return _saved(str(p), columns, limit)
        elif p.is_dir():
            train, val = _files_in(p, path, recursive=False)
        else:
            train = [str(p)]
            sibling = [f for f in _data_files(p.parent, recursive=False) if is_validation(f) and f != str(p)]
            val = sibling[:1] if not is_validation(str(p)) else []
    parts, val_parts = [_file_part(f) for f in train], [_file_part(f) for f in val]
    if limit is not None:
        return _sample(path, parts, val_parts, columns, limit, files=train)
    return _node_copy(path, _key(train + val, columns), parts, val_parts, columns, progress, files=train)


def _sample(path: str, parts: list[Part], val_parts: list[Part], columns: dict[str, str] | None, limit: int,
            files: list[str]) -> Dataset:
    """The first `limit` records (and validation records), checked as a full read checks them, kept in memory."""
    kept: dict[str, dict[str, list[Any]]] = {"train": _columns(), "validation": _columns()}

    def keep(split: str) -> Callable[[dict[str, list[Any]]], None]:
        def extend(batch: dict[str, list[Any]]) -> None:
            for k, v in batch.items():
                kept[split][k].extend(v)

        return extend

    formats, kind = _write(keep("train"), parts, columns, _Progress(None, 0), None, limit)
    if not formats:
        raise DatasetError(f"{parts[0][0] if len(parts) == 1 else 'the dataset'}: no records (empty file)")
    if val_parts:
        _write(keep("validation"), val_parts, columns, _Progress(None, 0), kind, limit)

    def open_tables() -> tuple[Any, Any]:
        import datasets

        train = datasets.Dataset.from_dict(kept["train"])
        return train, datasets.Dataset.from_dict(kept["validation"]) if val_parts else None

    return Dataset(path=path, format=formats.most_common(1)[0][0], examples=len(kept["train"]["record"]),
                   validation_examples=len(kept["validation"]["record"]) if val_parts else None, files=files,
                   formats=dict(formats), open_tables=open_tables)


def _node_copy(path: str, key: str, train: list[Part], val: list[Part], columns: dict[str, str] | None,
               progress: Any, files: list[str]) -> Dataset:
    """The node's Arrow copy under `key`: written by the first reader (others wait for the lock), then opened
    memory-mapped."""
    from filelock import FileLock

    folder = os.path.join(cache_root(), key)
    meta_file = os.path.join(folder, "meta.json")
    os.makedirs(cache_root(), exist_ok=True)
    with FileLock(folder + ".lock"):
        if not os.path.exists(meta_file):
            _build(folder, train, val, columns, progress, files)
    with open(meta_file, encoding="utf-8") as f:
        meta = json.load(f)

    def open_tables() -> tuple[Any, Any]:
        import datasets

        train_ds = datasets.Dataset.from_file(os.path.join(folder, "train.arrow"))
        has_val = meta["validation_examples"] is not None
        return train_ds, datasets.Dataset.from_file(os.path.join(folder, "validation.arrow")) if has_val else None

    return Dataset(path=path, format=meta["format"], examples=meta["examples"],
                   validation_examples=meta["validation_examples"], files=meta["files"], formats=meta["formats"],
                   open_tables=open_tables)


# -- which files ----------------------------------------------------------------------------------------------
def _data_files(folder: Path, *, recursive: bool) -> list[str]:
    found = folder.rglob("*") if recursive else folder.iterdir()
    return sorted(str(f) for f in found if f.is_file() and f.suffix.lower() in EXTENSIONS and f.name not in NOT_DATA
                  and not any(part.startswith(".") for part in f.relative_to(folder).parts))


def _files_in(folder: Path, shown: str, *, recursive: bool) -> tuple[list[str], list[str]]:
    files = _data_files(folder, recursive=recursive)
    if recursive:  # a Hub repository: its test split is not training data
        files = [f for f in files if not posixpath.basename(f).lower().startswith("test")]
    train = [f for f in files if not is_validation(f)]
    if not train:
        raise DatasetError(f"dataset path {shown}: no data files ({', '.join(EXTENSIONS)}) and not a saved "
                           "datasets.Dataset")
    return train, [f for f in files if is_validation(f)]


def _remote_files(url: str) -> tuple[list[str], list[str]] | None:
    """The training and validation files at `url`; None for a saved dataset's folder."""
    fs, p = fs_of(url)
    if not remote_call(url, "read it", fs.exists, p):
        bucket = p.split("/", 1)[0]
        if bucket != p and not remote_call(url, "read it", fs.exists, bucket):
            raise DatasetError(f"dataset path {url} does not exist: no bucket '{bucket}' (or these credentials "
                               "cannot see it)")
        raise DatasetError(f"dataset path {url} does not exist (no such object or prefix in the bucket)")
    if remote_call(url, "list it", fs.isdir, p):
        if remote_is_arrow(url):
            return None
        names = sorted(posixpath.basename(str(x)) for x in remote_call(url, "list it", fs.ls, p, False))
        files = [join_url(url, n) for n in names if posixpath.splitext(n)[1].lower() in EXTENSIONS
                 and n not in NOT_DATA]
        train = [f for f in files if not is_validation(f)]
        if not train:
            raise DatasetError(f"dataset path {url}: no data files ({', '.join(EXTENSIONS)}) and not a saved "
                               "datasets.Dataset")
        return train, [f for f in files if is_validation(f)]
    parent = url.rsplit("/", 1)[0]
    val = [] if is_validation(url) else [f for f in _remote_siblings(parent) if is_validation(f)][:1]
    return [url], val


def _remote_siblings(parent: str) -> list[str]:
    fs, p = fs_of(parent)
    try:
        return [join_url(parent, posixpath.basename(str(x))) for x in fs.ls(p, detail=False)
                if posixpath.splitext(str(x))[1].lower() in EXTENSIONS]
    except Exception:  # noqa: BLE001 - no listing rights on the parent: no validation file
        return []


def _hub_snapshot(name: str) -> str | None:
    """A Hub dataset id resolved from this node's HF cache (paths.hub_dataset); None when `name` is no id."""
    if not HUB_DATASET.match(name):
        return None
    folder = hub_dataset(name)
    if folder is None:
        repo = name.partition("@")[0]
        raise DatasetError(
            f"dataset path {name} is neither a path on this node nor a Hub dataset in its Hugging Face cache; "
            f"fetch it on every node first: huggingface-cli download --repo-type dataset {repo}")
    return folder


def _key(files: list[str], columns: dict[str, str] | None) -> str:
    h = hashlib.sha256(CACHE_VERSION.encode())
    for f in files:
        h.update(f.encode() + b"\0" + repr(_stamp(f)).encode() + b"\0")
    h.update(json.dumps(columns or {}, sort_keys=True).encode())
    return h.hexdigest()[:32]


def _stamp(f: str) -> tuple[Any, ...]:
    if is_remote(f):
        fs, p = fs_of(f)
        info = remote_call(f, "read it", fs.info, p)
        return (info.get("size"), str(info.get("ETag") or info.get("LastModified") or info.get("mtime") or ""))
    st = os.stat(f)
    return (st.st_size, st.st_mtime_ns)


def _size(f: str) -> int:
    return int(_stamp(f)[0] or 0)


# -- reading ----------------------------------------------------------------------------------------------------
def _open(path: str) -> Any:
    if is_remote(path):
        fs, p = fs_of(path)
        return remote_call(path, "open it", fs.open, p, "rb")
    return open(path, "rb")


def _rows(path: str) -> Iterator[tuple[int, Any, str | None]]:
    """(line or row number, the parsed record, the raw text when the record came from one line) of one file."""
    import pyarrow as pa

    ext = posixpath.splitext(path)[1].lower()
    try:
        if ext == ".parquet":
            yield from _parquet(path)
        elif ext == ".csv":
            yield from _csv(path)
        else:
            yield from _lines(path, ext)
    except (pa.ArrowException, OSError) as e:  # a table pyarrow cannot read: its own words name the place
        raise DatasetError(f"{path}: cannot read it as {ext[1:]} ({str(e).strip().splitlines()[0]})") from e


def _lines(path: str, ext: str) -> Iterator[tuple[int, Any, str | None]]:
    if ext == ".txt":
        yield from _text(path)
    else:
        yield from _json(path)


def _decode(raw: bytes, path: str, lineno: int) -> str:
    try:
        return raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
    except UnicodeDecodeError as e:
        err = DatasetError(f"{path} line {lineno}: not UTF-8 text ({e.reason})")
        err.locate(path, lineno, raw.decode("utf-8", "replace"))
        raise err from e


def _json(path: str) -> Iterator[tuple[int, Any, str | None]]:
    """JSON Lines; a `.json` file may also be one JSON array of records (LLaMA-Factory's), told apart by its first
    character."""
    if posixpath.splitext(path)[1].lower() == ".json":
        with _open(path) as fh:
            head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
        if head.startswith(b"["):
            yield from _json_array(path)
            return
    with _open(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            text = _decode(raw, path, lineno)
            if not text.strip():
                continue
            try:
                rec = json.loads(text)
            except ValueError as e:
                err = DatasetError(f"{path} line {lineno}: broken JSON ({e})")
                err.locate(path, lineno, text)
                raise err from e
            yield lineno, rec, text


def _json_array(path: str) -> Iterator[tuple[int, Any, str | None]]:
    """The records of a JSON array one at a time, each with the line it starts on."""
    with _open(path) as fh:
        text = _decode(fh.read(), path, 1)
    decoder = json.JSONDecoder()
    pos, line, n = text.index("[") + 1, 1 + text.count("\n", 0, text.index("[")), len(text)

    def skip(p: int) -> int:
        while p < n and text[p] in " \t\r\n":
            p += 1
        return p

    counted = 0
    while True:
        pos = skip(pos)
        if pos < n and text[pos] == "]":
            return
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            rec, end = decoder.raw_decode(text, pos)
        except ValueError as e:
            err = DatasetError(f"{path} line {line}: broken JSON ({e})")
            err.locate(path, line, text[pos:text.find("\n", pos)])
            raise err from e
        yield line, rec, None
        pos = skip(end)
        if pos < n and text[pos] == ",":
            pos += 1
        elif pos >= n or text[pos] != "]":
            err = DatasetError(f"{path} line {line + text.count(chr(10), counted, pos)}: broken JSON (expected ',' "
                               "or ']' after a record)")
            raise err


def _parquet(path: str) -> Iterator[tuple[int, Any, str | None]]:
    import pyarrow.parquet as pq

    with _open(path) as fh:
        row = 0
        for batch in pq.ParquetFile(fh).iter_batches(batch_size=4096):
            for rec in batch.to_pylist():
                row += 1
                yield row, rec, None


def _csv(path: str) -> Iterator[tuple[int, Any, str | None]]:
    """Rows of a CSV file with a header line; row N is on line N + 1 (unless a cell spans lines)."""
    import pyarrow.csv as pcsv

    with _open(path) as fh:
        reader = pcsv.open_csv(fh, convert_options=pcsv.ConvertOptions(strings_can_be_null=False),
                               read_options=pcsv.ReadOptions(block_size=1 << 22))
        row = 0
        for batch in reader:
            for rec in batch.to_pylist():
                row += 1
                yield row + 1, rec, None


def _text(path: str) -> Iterator[tuple[int, Any, str | None]]:
    with _open(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            text = _decode(raw, path, lineno).rstrip("\r\n")
            if text.strip():
                yield lineno, {"text": text}, None


def _file_part(path: str) -> Part:
    unit = "row" if posixpath.splitext(path)[1].lower() == ".parquet" else "line"
    return path, lambda: _rows(path), unit, lambda: _size(path)


# -- writing the node's copy ------------------------------------------------------------------------------------
def _build(folder: str, train: list[Part], val: list[Part], columns: dict[str, str] | None, progress: Any,
           files: list[str]) -> None:
    """Check every record and write the copy into a temporary folder, renamed into place once complete: a bad
    record leaves nothing behind."""
    import shutil

    tmp = f"{folder}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        tracker = _Progress(progress, sum(part[3]() for part in train + val))
        formats, kind = _to_file(os.path.join(tmp, "train.arrow"), train, columns, tracker, None)
        if not formats:
            raise DatasetError(f"{train[0][0] if len(train) == 1 else 'the dataset'}: no records (empty file)")
        val_formats: Counter[str] = Counter()
        if val:
            val_formats, _ = _to_file(os.path.join(tmp, "validation.arrow"), val, columns, tracker, kind)
        meta = {"format": formats.most_common(1)[0][0], "formats": dict(formats), "files": files,
                "validation": [part[0] for part in val], "validation_formats": dict(val_formats),
                "examples": sum(formats.values()),
                "validation_examples": sum(val_formats.values()) if val else None}
        with open(os.path.join(tmp, "meta.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _Progress:
    def __init__(self, report: Any, total: int) -> None:
        self.report, self.total, self.rows, self.done, self.last = report, total, 0, 0, time.monotonic()

    def tick(self, rows: int) -> None:
        self.rows += rows
        if self.report and time.monotonic() - self.last >= PROGRESS_EVERY_S:
            self.last = time.monotonic()
            self.report(self.rows, self.done, self.total)


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([("record", pa.large_string()), ("format", pa.string()), ("file", pa.int32()),
                      ("line", pa.int64())])


def _columns() -> dict[str, list[Any]]:
    return {"record": [], "format": [], "file": [], "line": []}


def _to_file(out: str, parts: list[Part], columns: dict[str, str] | None, tracker: _Progress,
             kind: str | None) -> tuple[Counter[str], str | None]:
    """Every record of `parts` into one Arrow file (the format `datasets` memory-maps); (formats, kind)."""
    import pyarrow as pa

    schema = _schema()
    with pa.OSFile(out, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        def write(batch: dict[str, list[Any]]) -> None:
            writer.write_batch(pa.record_batch([pa.array(batch[k], type=schema.field(k).type) for k in batch],
                                               schema=schema))

        return _write(write, parts, columns, tracker, kind)


def _write(emit: Callable[[dict[str, list[Any]]], None], parts: list[Part], columns: dict[str, str] | None,
           tracker: _Progress, kind: str | None, limit: int | None = None) -> tuple[Counter[str], str | None]:
    """Check every record of `parts` (or the first `limit`) and hand them to `emit` in batches of columns
    (`_columns`); (formats, kind). A defect raises DatasetError naming the file and line, or the row."""
    formats: Counter[str] = Counter()
    first: dict[str, str] = {}  # kind -> where it was first seen
    cols = _columns()

    def flush() -> None:
        if cols["record"]:
            emit(cols)
            tracker.tick(len(cols["record"]))
            for v in cols.values():
                v.clear()

    for index, (name, rows, unit, size) in enumerate(parts):
        for n, rec, raw in rows():
            if limit is not None and sum(formats.values()) >= limit:
                break
            where = f"{name} {unit} {n}"
            try:
                rec = records.apply_columns(rec, columns)
                fmt = records.detect(rec, where)
                k = records.kind(fmt)
                kind = kind or k
                if k != kind:
                    seen = first.get(kind, "the training data")
                    raise DatasetError(f"{where}: a {fmt} record ({k}) among {kind} records (first at {seen}): "
                                       "one dataset trains either conversations, raw text or token ids")
                first.setdefault(k, where)
            except DatasetError as e:
                if unit == "line":  # a row of a table has no line to show
                    e.locate(name, n, raw if raw is not None else json.dumps(rec, ensure_ascii=False))
                raise
            formats[fmt] += 1
            cols["record"].append(raw if raw is not None and not columns
                                  else json.dumps(rec, ensure_ascii=False, default=str))
            cols["format"].append(fmt)
            cols["file"].append(index)
            cols["line"].append(n)
            if len(cols["record"]) >= BATCH:
                flush()
        tracker.done += size() if tracker.report else 0
    flush()
    return formats, kind


def _saved(path: str, columns: dict[str, str] | None, limit: int | None = None) -> Dataset:
    """A `save_to_disk` folder: pre-tokenized rows are used as saved; records are checked and read like a file's."""
    import datasets

    ds = remote_call(path, "load the saved dataset", datasets.load_from_disk, path) if is_remote(path) \
        else datasets.load_from_disk(path)
    if isinstance(ds, datasets.DatasetDict):
        train = ds["train"] if "train" in ds else next(iter(ds.values()))
        val = ds["validation"] if "validation" in ds else None
    else:
        train, val = ds, None
    if len(train) == 0:
        raise DatasetError(f"{path}: the saved dataset has no rows")
    if limit is not None:
        train, val = train.select(range(min(limit, len(train)))), None
    if "input_ids" in train.column_names:
        return Dataset.of(path, ARROW, train, val, formats={ARROW: len(train)})
    return _saved_records(path, train, val, columns)


def _saved_records(path: str, train: Any, val: Any, columns: dict[str, str] | None) -> Dataset:
    """A saved dataset of records: read into the node's copy like a file's rows (keyed by its fingerprint)."""
    key = hashlib.sha256(f"{CACHE_VERSION}\0{train._fingerprint}\0{val._fingerprint if val else ''}\0"
                         f"{json.dumps(columns or {}, sort_keys=True)}".encode()).hexdigest()[:32]
    parts = [(path, lambda: _table_rows(train), "row", lambda: 0)]
    val_parts = [(f"{path} (validation)", lambda: _table_rows(val), "row", lambda: 0)] if val is not None else []
    return _node_copy(path, key, parts, val_parts, columns, None, files=[])


def _table_rows(table: Any) -> Iterator[tuple[int, Any, str | None]]:
    """The rows of a `datasets.Dataset`, numbered from 0 as `datasets` numbers them."""
    row = 0
    for batch in table.iter(batch_size=BATCH):
        keys = list(batch)
        for i in range(len(batch[keys[0]]) if keys else 0):
            yield row, {k: batch[k][i] for k in keys}, None
            row += 1
