"""Cancel, recovery and fatal errors: the driver and the training workers talk through the job's control state
(control_state.JobState: a few keys in the GCS, no process of its own).

Cancel: Ray's `stop_job` sends SIGTERM to the driver (`python -m cleverthis_runtime`) and SIGKILLs it after
`RAY_JOB_STOP_WAIT_TIME_S`. The workers are Ray actors outside the driver's process group, so the driver's
SIGTERM handler sets the job's stop flag; rank 0 polls it (a background thread, every 0.5 s), the
training callback sees the flag at the next step end, every rank agrees on it (one broadcast per step when
there is more than one worker), the checkpoint of the exact position is written, rank 0 acknowledges with
the checkpoint's event, and the driver prints that event and exits. The job ends `cancelled` (Ray `STOPPED`).

Recovery: each rank counts its starts here (`join`), so a restarted worker group knows it is a retry.

Fatal errors (disk full, permission denied, a vanished dataset...): retrying cannot help, so the failing
rank records the error here and the driver exits at once with that classified error, instead of letting
Ray Train restart the workers `max_failures` times.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

from . import events

POLL_S = 0.5
FATAL_WAIT_S = 30.0  # a worker whose error is fatal waits this long for the driver to end the job, then raises


class WorkerControl:
    """A worker's side of the job's control state (or a stand-in without one: `handle=None`)."""

    def __init__(self, handle: Any, rank: int) -> None:
        self.handle, self.rank = handle, rank
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def _call(self, method: str, *args: Any) -> Any:
        if self.handle is None:
            return None
        return getattr(self.handle, method)(*args)

    def join(self) -> int:
        try:
            return int(self._call("join", self.rank) or 1)
        except Exception:  # the actor is gone (driver exiting): act as a first start
            return 1

    def start_polling(self) -> None:
        """Rank 0 polls the stop flag in the background, so a step end only reads a local flag."""
        if self.handle is None or self._thread is not None:
            return

        def poll() -> None:
            while not self._closed.wait(POLL_S):
                try:
                    if self._call("stop_requested"):
                        self._stop.set()
                        return
                except Exception:  # driver gone or busy: keep training, Ray ends us if the job ends
                    continue

        self._thread = threading.Thread(target=poll, name="cleverthis-stop-poll", daemon=True)
        self._thread.start()

    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def request_stop_locally(self) -> None:
        """Used without an actor (tests of the training loop run in one process)."""
        self._stop.set()

    def set_phase(self, phase: str) -> None:
        self._quiet("set_phase", phase)

    def acknowledge(self, info: dict[str, Any]) -> None:
        self._quiet("acknowledge", info)

    def fatal(self, info: dict[str, Any]) -> None:
        self._quiet("set_fatal", info)

    def _quiet(self, method: str, *args: Any) -> None:
        try:
            self._call(method, *args)
        except Exception:
            pass

    def close(self) -> None:
        self._closed.set()


def is_fatal(exc: BaseException) -> bool:
    """Errors that a restart from the last checkpoint would only repeat."""
    import errno

    from .triage import classify_exception

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in (errno.ENOSPC, errno.EACCES, errno.EPERM, errno.EROFS,
                                                       errno.EDQUOT):
            return True
        if type(cur).__name__ in ("CheckpointError", "DatasetError", "ValidationError"):
            return True
        cur = cur.__cause__ or cur.__context__
    kind, _ = classify_exception(exc)
    return kind in FATAL_KINDS


class PeerCheckpointError(RuntimeError):
    """Another rank (rank 0) failed to write the checkpoint; rank 0 reports the cause."""


def worker_entry(config: dict[str, Any], run: Any, *, fatal_types: tuple[type, ...] = (), **fields: Any) -> None:
    """A Ray Train worker of either framework: join the job's control, name the event source, train.

    `run(config, rank=, world=, control=, attempt=)` is the framework's training; `fields` go into the
    `worker` event.
    """
    import socket

    import ray
    import ray.train

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    control = WorkerControl(config.get("control"), rank)
    attempt = control.join()
    # A restarted worker group counts its events afresh: a new source name keeps (src, seq) unique; a sweep's
    # trials share one log, so their sources carry the trial's name too.
    trial = config.get("trial")
    events.set_trial(trial)
    events.set_source(f"{trial + '/' if trial else ''}rank{rank}" + (f"-a{attempt}" if attempt > 1 else ""))
    events.emit("worker", rank=rank, world_size=world, attempt=attempt, pid=os.getpid(),
                hostname=socket.gethostname(), node_id=ray.get_runtime_context().get_node_id(), **fields)
    try:
        run(config, rank=rank, world=world, control=control, attempt=attempt)
    except Exception as e:
        if report_error(e, rank, control, fatal_types) and control.handle is not None:
            # The driver ends the job on a fatal error (DriverWatch, within ~2 s) and Ray then stops this
            # worker. Raising at once let Ray Train's controller start a retry meanwhile: the retry's placement
            # group, created as the driver exited, would outlive the job and hold its CPUs for minutes.
            time.sleep(FATAL_WAIT_S)
        raise
    finally:
        control.close()


def report_error(e: BaseException, rank: int, control: WorkerControl, fatal_types: tuple[type, ...] = ()) -> bool:
    """Fatal errors become the job's error (and end the job at once); others are retried by Ray Train. True
    when the error was fatal."""
    import traceback

    from .triage import classify_exception

    if isinstance(e, PeerCheckpointError):
        events.emit("worker_error", rank=rank, error_type=type(e).__name__, message=str(e))
        return False
    kind, _ = classify_exception(e)
    fatal = is_fatal(e) or isinstance(e, fatal_types)
    fields = {"kind": kind, "error_type": type(e).__name__, "message": str(e), "rank": rank, "fatal": fatal,
              "traceback": traceback.format_exc()[-8000:]}
    if fatal:
        ev = events.emit("error", **fields)
        control.fatal({"kind": kind, "message": str(e), "line": events.to_line(ev)})
    else:  # Ray Train may restart the workers; the driver reports the error if it gives up
        events.emit("worker_error", **fields)
    return fatal


def drive(trainer_cls: Any, train_loop: Any, spec: Any, job: str, loop_config: dict[str, Any],
          tc: Any, trainer_kwargs: dict[str, Any] | None = None, *, sweep: Any = None, **fields: Any) -> None:
    """The driver's part for either framework: the job's control state, the SIGTERM watch, the Ray Train
    trainer (`TorchTrainer` / `TensorflowTrainer`) with the spec's workers, then `fit`. A sweep's trial
    (`sweep`: sweep.TrialHooks) watches its sweep's stop flag instead of a signal and reports to Ray Tune."""
    import uuid

    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig

    if not ray.is_initialized():
        ray.init()
    from .control_state import JobState

    control = JobState.for_driver(job)
    loop_config["control"] = control
    grace = float(os.environ.get("RAY_JOB_STOP_WAIT_TIME_S", "3"))
    watch = DriverWatch(control, grace, parent=sweep.control if sweep else None,
                        on_exit=sweep.ended if sweep else None)
    watch.install()
    resources: dict[str, float] = {"CPU": spec.cpus_per_worker}
    if spec.gpus_per_worker:
        resources["GPU"] = spec.gpus_per_worker
    from .compat import lean_trainer

    trainer = lean_trainer(trainer_cls, pg_cleaner=sweep is not None)(
        train_loop,
        train_loop_config=loop_config,
        scaling_config=ScalingConfig(
            num_workers=spec.workers, use_gpu=spec.gpus_per_worker > 0, resources_per_worker=resources,
            placement_strategy=tc.placement_strategy,
        ),
        run_config=RunConfig(
            name=f"cleverthis-{job}-{uuid.uuid4().hex[:8]}",
            storage_path=os.environ.get("CLEVERTHIS_RAY_STORAGE", os.path.expanduser("~/ray_results")),
            failure_config=FailureConfig(max_failures=tc.max_failures),
            callbacks=sweep.callbacks() if sweep else None,
        ),
        **(trainer_kwargs or {}),
    )
    events.emit("phase", phase="starting_workers", workers=spec.workers, **fields)
    try:
        trainer.fit()
    finally:
        if watch.sigterm.is_set():  # a cancel is in progress: its thread prints the outcome and exits
            time.sleep(grace + 10)
        watch.done.set()
        watch.forget()


FATAL_KINDS = {"disk_full", "permission_denied", "dataset", "spec", "checkpoint", "out_of_memory", "gated_model",
               "model_not_cached"}


class DriverWatch:
    """The driver's side: SIGTERM -> ask rank 0 for a checkpoint, wait for it, exit; a fatal error -> exit."""

    def __init__(self, handle: Any, grace_s: float, *, parent: Any = None, on_exit: Any = None) -> None:
        self.handle = handle
        self.grace_s = grace_s
        self.parent, self.on_exit = parent, on_exit  # a sweep's control (its stop flag stands for SIGTERM)
        self.sigterm = threading.Event()
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cleverthis-driver-watch", daemon=True)

    def install(self) -> None:
        if self.parent is None:  # (a sweep's trial runs in a thread of Ray Tune's actor: no signals there)
            signal.signal(signal.SIGTERM, self._on_signal)
        self._thread.start()

    def _exit(self, code: int) -> None:
        if self.on_exit is not None:
            self.on_exit()
        self.forget()
        os._exit(code)

    def forget(self) -> None:
        """The job's control state is no longer needed (its keys go from the GCS)."""
        try:
            self.handle.clear()
        except Exception:
            pass

    def _parent_stopped(self) -> bool:
        import ray

        try:
            return self.parent is not None and bool(ray.get(self.parent.stop_requested.remote(), timeout=10))
        except Exception:
            return False

    def _on_signal(self, signum: int, frame: Any) -> None:  # only sets a flag: the thread does the work
        self.sigterm.set()

    def snapshot(self) -> dict[str, Any] | None:
        try:
            return self.handle.snapshot()
        except Exception:
            return None

    def _fatal(self) -> dict[str, Any] | None:
        try:
            return self.handle.fatal()
        except Exception:
            return None

    def _run(self) -> None:
        while not self.done.is_set():
            if self.sigterm.wait(POLL_S):
                break
            if self._parent_stopped():
                self.sigterm.set()
                break
            fatal = self._fatal()
            if fatal:
                self._exit_fatal(fatal)
                return
        if self.done.is_set():
            return
        self._cancel()

    def _exit_fatal(self, info: dict[str, Any]) -> None:
        line = info.get("line")
        if line:  # the worker's own error event, re-printed verbatim (same src/seq: parsers keep one copy)
            _print_line(line)
        events.emit("phase", phase="failed", reason=info.get("kind"))
        time.sleep(1.5)  # let Ray forward the workers' last log lines before the driver goes
        self._exit(1)

    def _cancel(self) -> None:
        t0 = time.time()
        events.emit("phase", phase="cancelling", grace_s=self.grace_s)
        try:
            self.handle.request_stop("cancel")
        except Exception:
            pass
        # Leave ~2 s of the grace for the exit itself; Ray SIGKILLs us when it runs out.
        deadline = t0 + max(1.0, self.grace_s - 2.0)
        ack = None
        while time.time() < deadline:
            snap = self.snapshot() or {}
            ack = snap.get("ack")
            if snap.get("fatal"):  # the cancel checkpoint itself failed (disk full...): say why, then go
                if snap["fatal"].get("line"):
                    _print_line(snap["fatal"]["line"])
                events.emit("phase", phase="cancelled", checkpoint=None,
                            message=f"the cancel checkpoint could not be written: {snap['fatal'].get('message')}")
                time.sleep(1.0)
                self._exit(0)
            if ack is not None or snap.get("phase") != "training":
                break
            time.sleep(0.2)
        if ack and ack.get("line"):
            _print_line(ack["line"])
        if ack is None and (self.snapshot() or {}).get("phase") == "training":
            events.emit("phase", phase="cancelled", checkpoint=None,
                        message=f"no checkpoint within the stop grace of {self.grace_s:.0f}s "
                                f"(RAY_JOB_STOP_WAIT_TIME_S); the last epoch checkpoint stays the latest")
        else:
            events.emit("phase", phase="cancelled", checkpoint=(ack or {}).get("path"),
                        seconds=round(time.time() - t0, 2))
        time.sleep(1.0)
        sys.stdout.flush()
        self._exit(0)


def _print_line(line: str) -> None:
    sys.stdout.write(line if line.endswith("\n") else line + "\n")
    sys.stdout.flush()
