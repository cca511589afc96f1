"""What a worker of either framework works out before it trains, once: `WorkerInputs`.

The job's spec and merged training config, the checkpoint it starts from (after a worker failure: the job's
newest one), that checkpoint's metadata and the original base model, the planned epochs, the training and
validation rows (tokenized by the framework), and whether the resume is exact or from the weights only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import checkpoints, events
from .data import Dataset, DatasetError, load_dataset
from .spec import JobSpec, TrainingConfig

Emit = Callable[..., "dict[str, Any] | None"]
#: (train rows, validation rows, truncated or None, how) = tokenize(train table, validation table or None)
Tokenize = Callable[[Any, Any], "tuple[Any, Any, int | None, str]"]


@dataclass
class WorkerInputs:
    spec: JobSpec
    tc: TrainingConfig
    job: str
    ckpt_root: str
    rank: int
    world: int
    emit: Emit
    source: str | None = None  # the checkpoint this run starts from
    meta: dict[str, Any] | None = None  # its cleverthis metadata
    original_base: str = ""
    planned_epochs: int = 0  # the job's last epoch number (a recovery keeps it)
    completed: int = 0  # epochs completed at `source`
    train_rows: Any = field(default_factory=list)  # a sequence of rows: lists, or a datasets.Dataset
    val_rows: Any = field(default_factory=list)
    dataset: Dataset | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any], *, rank: int, world: int, attempt: int = 1,
                    share: Callable[[Any], Any] | None = None) -> WorkerInputs:
        """`config` is the driver's loop config (__main__.prepare); `share(value)` gives every rank rank 0's
        value (a broadcast), where ranks might see the file system differently."""
        spec = JobSpec.model_validate(config["spec"])
        tc = TrainingConfig.model_validate(config["training_config"])
        is_main = rank == 0

        def emit(type_: str, **kw: Any) -> dict[str, Any] | None:
            return events.emit(type_, **kw) if is_main else None

        inp = cls(spec=spec, tc=tc, job=config["job"], ckpt_root=config["checkpoint_dir"], rank=rank, world=world,
                  emit=emit, source=config.get("resume_from"))
        if attempt > 1:
            inp.source = inp._recovery_source(attempt, share)
        inp.meta = checkpoints.read_meta(inp.source) if inp.source else None
        inp.original_base = config.get("original_base_model") or (
            checkpoints.original_base(spec.base_model) if inp.meta else spec.base_model)
        inp.completed = int(inp.meta.get("epoch", 0)) if inp.meta else 0
        start_epoch = config.get("start_epoch")
        if start_epoch is None:
            first = checkpoints.read_meta(config["resume_from"]) if config.get("resume_from") else None
            start_epoch = int((first or {}).get("epoch", 0))
        inp.planned_epochs = int(start_epoch) + spec.epochs
        return inp

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _recovery_source(self, attempt: int, share: Callable[[Any], Any] | None) -> str | None:
        """After a worker failure: continue from the newest checkpoint this job wrote (else from its start)."""
        choice = None
        if self.is_main or share is None:
            removed = checkpoints.cleanup_stale(self.ckpt_root) if self.is_main else []
            latest = checkpoints.latest_of_job(self.ckpt_root, self.job)
            choice = latest["path"] if latest else self.source
            self.emit("recovery", attempt=attempt, max_failures=self.tc.max_failures, checkpoint=choice,
                      checkpoint_name=os.path.basename(choice) if choice else None,
                      global_step=(latest or {}).get("global_step", 0), removed_partial_writes=removed,
                      message=(f"a worker failed; the workers restarted (attempt {attempt}) and continue from "
                               f"{os.path.basename(choice) if latest else (choice or 'the start')}"))
        return share(choice) if share is not None else choice

    def load_dataset(self) -> Dataset:
        self.dataset = load_dataset(self.spec.dataset_path, self.tc.columns)
        return self.dataset

    def make_rows(self, tokenize: Tokenize) -> None:
        """Split off validation records when the data has none (`validation_split`, the first records), tokenize
        with the framework's tokenizer, and say so in a `dataset` event."""
        ds = self.dataset or self.load_dataset()
        train, val = ds.train, ds.validation
        if val is None and self.tc.validation_split > 0:
            n_val = max(1, int(len(train) * self.tc.validation_split))
            val, train = train.select(range(n_val)), train.select(range(n_val, len(train)))
        train_rows, val_rows, truncated, how = tokenize(train, val)
        if not len(train_rows):
            raise DatasetError(f"{self.spec.dataset_path}: no example has a token to learn from")
        self.train_rows, self.val_rows = train_rows, val_rows if val_rows is not None else []
        self.emit("dataset", format=ds.format, formats=ds.formats, examples=len(train),
                  validation_examples=len(val) if val is not None else 0, rows=len(train_rows),
                  truncated=truncated, max_seq_length=self.tc.max_seq_length, tokenized=how)

    def resume_mode(self, total_batch: int, *, batch_terms: str, missing: list[str]) -> str | None:
        """"exact" (optimizer, schedule and data position carry over), "weights" (a warm start, said in a
        `warning` event) or None (no checkpoint). `missing` holds the framework's own reasons against exact."""
        if not self.source or self.meta is None:
            return None
        reasons = list(missing)
        if self.meta.get("total_batch") not in (None, total_batch):
            reasons.append(f"the effective batch changed ({self.meta.get('total_batch')} -> {total_batch}: "
                           f"{batch_terms})")
        examples = len(self.train_rows)
        if self.meta.get("examples") not in (None, examples):
            reasons.append(f"the number of training examples changed ({self.meta.get('examples')} -> {examples})")
        if reasons:
            self.emit("warning", message="resuming from the weights only, without the optimizer state and the data "
                                         "position: " + "; ".join(reasons), checkpoint=self.source)
            return "weights"
        return "exact"
