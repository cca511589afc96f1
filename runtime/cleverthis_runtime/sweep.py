"""A sweep's driver: Ray Tune runs the trials, each the same training as a job (docs/sweeps-chat.md).

Ray 2.60's way of running Ray Train V2 under Tune: the Tuner's trainable (`run_trial`) is a driver that builds
the job's TorchTrainer (with `TuneReportCallback`) and calls `fit`; the workers report each epoch's losses with
`ray.train.report`, which is what Tune's scheduler (ASHA) and the best-trial choice read. The trials are decided
beforehand (sweep_spec.py) and handed to Tune as a grid of trial specs, so each has its name (`SWEEP-t3`), its
checkpoint folder (`<checkpoints>/SWEEP/SWEEP-t3`) and its events: every event a trial's processes print
carries `trial`, and the service shows each trial as a child job of the sweep.

Cancel: Ray's stop_job sends SIGTERM to this driver. It raises the sweep's stop flag (`SweepControl`); each
running trial's watch sees it and cancels its training as a job's driver does (the checkpoint of the exact
step), then says it has ended; the driver waits for them within the stop grace, marks the trials that never
started as cancelled, and exits.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from typing import Any

from . import events
from .spec import JobSpec
from .sweep_spec import trial_name, trial_spec_data, trial_values

__all__ = ["SweepControl", "TrialHooks", "run_sweep", "run_trial"]


class SweepControl:
    """The sweep's actor: the stop flag its trials watch, and which trials have started and are running (an actor,
    not keys as a job's control state: a trial's start must check the flag and register in one step)."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.stop: dict[str, Any] | None = None
        self.started: list[str] = []
        self.running: set[str] = set()

    def request_stop(self, reason: str = "cancel") -> None:
        if self.stop is None:
            self.stop = {"reason": reason, "t": time.time()}

    def stop_requested(self) -> bool:
        return self.stop is not None

    def trial_started(self, name: str) -> bool:
        """A trial starts; False when the sweep is being cancelled (the trial must not start)."""
        if self.stop is not None:
            return False
        self.started.append(name)
        self.running.add(name)
        return True

    def trial_ended(self, name: str) -> None:
        self.running.discard(name)

    def trials(self) -> dict[str, list[str]]:
        return {"started": list(self.started), "running": sorted(self.running)}


class TrialHooks:
    """What a trial's driver (control.drive) does differently from a job's."""

    def __init__(self, control: Any, name: str) -> None:
        self.control, self.name = control, name

    def callbacks(self) -> list[Any]:
        from ray.tune.integration.ray_train import TuneReportCallback

        return [TuneReportCallback()]

    def ended(self) -> None:
        import ray

        try:
            ray.get(self.control.trial_ended.remote(self.name), timeout=10)
        except Exception:  # the sweep's driver is gone: nobody waits for us
            pass


def run_sweep(spec: JobSpec, job: str) -> None:
    """The sweep's driver (the job's entrypoint when the spec has `sweep`)."""
    import ray
    from ray import tune

    from .data import default_checkpoint_dir

    assert spec.sweep is not None
    data = spec_data(spec)
    sweep_dir = os.path.join(spec.output_dir or default_checkpoint_dir(spec.dataset_path), job)
    trials = [{"index": i, "name": trial_name(job, i), "values": values,
               "spec": trial_spec_data(data, values, i, sweep_dir)}
              for i, values in enumerate(trial_values(spec.sweep), 1)]
    metric = _metric(spec)
    events.emit("sweep", trials=[{"name": t["name"], "values": t["values"]} for t in trials], metric=metric,
                scheduler=spec.sweep.scheduler, concurrent=spec.sweep.concurrent, checkpoint_dir=sweep_dir)
    if not ray.is_initialized():
        ray.init()
    control = ray.remote(num_cpus=0, max_restarts=0)(SweepControl).remote(job)
    grace = float(os.environ.get("RAY_JOB_STOP_WAIT_TIME_S", "3"))
    SweepWatch(control, grace, [t["name"] for t in trials]).install()
    scheduler = None
    if spec.sweep.scheduler == "asha":
        from ray.tune.schedulers import ASHAScheduler

        longest = max(int(t["spec"].get("epochs") or spec.epochs) for t in trials)
        scheduler = ASHAScheduler(time_attr="training_iteration", max_t=max(longest, 1), grace_period=1,
                                  reduction_factor=2)
    tuner = tune.Tuner(
        # The trial's driver holds no CPU: its Ray Train workers ask for theirs, as a job's do (Tune refuses an
        # empty request, so it asks for one byte of memory).
        tune.with_resources(tune.with_parameters(run_trial, control=control), {"cpu": 0, "memory": 1}),
        param_space={"trial": tune.grid_search(trials)},
        tune_config=tune.TuneConfig(
            metric="objective", mode="min", scheduler=scheduler, max_concurrent_trials=spec.sweep.concurrent,
            trial_name_creator=_trial_dir, trial_dirname_creator=_trial_dir,
        ),
        run_config=tune.RunConfig(
            name=f"cleverthis-{job}-{uuid.uuid4().hex[:8]}", verbose=0,
            storage_path=os.environ.get("CLEVERTHIS_RAY_STORAGE", os.path.expanduser("~/ray_results")),
        ),
    )
    grid = tuner.fit()
    _report(grid, trials, metric)


def run_trial(config: dict[str, Any], control: Any = None) -> None:
    """Ray Tune's trainable: one trial, driven like a job (control.drive), its events marked with its name."""
    import ray

    from .__main__ import prepare, report_failure
    from .backend import backend_for

    trial = config["trial"]
    name = trial["name"]
    events.keep_in_ray_logs()
    events.set_trial(name)
    events.set_source(f"{name}/driver")
    if control is not None and not ray.get(control.trial_started.remote(name)):
        events.emit("phase", phase="cancelled", checkpoint=None, message="the sweep was cancelled before it started")
        return
    hooks = TrialHooks(control, name)
    events.emit("phase", phase="initializing", pid=os.getpid())
    try:
        spec = JobSpec.model_validate(trial["spec"])
        loop_config = prepare(spec, name)
        loop_config["trial"] = name
        loop_config["tune"] = True
        backend_for(spec.framework).fit(spec, name, loop_config, sweep=hooks)
    except Exception as e:
        hooks.ended()
        if _ended_by_tune(e):  # Ray Tune stopped the trial (ASHA, or its last result): the driver says how it ended
            return
        report_failure(e)
        events.emit("phase", phase="failed", reason=type(e).__name__)
        raise
    events.emit("phase", phase="succeeded")
    hooks.ended()


def _ended_by_tune(e: BaseException) -> bool:
    """Whether the trial's training died because Ray Tune ended the trial (ASHA, or its last result reached
    `max_t`) while Ray Train's controller was still winding down. Two shapes, whichever Tune's teardown reaches
    first: the trial's placement group, in which the controller runs, is removed; or the trial's own actor, which
    owns the controller, exits on purpose (a crash of that process would not get here)."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        text = str(cur)
        if "placement group was removed" in text or (
                "because its owner has died" in text and "exit type: INTENDED_SYSTEM_EXIT" in text):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


class SweepWatch:
    """The sweep driver's SIGTERM: stop every trial, wait for their cancel checkpoints, exit."""

    def __init__(self, control: Any, grace_s: float, names: list[str]) -> None:
        self.control, self.grace_s, self.names = control, grace_s, names
        self.sigterm = threading.Event()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.sigterm.set())
        threading.Thread(target=self._run, name="cleverthis-sweep-watch", daemon=True).start()

    def _run(self) -> None:
        import ray

        self.sigterm.wait()
        t0 = time.time()
        events.emit("phase", phase="cancelling", grace_s=self.grace_s)
        state = {"started": [], "running": []}
        try:
            ray.get(self.control.request_stop.remote("cancel"), timeout=10)
        except Exception:
            pass
        # Each running trial writes its cancel checkpoint within the grace (they run at once); leave ~2 s to exit.
        while time.time() < t0 + max(1.0, self.grace_s - 2.0):
            try:
                state = ray.get(self.control.trials.remote(), timeout=10)
            except Exception:
                break
            if not state["running"]:
                break
            time.sleep(0.2)
        for name in self.names:
            if name not in state["started"]:
                events.emit("phase", trial=name, phase="cancelled", checkpoint=None,
                            message="the sweep was cancelled before this trial started")
        time.sleep(1.0)  # the trials' last lines reach this driver's log through Ray
        events.emit("phase", phase="cancelled", trials_running=state["running"],
                    seconds=round(time.time() - t0, 2))
        os._exit(0)


def spec_data(spec: JobSpec) -> dict[str, Any]:
    """The spec as submitted (service runtime_env.spec_json): training_config holds only the keys set."""
    data = spec.model_dump(mode="json")
    if spec.training_config is not None:
        data["training_config"] = spec.training_config.model_dump(mode="json", exclude_unset=True)
    return data


def _trial_dir(trial: Any) -> str:
    return str(trial.config["trial"]["name"])


def _metric(spec: JobSpec) -> str:
    """The metric that picks the best trial: the validation loss when there is validation data."""
    from .data import exists, load_dataset, read_training_config
    from .spec import merge_training_config

    assert spec.sweep is not None
    file_cfg = read_training_config(spec.dataset_path)[0] if exists(spec.dataset_path) else None
    tc = merge_training_config(file_cfg, spec.training_config)
    validated = tc.validation_split > 0 or load_dataset(spec.dataset_path, tc.columns).validation_examples is not None
    if spec.sweep.metric == "eval_loss" and not validated:
        from .data import DatasetError

        raise DatasetError("sweep.metric: eval_loss needs validation data (a validation file, or "
                           "training_config.validation_split above 0)")
    if spec.sweep.metric == "auto":
        return "eval_loss" if validated else "loss"
    return spec.sweep.metric


def _report(grid: Any, trials: list[dict[str, Any]], metric: str) -> None:
    """Tune's outcome as a `sweep_result` event; a trial that ASHA stopped before its last epoch ends here."""
    out, best = [], None
    by_name = {t["name"]: t for t in trials}
    for result in grid:
        name = result.config["trial"]["name"]
        m = result.metrics or {}
        epochs = m.get("training_iteration")
        planned = int(by_name[name]["spec"].get("epochs") or 0)
        # every trial's last word (a trial that already said it keeps its own: the first final phase counts)
        if result.error is not None:
            status = "failed"
            events.emit("phase", trial=name, phase="failed", message=str(result.error).splitlines()[0][:300])
        elif epochs is not None and epochs < planned:
            status = "stopped_early"
            events.emit("phase", trial=name, phase="succeeded",
                        message=f"stopped early by the ASHA scheduler: it trailed after epoch {epochs} of {planned}")
        else:
            status = "succeeded"
            events.emit("phase", trial=name, phase="succeeded")
        objective = m.get("objective")
        out.append({"name": name, "values": by_name[name]["values"], "status": status,
                    "objective": objective, "epochs": epochs})
        if objective is not None and (best is None or objective < best[0]):
            best = (objective, name)
    out.sort(key=lambda t: by_name[t["name"]]["index"])
    events.emit("sweep_result", metric=metric, best=best[1] if best else None, trials=out)
