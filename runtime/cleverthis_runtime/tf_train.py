"""`framework: tensorflow`: Ray Train's TensorflowTrainer, MultiWorkerMirroredStrategy, a tf-keras model.

The driver and the workers run in the TensorFlow environment (.venv-tf): the job's entrypoint is that
environment's python and its runtime_env `py_executable` starts the workers with it (service/jobs.py).
tf-keras (TF_USE_LEGACY_KERAS=1) because Keras 3 `fit` fails under MultiWorkerMirroredStrategy here.

The training loop is a custom GradientTape loop (not `fit`), so that it speaks like the torch runtime: per-step
`step` events (loss, learning rate, gradient norm, tokens/s, ETA) printed by rank 0, `epoch` and `checkpoint`
events, per-epoch checkpoints in the page's layout, the cancel checkpoint at the exact step, and exact resume.

A TF base model is a folder at a local path (transformers 5 has no TensorFlow models): `model.keras` (a tf-keras
model mapping int token ids [batch, seq] to next-token logits [batch, seq, vocab]) plus `tokenizer.json` (and
optionally `tokenizer_config.json` naming bos/eos/pad). `cleverthis_runtime.tf_tiny` makes one.

Loss: token-level cross-entropy on the assistant tokens only (prompts and padding weigh 0), averaged over all
workers' tokens of the step; conversations are rendered with the runtime's default chat template.

A checkpoint (`epoch-N/`, or `epoch-N-step-S/` for a cancel mid-epoch) holds `model.keras`, the tokenizer
files, `checkpoint.json` and `training_state/` (`optimizer.npz`: every optimizer variable including its step
counter; `state.json`: epoch, global step, step within the epoch). The data order of an epoch is a
permutation seeded by (seed, epoch), so a resume with the same batch size, workers and data continues at the
exact position; otherwise it warm-starts from the weights and says so in a `warning` event.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from . import checkpoints, events
from .control import PeerCheckpointError, WorkerControl, worker_entry
from .data import ARROW, INSTRUCTION, instruction_to_messages, load_dataset
from .spec import JobSpec, TrainingConfig

MODEL_FILE = "model.keras"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
COPIED_FILES = (TOKENIZER_FILE, TOKENIZER_CONFIG, "special_tokens_map.json", "cleverthis_model.json")
OPTIMIZER_FILE = "optimizer.npz"
STATE_FILE = "state.json"
STRATEGY = "multi_worker_mirrored"

# Tests only: slow each step down (numerics unchanged) so that a cancel lands mid-epoch.
STEP_DELAY_S = float(os.environ.get("CLEVERTHIS_TEST_STEP_DELAY_S") or 0)


class TFModelError(ValueError):
    """The base model is not a TF model folder this runtime can train."""


# -- driver -----------------------------------------------------------------------------------------------------
def check_base_model(path: str) -> None:
    """A TF base model (or a TF checkpoint) is a local folder with model.keras and tokenizer.json."""
    p = Path(path)
    missing = [f for f in (MODEL_FILE, TOKENIZER_FILE) if not (p / f).is_file()]
    if not p.is_dir() or missing:
        what = "is not a folder on this node" if not p.is_dir() else f"has no {' or '.join(missing)}"
        raise TFModelError(
            f"base_model {path} {what}: framework tensorflow trains a tf-keras model saved in a local folder "
            f"({MODEL_FILE} + {TOKENIZER_FILE}), or continues a tensorflow checkpoint (transformers has no "
            f"TensorFlow models; build a tiny one with `python -m cleverthis_runtime.tf_tiny OUT DATA`)"
        )


REJECTED = "framework tensorflow does not support LoRA or DeepSpeed"


def unsupported_config(tc: TrainingConfig) -> list[tuple[str, str]]:
    """(field, message) for the merged training config's requests a tensorflow job cannot honour (the page:
    "Does not support LoRA or DeepSpeed"); training_config.json beside the data counts, not only the spec."""
    out = []
    if tc.method in ("lora", "qlora"):
        out.append(("training_config.method", f"{REJECTED}: method '{tc.method}' (set method 'full')"))
    if tc.quantization is not None:
        out.append(("training_config.quantization", f"{REJECTED}: quantization is for QLoRA"))
    if tc.deepspeed is not None:
        out.append(("training_config.deepspeed", f"{REJECTED}: remove 'deepspeed'"))
    if tc.chat_template not in (None, "default"):
        out.append(("training_config.chat_template", "tensorflow jobs use the runtime's default chat template: "
                                                     "remove chat_template (or set it to default)"))
    if tc.eval_steps is not None:
        out.append(("training_config.eval_steps", "tensorflow jobs validate at epoch ends only: remove eval_steps"))
    if tc.early_stopping_patience is not None:
        out.append(("training_config.early_stopping_patience", "tensorflow jobs run every epoch (no early "
                                                               "stopping): remove early_stopping_patience"))
    if set(tc.report_to) - {"tensorboard", "none"}:
        out.append(("training_config.report_to", "tensorflow jobs report to the job's own events only: "
                                                 "remove mlflow and wandb from report_to"))
    return out


def preflight_facts(spec: JobSpec, tc: TrainingConfig, ds: Any, out: dict[str, Any], err: Any) -> None:
    """The pre-flight's model facts for a TF base model (no TensorFlow needed): token lengths and the plan."""
    import statistics

    try:
        check_base_model(spec.base_model)
        rows, truncated = ChatTokenizer(spec.base_model).rows(ds.records[:2000], ds.format, tc.max_seq_length)
    except Exception as e:
        err("base_model", f"cannot load {spec.base_model}: {str(e).splitlines()[0][:300]}")
        return
    lengths = sorted(len(ids) for ids, _ in rows) or [0]
    out["token_lengths"] = {
        "sampled": len(lengths), "min": lengths[0], "max": lengths[-1],
        "mean": round(statistics.fmean(lengths), 1), "p50": lengths[len(lengths) // 2],
        "p95": lengths[min(len(lengths) - 1, int(len(lengths) * 0.95))], "truncated": truncated,
    }
    try:
        params = float(json.loads((Path(spec.base_model) / "cleverthis_model.json").read_text())["parameters"])
    except (OSError, ValueError, KeyError, TypeError):
        params = None
    out["parameters"] = params
    out["plan"] = _plan(params)
    out["warnings"].extend(_unsupported(tc))
    if spec.workers > 1:
        out["warnings"].append(EXPOSED)


# TensorFlow's gRPC server binds every interface (no setting chooses one); torch jobs listen on their node's
# address only (compat.py). README, "Security".
EXPOSED = ("TensorFlow's workers listen for each other on every network interface of their machines while the "
           "job runs (TensorFlow cannot be told one address): on a shared or exposed machine, use one worker or "
           "a firewall")


def _plan(params: float | None) -> dict[str, Any]:
    return {"method": "full", "precision": "fp32", "strategy": STRATEGY, "gradient_checkpointing": False,
            "memory_estimate_gb": {"full": round(params * 16 / 1e9, 3)} if params else {},
            "reasons": {"method": "framework tensorflow trains all weights (no LoRA)",
                        "strategy": "MultiWorkerMirroredStrategy: a full replica per worker, gradients all-reduced",
                        "precision": "fp32 (weights, gradients and two Adam moments: 16 bytes per parameter)"}}


def run_driver(spec: JobSpec, job: str, loop_config: dict[str, Any]) -> None:
    """The driver's half (cleverthis_runtime.__main__ dispatches here): TensorflowTrainer with the workers."""
    from ray.train.tensorflow import TensorflowTrainer

    from .control import drive

    tc = TrainingConfig.model_validate(loop_config["training_config"])
    rejected = unsupported_config(tc)
    if rejected:
        raise ValueError("; ".join(f"{f}: {m}" for f, m in rejected))
    drive(TensorflowTrainer, train_loop, spec, job, loop_config, tc, framework="tensorflow")


# -- workers ----------------------------------------------------------------------------------------------------
def train_loop(config: dict[str, Any]) -> None:
    """Ray Train's `train_loop_per_worker`."""
    worker_entry(config, run, fatal_types=(TFModelError,), framework="tensorflow")


def _tokenizer_config(folder: str) -> dict[str, Any]:
    f = Path(folder) / TOKENIZER_CONFIG
    if not f.is_file():
        return {}
    try:
        return json.loads(f.read_text())
    except ValueError:
        return {}


def _token(cfg: dict[str, Any], key: str, default: str) -> str:
    v = cfg.get(key, default)
    if isinstance(v, dict):
        v = v.get("content", default)
    return str(v or default)


class ChatTokenizer:
    """tokenizer.json + the runtime's default chat template (data.DEFAULT_CHAT_TEMPLATE), without transformers."""

    def __init__(self, folder: str) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(Path(folder) / TOKENIZER_FILE))
        cfg = _tokenizer_config(folder)
        self.eos = _token(cfg, "eos_token", "</s>")
        ids = [self.tok.token_to_id(_token(cfg, "pad_token", "<pad>")), self.tok.token_to_id(self.eos), 0]
        self.pad_id = next(i for i in ids if i is not None)

    def render(self, messages: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
        """The conversation as text and the character spans of the assistant turns (content + end token)."""
        text, spans = "", []
        for m in messages:
            text += f"<|{m['role']}|>\n"
            start = len(text)
            text += f"{m['content']}{self.eos}\n"
            if m["role"] == "assistant":
                spans.append((start, len(text)))
        return text, spans

    def rows(self, records: list[dict[str, Any]], fmt: str, max_len: int) -> tuple[list[tuple[list[int], list[int]]], int]:
        """(input_ids, labels) per example, labels -100 outside the assistant turns; and how many were cut."""
        out, truncated = [], 0
        if fmt == ARROW:
            for r in records:
                ids = list(r["input_ids"])
                out.append((ids[:max_len], list(r.get("labels", ids))[:max_len]))
                truncated += int(len(ids) > max_len)
        else:
            rendered = [self.render(instruction_to_messages(r) if fmt == INSTRUCTION else r["messages"])
                        for r in records]
            encs = self.tok.encode_batch([t for t, _ in rendered], add_special_tokens=False)
            for (_, spans), enc in zip(rendered, encs, strict=True):
                ids = list(enc.ids)
                starts = [o[0] for o in enc.offsets]
                labels = [-100] * len(ids)
                for a, b in spans:
                    lo, hi = bisect.bisect_left(starts, a), bisect.bisect_left(starts, b)
                    labels[lo:hi] = ids[lo:hi]
                out.append((ids[:max_len], labels[:max_len]))
                truncated += int(len(ids) > max_len)
        kept = [(i, lab) for i, lab in out if len(i) >= 2 and any(x != -100 for x in lab[1:])]
        return kept, truncated


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


def run(config: dict[str, Any], *, rank: int = 0, world: int = 1, control: WorkerControl | None = None,
        attempt: int = 1) -> dict[str, Any]:
    """One worker's training (callable without Ray: world 1, no actor). Returns a summary for tests."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import numpy as np
    import tensorflow as tf

    control = control or WorkerControl(None, rank)
    spec = JobSpec.model_validate(config["spec"])
    tc = TrainingConfig.model_validate(config["training_config"])
    threads = max(1, int(spec.cpus_per_worker))
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # already initialized in this process (in-process tests)
        pass
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG, set by Ray's TensorflowConfig
    import tf_keras

    ckpt_root: str = config["checkpoint_dir"]
    job: str = config["job"]
    is_main = rank == 0

    def emit(type_: str, **kw: Any) -> dict[str, Any] | None:
        return events.emit(type_, **kw) if is_main else None

    tf_keras.utils.set_random_seed(tc.seed)
    if is_main:
        control.start_polling()

    source: str | None = config.get("resume_from")
    if attempt > 1:  # a worker failed: continue from this job's newest checkpoint (every rank sees the same)
        removed = checkpoints.cleanup_stale(ckpt_root) if is_main else []
        latest = checkpoints.latest_of_job(ckpt_root, job)
        source = latest["path"] if latest else source
        emit("recovery", attempt=attempt, max_failures=tc.max_failures, checkpoint=source,
             checkpoint_name=os.path.basename(source) if source else None,
             global_step=(latest or {}).get("global_step", 0), removed_partial_writes=removed,
             message=(f"a worker failed; the workers restarted (attempt {attempt}) and continue from "
                      f"{os.path.basename(source) if latest else (source or 'the start')}"))
    meta = checkpoints.read_meta(source) if source else None
    orig_base = config.get("original_base_model") or spec.base_model
    model_dir = source or spec.base_model
    check_base_model(model_dir)

    emit("phase", phase="loading_data")
    ds = load_dataset(spec.dataset_path)
    tokenizer = ChatTokenizer(model_dir)
    train_rows, truncated = tokenizer.rows(ds.records, ds.format, tc.max_seq_length)
    val_rows, _ = tokenizer.rows(ds.validation, ds.format, tc.max_seq_length) if ds.validation else ([], 0)
    if not val_rows and tc.validation_split > 0:
        n_val = max(1, int(len(train_rows) * tc.validation_split))
        val_rows, train_rows = train_rows[:n_val], train_rows[n_val:]
    if not train_rows:
        from .data import DatasetError

        raise DatasetError(f"{spec.dataset_path}: no example has an assistant token to learn from")
    emit("dataset", format=ds.format, examples=len(train_rows), validation_examples=len(val_rows),
         truncated=truncated, max_seq_length=tc.max_seq_length)
    for warning in _unsupported(tc):
        emit("warning", message=warning)

    batch = spec.batch_size
    total_batch = batch * world
    steps_per_epoch = math.ceil(len(train_rows) / total_batch)
    resume = _resume_mode(source, meta, total_batch, len(train_rows), emit)
    completed = int(meta.get("epoch", 0)) if meta else 0
    start_epoch = config.get("start_epoch")
    if start_epoch is None:
        first = checkpoints.read_meta(config["resume_from"]) if config.get("resume_from") else None
        start_epoch = int((first or {}).get("epoch", 0))
    planned = int(start_epoch) + spec.epochs  # the job's last epoch number (a recovery keeps it)
    exact = resume == "exact"
    state = _read_state(source) if exact else {}
    global_step = int(meta.get("global_step", 0)) if meta else 0
    skip = int(state.get("step_in_epoch", 0)) if exact and meta and meta.get("partial") else 0
    # The schedule runs over the optimizer's own step counter: the whole plan when the optimizer is restored.
    schedule_steps = planned * steps_per_epoch if exact else max(1, planned - completed) * steps_per_epoch

    emit("phase", phase="loading_model", model=model_dir, base_model=orig_base)
    with strategy.scope():
        model = tf_keras.models.load_model(str(Path(model_dir) / MODEL_FILE), compile=False)
        if spec.job_type == "train" and source is None:  # from scratch: the same architecture, fresh weights
            tf_keras.utils.set_random_seed(tc.seed)
            model = tf_keras.models.clone_model(model)
        schedule = _lr_schedule(tf, tf_keras, tc, schedule_steps)
        optimizer = tf_keras.optimizers.AdamW(learning_rate=schedule, weight_decay=tc.weight_decay,
                                              beta_1=0.9, beta_2=0.999, epsilon=1e-8)
        optimizer.build(model.trainable_variables)
    if exact:
        _restore_optimizer(optimizer, Path(source) / checkpoints.STATE_DIR / OPTIMIZER_FILE)
    params = float(model.count_params())
    emit("plan", **_plan(params), parameters=params)
    if source:
        emit("resume", checkpoint=source, exact=exact, completed_epochs=completed, global_step=global_step,
             partial=bool((meta or {}).get("partial")), base_model=orig_base, base_loaded="checkpoint")

    width = max(len(ids) for ids, _ in train_rows + val_rows) - 1

    def arrays(rows: list[tuple[list[int], list[int]]], idx: Any) -> tuple[Any, ...]:
        x = np.full((batch, width), tokenizer.pad_id, dtype=np.int32)
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

    sig = [tf.TensorSpec([batch, width], tf.int32), tf.TensorSpec([batch, width], tf.int32),
           tf.TensorSpec([batch, width], tf.float32), tf.TensorSpec([batch, width], tf.float32),
           tf.TensorSpec([], tf.float32)]
    SUM = tf.distribute.ReduceOp.SUM
    variables = model.trainable_variables
    clip = float(tc.max_grad_norm or 0)

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

    def agree(flag: float) -> float:
        """A collective sum of one number over the workers (a barrier that also shares a flag)."""
        return float(_sum(tf.constant(flag, tf.float32)).numpy()[0])

    def evaluate() -> float | None:
        if not val_rows:
            return None
        tot = cnt = 0.0
        for s in range(math.ceil(len(val_rows) / total_batch)):
            idx = list(range(len(val_rows)))[s * total_batch + rank * batch: s * total_batch + (rank + 1) * batch]
            r = eval_step(*arrays(val_rows, idx), tf.constant(0.0)).numpy()
            tot, cnt = tot + float(r[0]), cnt + float(r[1])
        return tot / max(cnt, 1.0)

    writer = _Writer(emit=emit, rank=rank, world=world, ckpt_root=ckpt_root, job=job, model=model,
                     optimizer=optimizer, model_dir=model_dir, agree=agree, control=control,
                     meta={"job": job, "framework": "tensorflow", "method": "full", "base_model": orig_base,
                           "resumed_from": source, "total_batch": total_batch, "world_size": world,
                           "examples": len(train_rows), "seed": tc.seed, "planned_epochs": planned,
                           "adapter": False})

    first_epoch = completed + 1
    total_steps = planned * steps_per_epoch if exact else global_step + (planned - completed) * steps_per_epoch
    if is_main:
        control.set_phase("training")
    emit("strategy", strategy=STRATEGY, world_size=world, replicas=int(strategy.num_replicas_in_sync),
         framework="tensorflow")
    emit("phase", phase="running", total_steps=total_steps, epochs=planned, start_epoch=completed,
         start_step=global_step)
    t0 = last_t = time.time()
    done_here = 0
    stopped = False
    last_loss = None
    for epoch in range(first_epoch, planned + 1):
        perm = np.random.RandomState(tc.seed + epoch).permutation(len(train_rows))
        ep_sum = ep_cnt = 0.0
        for s in range(skip if epoch == first_epoch else 0, steps_per_epoch):
            chunk = perm[s * total_batch: (s + 1) * total_batch]
            idx = chunk[rank * batch: (rank + 1) * batch]
            stop = 1.0 if is_main and control.stop_requested() else 0.0
            lr = float(schedule(optimizer.iterations))
            r = train_step(*arrays(train_rows, idx), tf.constant(stop, tf.float32)).numpy()
            global_step += 1
            done_here += 1
            loss = float(r[0]) / max(float(r[3]), 1.0)
            ep_sum, ep_cnt = ep_sum + float(r[0]), ep_cnt + float(r[3])
            last_loss = loss
            now = time.time()
            if global_step % tc.logging_steps == 0 or s == steps_per_epoch - 1:
                rate = (now - t0) / done_here
                emit("step", step=global_step, total_steps=total_steps,
                     epoch=round(epoch - 1 + (s + 1) / steps_per_epoch, 6), loss=loss, learning_rate=lr,
                     grad_norm=float(r[4]), tokens_per_s=round(float(r[1]) / max(now - last_t, 1e-9), 1),
                     eta_s=round(rate * (total_steps - global_step), 1))
            last_t = now
            if STEP_DELAY_S:
                time.sleep(STEP_DELAY_S)
            if float(r[2]) > 0 and s < steps_per_epoch - 1:  # every worker saw the same stop flag in the step
                path, ev = writer.write(epoch - 1, global_step, partial=True, step_in_epoch=s + 1,
                                        train_loss=last_loss, eval_loss=None)
                writer.acknowledge(path, ev)
                stopped = True
                break
            if float(r[2]) > 0:
                writer.stop_pending = True  # the epoch's own checkpoint, written next, is the cancel checkpoint
        if stopped:
            break
        train_loss = ep_sum / max(ep_cnt, 1.0)
        emit("epoch", epoch=epoch, step=global_step, train_loss=train_loss, elapsed_s=round(time.time() - t0, 2))
        eval_loss = evaluate()
        if eval_loss is not None:
            emit("validation", epoch=epoch, eval_loss=eval_loss)
        path, ev = writer.write(epoch, global_step, partial=False, step_in_epoch=0, train_loss=train_loss,
                                eval_loss=eval_loss)
        if writer.stop_pending:
            writer.acknowledge(path, ev)
            stopped = True
            break
        # A stop that arrives between steps is seen at the next step (the flag travels inside the step).

    agree(0.0)
    if is_main:
        control.set_phase("done")
    emit("phase", phase="cancel_checkpoint_written" if stopped else "training_done")
    return {"stopped": stopped, "last_checkpoint": writer.last_path, "resume": resume, "global_step": global_step,
            "last_loss": last_loss}


def _unsupported(tc: TrainingConfig) -> list[str]:
    out = []
    if tc.packing:
        out.append("packing is not implemented for framework tensorflow: examples are padded, one per row")
    if tc.gradient_accumulation_steps > 1:
        out.append("gradient_accumulation_steps is not implemented for framework tensorflow: one micro-batch "
                   "per optimizer step")
    if tc.mixed_precision not in (None, "no"):
        out.append(f"mixed_precision {tc.mixed_precision} is ignored for framework tensorflow (fp32)")
    if tc.strategy == "fsdp":
        out.append("strategy fsdp is a torch strategy: framework tensorflow uses MultiWorkerMirroredStrategy")
    if tc.gradient_checkpointing:
        out.append("gradient_checkpointing is not implemented for framework tensorflow")
    return out


def _resume_mode(source: str | None, meta: dict[str, Any] | None, total_batch: int, examples: int,
                 emit: Any) -> str | None:
    if not source or meta is None:
        return None
    reasons = []
    if meta.get("framework") != "tensorflow":
        reasons.append("the checkpoint was not written by a tensorflow job")
    if not (Path(source) / checkpoints.STATE_DIR / OPTIMIZER_FILE).is_file():
        reasons.append("the checkpoint has no optimizer state")
    if meta.get("total_batch") not in (None, total_batch):
        reasons.append(f"the effective batch changed ({meta.get('total_batch')} -> {total_batch}: batch size x workers)")
    if meta.get("examples") not in (None, examples):
        reasons.append(f"the number of training examples changed ({meta.get('examples')} -> {examples})")
    if reasons:
        emit("warning", message="resuming from the weights only, without the optimizer state and the data "
                                "position: " + "; ".join(reasons), checkpoint=source)
        return "weights"
    return "exact"


def _read_state(source: str | None) -> dict[str, Any]:
    f = Path(source or "") / checkpoints.STATE_DIR / STATE_FILE
    try:
        return json.loads(f.read_text()) if f.is_file() else {}
    except ValueError:
        return {}


def _restore_optimizer(optimizer: Any, path: Path) -> None:
    import numpy as np

    with np.load(path) as data:
        arrays = [data[f"arr_{i}"] for i in range(len(data.files))]
    variables = list(optimizer.variables)
    if len(arrays) != len(variables):
        raise checkpoints.CheckpointError(
            f"{path}: {len(arrays)} optimizer variables, the model's optimizer has {len(variables)}")
    for v, a in zip(variables, arrays, strict=True):
        v.assign(a)


class _Writer:
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
            self.model.save(str(tmp / MODEL_FILE))
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
                       adapter_path=None, framework="tensorflow")
        if not partial:
            self.best = checkpoints.link_epoch(self.ckpt_root, name, path, completed=completed,
                                               planned_epochs=self.meta["planned_epochs"],
                                               eval_loss=eval_loss, best=self.best, emit=self.emit)
        return path, ev


