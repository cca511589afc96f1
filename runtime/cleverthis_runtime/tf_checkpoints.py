"""A tensorflow job's checkpoints: `model.keras`, the tokenizer files, `checkpoint.json` and `training_state/`
(`optimizer.npz`: every optimizer variable including its step counter; `state.json`: epoch, global step, step
within the epoch). Written by rank 0, atomically (checkpoints.publish); every worker learns whether it worked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from . import checkpoints, events
from .control import PeerCheckpointError, WorkerControl
from .tf_backend import COPIED_FILES, MODEL_FILE

OPTIMIZER_FILE = "optimizer.npz"
STATE_FILE = "state.json"


def read_state(source: str | None) -> dict[str, Any]:
    f = Path(source or "") / checkpoints.STATE_DIR / STATE_FILE
    try:
        return json.loads(f.read_text()) if f.is_file() else {}
    except ValueError:
        return {}


def restore_optimizer(optimizer: Any, path: Path) -> None:
    import numpy as np

    with np.load(path) as data:
        arrays = [data[f"arr_{i}"] for i in range(len(data.files))]
    variables = list(optimizer.variables)
    if len(arrays) != len(variables):
        raise checkpoints.CheckpointError(
            f"{path}: {len(arrays)} optimizer variables, the model's optimizer has {len(variables)}")
    for v, a in zip(variables, arrays, strict=True):
        v.assign(a)


class Writer:
    """Checkpoints: collective (every worker waits for rank 0's write and learns whether it worked)."""

    def __init__(self, *, emit: Any, rank: int, world: int, ckpt_root: str, job: str, model: Any, optimizer: Any,
                 model_dir: str, agree: Any, control: WorkerControl, meta: dict[str, Any]) -> None:
        self.emit, self.rank, self.world, self.ckpt_root, self.job = emit, rank, world, ckpt_root, job
        self.model, self.optimizer, self.model_dir, self.agree, self.control = model, optimizer, model_dir, agree, control
        self.meta = meta
        self.last_path: str | None = None
        self.stop_pending = False
        self.best = checkpoints.existing_best(ckpt_root)

    def acknowledge(self, path: str | None, ev: dict[str, Any] | None) -> None:
        if self.rank == 0:
            self.control.acknowledge({"path": path, "line": events.to_line(ev) if ev else None})

    def write(self, completed: int, step: int, *, partial: bool, step_in_epoch: int, train_loss: float | None,
              eval_loss: float | None) -> tuple[str | None, dict[str, Any] | None]:
        path = ev = None
        err: BaseException | None = None
        if self.rank == 0:
            try:
                path, ev = self._write(completed, step, partial, step_in_epoch, train_loss, eval_loss)
            except BaseException as e:  # noqa: BLE001 - shared with the other ranks, then raised
                err = e
        ok = self.agree(0.0 if err is not None else 1.0)
        if err is not None:
            raise err
        if ok < self.world - 0.5:
            raise PeerCheckpointError("rank 0 could not write the checkpoint")
        return path, ev

    def _write(self, completed: int, step: int, partial: bool, step_in_epoch: int, train_loss: float | None,
               eval_loss: float | None) -> tuple[str, dict[str, Any] | None]:
        import numpy as np

        name = checkpoints.partial_name(completed + 1, step) if partial else f"epoch-{completed}"

        def save(tmp: Path) -> None:
            # The native TF-Keras format (a zip), as the name says. tf-keras picks it for a `.keras` name only in
            # the thread that imported it (a thread-local flag); Ray Train runs the loop in another thread, where
            # `.keras` silently meant legacy HDF5. "keras_v3" asks for the native format in any thread.
            self.model.save(str(tmp / MODEL_FILE), save_format="keras_v3")
            for f in COPIED_FILES:
                if (Path(self.model_dir) / f).is_file():
                    shutil.copy2(Path(self.model_dir) / f, tmp / f)
            st = tmp / checkpoints.STATE_DIR
            st.mkdir()
            np.savez(st / OPTIMIZER_FILE, *[v.numpy() for v in self.optimizer.variables])
            (st / STATE_FILE).write_text(json.dumps({
                "epoch": completed, "global_step": step, "step_in_epoch": step_in_epoch, "partial": partial,
                "optimizer_step": int(self.optimizer.iterations.numpy()),
                "optimizer_variables": [v.name for v in self.optimizer.variables],
            }, indent=2))

        meta = {**self.meta, "epoch": completed, "global_step": step, "partial": partial,
                "step_in_epoch": step_in_epoch, "train_loss": train_loss, "eval_loss": eval_loss}
        path = checkpoints.publish(self.ckpt_root, self.job, name, save, meta)
        self.last_path = path
        ev = self.emit("checkpoint", name=name, path=path, epoch=completed, step=step, partial=partial,
                       train_loss=train_loss, eval_loss=eval_loss, base_model=self.meta["base_model"],
                       adapter_path=None, framework="tensorflow", size_bytes=checkpoints.size_of(path))
        if not partial:
            self.best = checkpoints.link_epoch(self.ckpt_root, name, path, completed=completed,
                                               planned_epochs=self.meta["planned_epochs"],
                                               eval_loss=eval_loss, best=self.best, emit=self.emit)
        return path, ev
