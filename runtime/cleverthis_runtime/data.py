"""Datasets: the dataset API in one place. Reading files into Arrow: sources.py; the record formats: records.py;
tokenizing: tokenization.py; where the data lives: paths.py.

Formats (records.py): alpaca (instruction/input/output, with system and history), OpenAI messages, ShareGPT,
prompt/completion, raw text and pre-tokenized rows, in `.jsonl`, `.json`, `.parquet`, `.csv` or `.txt` files,
folders of them, `datasets.Dataset.save_to_disk` folders, or Hub dataset ids in the node's HF cache. Every
defect is reported with the file and line number (or the row).

Remote paths (`s3://`, `gs://`/`gcs://`, or any other fsspec URL) are read through fsspec the same way as
local ones (s3fs, gcsfs; credentials from the node's usual environment: AWS_*, AWS_ENDPOINT_URL,
GOOGLE_APPLICATION_CREDENTIALS...). Their checkpoints go to a local folder (`default_checkpoint_dir`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import sources
from .formats import (  # noqa: F401 - the dataset API in one place
    ARROW,
    CHATML,
    DEFAULT_CHAT_TEMPLATE,
    INSTRUCTION,
    PROMPT_COMPLETION,
    SHAREGPT,
    TEXT,
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
from .rows import approximate_lengths, lazy, packed, text_blocks, tokenized  # noqa: F401
from .spec import TRAINING_CONFIG_FILE
from .tokenization import (  # noqa: F401
    PackedCollator,
    ensure_chat_template,
    instruction_to_messages,
    preview,
    tokenize_all,
    tokenize_example,
    tokenize_rows,
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


def load_dataset(dataset_path: str, columns: dict[str, str] | None = None, progress: Any = None,
                 limit: int | None = None) -> Dataset:
    """The dataset at `dataset_path`, read once per node into memory-mapped Arrow (sources.py); with `limit`, its
    first records only, checked the same way."""
    return sources.load(dataset_path, columns=columns, progress=progress, limit=limit)
