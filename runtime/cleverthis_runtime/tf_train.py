"""`framework: tensorflow`, the workers: Ray Train's TensorflowTrainer, MultiWorkerMirroredStrategy, a tf-keras model.

The driver and the workers run in the TensorFlow environment (.venv-tf): the job's entrypoint is that
environment's python and its runtime_env `py_executable` starts the workers with it (service/jobs.py).
tf-keras (TF_USE_LEGACY_KERAS=1) because Keras 3 `fit` fails under MultiWorkerMirroredStrategy here.

The training loop is a custom GradientTape loop (not `fit`), so that it speaks like the torch runtime: per-step
`step` events (loss, learning rate, gradient norm, tokens/s, ETA) printed by rank 0, `epoch` and `checkpoint`
events, per-epoch checkpoints in the page's layout, the cancel checkpoint at the exact step, and exact resume.

The base model's format, the driver and what needs no TensorFlow are in tf_backend.py.

Loss: token-level cross-entropy on the assistant tokens only (prompts and padding weigh 0), averaged over all
workers' tokens of the step; conversations are rendered with the runtime's default chat template.

A checkpoint (`epoch-N/`, or `epoch-N-step-S/` for a cancel mid-epoch) holds `model.keras`, the tokenizer
files, `checkpoint.json` and `training_state/` (`optimizer.npz`: every optimizer variable including its step
counter; `state.json`: epoch, global step, step within the epoch). The data order of an epoch is a
permutation seeded by (seed, epoch), so a resume with the same batch size, workers and data continues at the
exact position; otherwise it warm-starts from the weights and says so in a `warning` event.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from . import checkpoints
from .control import WorkerControl, worker_entry
from .formats import all_records
from .inputs import WorkerInputs
from .spec import TrainingConfig
from .tf_backend import (
    EXPOSED,
    MODEL_FILE,
    STRATEGY,
    ChatTokenizer,
    TFModelError,
    check_base_model,
    plan,
    run_driver,
    unsupported_config,
    warnings,
)
from .tf_checkpoints import OPTIMIZER_FILE, Writer, read_state, restore_optimizer

__all__ = ["EXPOSED", "ChatTokenizer", "TFModelError", "check_base_model", "run", "run_driver", "train_loop",
           "unsupported_config"]

# Tests only: slow each step down (numerics unchanged) so that a cancel lands mid-epoch.
STEP_DELAY_S = float(os.environ.get("CLEVERTHIS_TEST_STEP_DELAY_S") or 0)


def train_loop(config: dict[str, Any]) -> None:
    """Ray Train's `train_loop_per_worker`."""
    worker_entry(config, run, fatal_types=(TFModelError,), framework="tensorflow")


def run(config: dict[str, Any], *, rank: int = 0, world: int = 1, control: WorkerControl | None = None,
        attempt: int = 1) -> dict[str, Any]:
    """One worker's training (callable without Ray: world 1, no actor). Returns a summary for tests."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    control = control or WorkerControl(None, rank)
    threads = max(1, int(config["spec"].get("cpus_per_worker") or 1))
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # already initialized in this process (in-process tests)
        pass
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG, set by Ray's TensorflowConfig
    import tf_keras

    # every rank reads the same recovery source from the shared checkpoint folder
    inp = WorkerInputs.from_config(config, rank=rank, world=world, attempt=attempt)
    spec, tc = inp.spec, inp.tc
    tf_keras.utils.set_random_seed(tc.seed)
    if rank == 0:
        control.start_polling()
    model_dir = inp.source or spec.base_model
    check_base_model(model_dir)
    inp.emit("phase", phase="loading_data")
    inp.load_dataset()
    tokenizer = ChatTokenizer(model_dir)
    inp.make_rows(lambda train, val: _rows(tokenizer, train, val, tc.max_seq_length))
    for warning in warnings(tc):
        inp.emit("warning", message=warning)
    pos = _Position(inp, _resume_mode(inp, spec.batch_size * world))

    inp.emit("phase", phase="loading_model", model=model_dir, base_model=inp.original_base)
    with strategy.scope():
        model = tf_keras.models.load_model(str(Path(model_dir) / MODEL_FILE), compile=False)
        if spec.from_scratch and inp.source is None:  # the same architecture, fresh weights
            tf_keras.utils.set_random_seed(tc.seed)
            model = tf_keras.models.clone_model(model)
        schedule = _lr_schedule(tf, tf_keras, tc, pos.schedule_steps)
        optimizer = tf_keras.optimizers.AdamW(learning_rate=schedule, weight_decay=tc.weight_decay,
                                              beta_1=0.9, beta_2=0.999, epsilon=1e-8)
        optimizer.build(model.trainable_variables)
    if pos.exact:
        restore_optimizer(optimizer, Path(inp.source or "") / checkpoints.STATE_DIR / OPTIMIZER_FILE)
    params = float(model.count_params())
    inp.emit("plan", **plan(params), parameters=params)
    if inp.source:
        inp.emit("resume", checkpoint=inp.source, exact=pos.exact, completed_epochs=inp.completed,
                 global_step=pos.global_step, partial=bool((inp.meta or {}).get("partial")),
                 base_model=inp.original_base, base_loaded="checkpoint")
    loop = _Loop(tf, tf_keras, strategy, model, optimizer, inp, tokenizer.pad_id)
    writer = Writer(emit=inp.emit, rank=rank, world=world, ckpt_root=inp.ckpt_root, job=inp.job, model=model,
                     optimizer=optimizer, model_dir=model_dir, agree=loop.agree, control=control,
                     meta={"job": inp.job, "framework": "tensorflow", "method": "full",
                           "base_model": inp.original_base, "resumed_from": inp.source,
                           "total_batch": loop.total_batch, "world_size": world, "examples": len(inp.train_rows),
                           "seed": tc.seed, "planned_epochs": inp.planned_epochs, "adapter": False})
    stopped = loop.train(pos, writer, schedule, control)
    loop.agree(0.0)
    if rank == 0:
        control.set_phase("done")
    inp.emit("phase", phase="cancel_checkpoint_written" if stopped else "training_done")
    return {"stopped": stopped, "last_checkpoint": writer.last_path, "resume": pos.resume,
            "global_step": pos.global_step, "last_loss": loop.last_loss}


def _rows(tokenizer: ChatTokenizer, train: Any, val: Any, max_len: int) -> tuple[list[Any], list[Any], int, str]:
    """Every example tokenized up front: the TensorFlow loop keeps its rows in memory (its models are small)."""
    train_rows, truncated = tokenizer.rows(all_records(train), None, max_len)
    val_rows = tokenizer.rows(all_records(val), None, max_len)[0] if val is not None else []
    return train_rows, val_rows, truncated, "up front"


def _resume_mode(inp: WorkerInputs, total_batch: int) -> str | None:
    missing = []
    if inp.meta is not None and inp.meta.get("framework") != "tensorflow":
        missing.append("the checkpoint was not written by a tensorflow job")
    if inp.source and not (Path(inp.source) / checkpoints.STATE_DIR / OPTIMIZER_FILE).is_file():
        missing.append("the checkpoint has no optimizer state")
    return inp.resume_mode(total_batch, batch_terms="batch size x workers", missing=missing)


class _Position:
    """Where the run starts in the job's plan, and how long the learning-rate schedule runs (over the
    optimizer's own step counter: the whole plan when the optimizer is restored)."""

    def __init__(self, inp: WorkerInputs, resume: str | None) -> None:
        self.resume, self.exact = resume, resume == "exact"
        meta = inp.meta
        self.total_batch = inp.spec.batch_size * inp.world
        self.steps_per_epoch = math.ceil(len(inp.train_rows) / self.total_batch)
        self.completed, self.planned = inp.completed, inp.planned_epochs
        state = read_state(inp.source) if self.exact else {}
        self.global_step = int(meta.get("global_step", 0)) if meta else 0
        self.skip = int(state.get("step_in_epoch", 0)) if self.exact and meta and meta.get("partial") else 0
        left = max(1, self.planned - self.completed) * self.steps_per_epoch
        self.schedule_steps = self.planned * self.steps_per_epoch if self.exact else left
        self.total_steps = self.planned * self.steps_per_epoch if self.exact \
            else self.global_step + (self.planned - self.completed) * self.steps_per_epoch


def _lr_schedule(tf: Any, tf_keras: Any, tc: TrainingConfig, total_steps: int) -> Any:
    """The transformers schedules (linear, cosine, constant, constant_with_warmup) of the optimizer's step."""
    peak, kind = float(tc.learning_rate), tc.lr_scheduler
    total = max(1, int(total_steps))
    warmup = int(math.ceil(tc.warmup_ratio * total)) if tc.warmup_ratio else 0

    class Schedule(tf_keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step: Any) -> Any:
            s = tf.cast(step, tf.float32)
            warm = s / float(max(1, warmup))
            progress = tf.clip_by_value((s - warmup) / float(max(1, total - warmup)), 0.0, 1.0)
            if kind == "linear":
                after = 1.0 - progress
            elif kind == "cosine":
                after = 0.5 * (1.0 + tf.cos(math.pi * progress))
            else:
                after = tf.ones_like(s)
            if kind == "constant":
                return peak * tf.ones_like(s)
            return peak * tf.where(s < warmup, warm, after)

        def get_config(self) -> dict[str, Any]:
            return {"kind": kind, "peak": peak, "total": total, "warmup": warmup}

    return Schedule()


class _Loop:
    """The custom GradientTape loop under MultiWorkerMirroredStrategy: one step, one evaluation, one collective
    sum (a barrier that shares a flag), and the epochs."""

    def __init__(self, tf: Any, tf_keras: Any, strategy: Any, model: Any, optimizer: Any, inp: WorkerInputs,
                 pad_id: int) -> None:
        self.tf, self.tf_keras, self.strategy, self.model, self.optimizer = tf, tf_keras, strategy, model, optimizer
        self.inp, self.pad_id = inp, pad_id
        self.rank, self.batch = inp.rank, inp.spec.batch_size
        self.total_batch = self.batch * inp.world
        self.width = max(len(ids) for ids, _ in inp.train_rows + inp.val_rows) - 1
        self.last_loss: float | None = None
        self._build()

    def arrays(self, rows: list[tuple[list[int], list[int]]], idx: Any) -> tuple[Any, ...]:
        import numpy as np

        batch, width, tf = self.batch, self.width, self.tf
        x = np.full((batch, width), self.pad_id, dtype=np.int32)
        y = np.zeros((batch, width), dtype=np.int32)
        w = np.zeros((batch, width), dtype=np.float32)
        real = np.zeros((batch, width), dtype=np.float32)
        for j, i in enumerate(idx):
            ids, labels = rows[i]
            n = len(ids) - 1
            x[j, :n] = ids[:-1]
            y[j, :n] = ids[1:]
            w[j, :n] = [lab != -100 for lab in labels[1:]]
            real[j, :n] = 1.0
        return tf.constant(x), tf.constant(y), tf.constant(w), tf.constant(real)

    def _build(self) -> None:
        tf, tf_keras, strategy, model, optimizer = self.tf, self.tf_keras, self.strategy, self.model, self.optimizer
        batch, width = self.batch, self.width
        sig = [tf.TensorSpec([batch, width], tf.int32), tf.TensorSpec([batch, width], tf.int32),
               tf.TensorSpec([batch, width], tf.float32), tf.TensorSpec([batch, width], tf.float32),
               tf.TensorSpec([], tf.float32)]
        SUM = tf.distribute.ReduceOp.SUM
        variables = model.trainable_variables
        clip = float(self.inp.tc.max_grad_norm or 0)

        def _xent(x: Any, y: Any, w: Any, training: bool) -> Any:
            logits = model(x, training=training)
            ce = tf_keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            return tf.reduce_sum(ce * w)

        @tf.function(input_signature=sig)
        def train_step(x: Any, y: Any, w: Any, real: Any, stop: Any) -> Any:
            def step_fn(x: Any, y: Any, w: Any, real: Any, stop: Any) -> Any:
                rc = tf.distribute.get_replica_context()
                count = rc.all_reduce(SUM, tf.reduce_sum(w))
                with tf.GradientTape() as tape:
                    local = _xent(x, y, w, True)
                    loss = local / tf.maximum(count, 1.0)
                grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
                grads = rc.all_reduce(SUM, grads)
                norm = tf.linalg.global_norm(grads)
                if clip > 0:
                    grads, _ = tf.clip_by_global_norm(grads, clip, use_norm=norm)
                optimizer.apply_gradients(zip(grads, variables, strict=True), skip_gradients_aggregation=True)
                stats = rc.all_reduce(SUM, tf.stack([local, tf.reduce_sum(real), stop]))
                return tf.concat([stats, tf.stack([count, norm])], 0)

            out = strategy.run(step_fn, args=(x, y, w, real, stop))
            return strategy.experimental_local_results(out)[0]

        @tf.function(input_signature=sig)
        def eval_step(x: Any, y: Any, w: Any, real: Any, flag: Any) -> Any:
            def fn(x: Any, y: Any, w: Any) -> Any:
                rc = tf.distribute.get_replica_context()
                return rc.all_reduce(SUM, tf.stack([_xent(x, y, w, False), tf.reduce_sum(w)]))

            return strategy.experimental_local_results(strategy.run(fn, args=(x, y, w)))[0]

        @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
        def _sum(flag: Any) -> Any:
            def fn(flag: Any) -> Any:
                return tf.distribute.get_replica_context().all_reduce(SUM, tf.reshape(flag, [1]))

            return strategy.experimental_local_results(strategy.run(fn, args=(flag,)))[0]

        self.train_step, self.eval_step, self._sum = train_step, eval_step, _sum

    def agree(self, flag: float) -> float:
        """A collective sum of one number over the workers (a barrier that also shares a flag)."""
        return float(self._sum(self.tf.constant(flag, self.tf.float32)).numpy()[0])

    def evaluate(self) -> float | None:
        val_rows, total_batch, batch, rank = self.inp.val_rows, self.total_batch, self.batch, self.rank
        if not val_rows:
            return None
        tot = cnt = 0.0
        for s in range(math.ceil(len(val_rows) / total_batch)):
            idx = list(range(len(val_rows)))[s * total_batch + rank * batch: s * total_batch + (rank + 1) * batch]
            r = self.eval_step(*self.arrays(val_rows, idx), self.tf.constant(0.0)).numpy()
            tot, cnt = tot + float(r[0]), cnt + float(r[1])
        return tot / max(cnt, 1.0)

    def train(self, pos: _Position, writer: Writer, schedule: Any, control: WorkerControl) -> bool:
        """Every epoch left of the plan; True when a cancel stopped it (its checkpoint written)."""
        emit = self.inp.emit
        if self.rank == 0:
            control.set_phase("training")
        emit("strategy", strategy=STRATEGY, world_size=self.inp.world,
             replicas=int(self.strategy.num_replicas_in_sync), framework="tensorflow")
        emit("phase", phase="running", total_steps=pos.total_steps, epochs=pos.planned, start_epoch=pos.completed,
             start_step=pos.global_step)
        self.t0 = self.last_t = time.time()
        self.done_here = 0
        first_epoch = pos.completed + 1
        for epoch in range(first_epoch, pos.planned + 1):
            if self._epoch(epoch, pos.skip if epoch == first_epoch else 0, pos, writer, schedule, control):
                return True
            train_loss = self.ep_sum / max(self.ep_cnt, 1.0)
            emit("epoch", epoch=epoch, step=pos.global_step, train_loss=train_loss,
                 elapsed_s=round(time.time() - self.t0, 2))
            eval_loss = self.evaluate()
            if eval_loss is not None:
                emit("validation", epoch=epoch, eval_loss=eval_loss)
            path, ev = writer.write(epoch, pos.global_step, partial=False, step_in_epoch=0, train_loss=train_loss,
                                    eval_loss=eval_loss)
            if writer.stop_pending:
                writer.acknowledge(path, ev)
                return True
            # A stop that arrives between steps is seen at the next step (the flag travels inside the step).
        return False

    def _epoch(self, epoch: int, skip: int, pos: _Position, writer: Writer, schedule: Any,
               control: WorkerControl) -> bool:
        """One epoch's steps (from `skip`); True when a cancel mid-epoch wrote its checkpoint."""
        import numpy as np

        inp, tf, total_batch, batch, rank = self.inp, self.tf, self.total_batch, self.batch, self.rank
        steps = pos.steps_per_epoch
        perm = np.random.RandomState(inp.tc.seed + epoch).permutation(len(inp.train_rows))
        self.ep_sum = self.ep_cnt = 0.0
        for s in range(skip, steps):
            chunk = perm[s * total_batch: (s + 1) * total_batch]
            idx = chunk[rank * batch: (rank + 1) * batch]
            stop = 1.0 if rank == 0 and control.stop_requested() else 0.0
            lr = float(schedule(self.optimizer.iterations))
            r = self.train_step(*self.arrays(inp.train_rows, idx), tf.constant(stop, tf.float32)).numpy()
            pos.global_step += 1
            self.done_here += 1
            loss = float(r[0]) / max(float(r[3]), 1.0)
            self.ep_sum, self.ep_cnt = self.ep_sum + float(r[0]), self.ep_cnt + float(r[3])
            self.last_loss = loss
            now = time.time()
            if pos.global_step % inp.tc.logging_steps == 0 or s == steps - 1:
                rate = (now - self.t0) / self.done_here
                inp.emit("step", step=pos.global_step, total_steps=pos.total_steps,
                         epoch=round(epoch - 1 + (s + 1) / steps, 6), loss=loss, learning_rate=lr,
                         grad_norm=float(r[4]), tokens_per_s=round(float(r[1]) / max(now - self.last_t, 1e-9), 1),
                         eta_s=round(rate * (pos.total_steps - pos.global_step), 1))
            self.last_t = now
            if STEP_DELAY_S:
                time.sleep(STEP_DELAY_S)
            if float(r[2]) > 0 and s < steps - 1:  # every worker saw the same stop flag in the step
                path, ev = writer.write(epoch - 1, pos.global_step, partial=True, step_in_epoch=s + 1,
                                        train_loss=self.last_loss, eval_loss=None)
                writer.acknowledge(path, ev)
                return True
            if float(r[2]) > 0:
                writer.stop_pending = True  # the epoch's own checkpoint, written next, is the cancel checkpoint
        return False
