"""Sweeps without a cluster: which trials a sweep spec makes, how bad sweeps are refused (by field, in words), the
`sweep` command's grammar, and how a trial's status follows from its events and its sweep's record."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from cleverthis_runtime.spec import JobSpec
from cleverthis_runtime.sweep_spec import SweepSpec, trial_spec_data, trial_values
from jupyter_cleverthis.cli import parse_line, spec_from_args
from jupyter_cleverthis.errors import BadRequest, InvalidSpec
from jupyter_cleverthis.service.sweeps import split_trial_name, trial_events, trial_record
from jupyter_cleverthis.spec import JobStatus

BASE = {"name": "sw", "base_model": "m", "dataset_path": "/d"}


def test_value_lists_form_a_grid_in_order_repeated_or_sampled_to_the_number_of_trials():
    grid = SweepSpec(parameters={"learning_rate": {"values": [1e-4, 1e-3]}, "lora_r": {"values": [8, 16]}})
    assert grid.trial_count() == 4
    assert trial_values(grid) == [{"learning_rate": 1e-4, "lora_r": 8}, {"learning_rate": 1e-4, "lora_r": 16},
                                  {"learning_rate": 1e-3, "lora_r": 8}, {"learning_rate": 1e-3, "lora_r": 16}]
    more = SweepSpec(parameters={"epochs": {"values": [1, 2]}}, trials=5)
    assert [v["epochs"] for v in trial_values(more)] == [1, 2, 1, 2, 1]
    fewer = SweepSpec(parameters={"learning_rate": {"values": [1, 2, 3, 4]}, "lora_r": {"values": [4, 8]}}, trials=3)
    picked = trial_values(fewer)
    assert len(picked) == len({tuple(v.items()) for v in picked}) == 3  # distinct combinations
    assert picked == trial_values(fewer)  # seeded: the service and the runtime decide the same trials


def test_ranges_are_sampled_within_bounds_on_their_scale_and_whole_where_the_field_is():
    spec = SweepSpec(parameters={"learning_rate": {"min": 1e-5, "max": 1e-2, "sampling": "log"},
                                 "lora_r": {"min": 4, "max": 64}}, trials=40)
    values = trial_values(spec)
    lrs = [v["learning_rate"] for v in values]
    assert all(1e-5 <= x <= 1e-2 for x in lrs)
    # log sampling: about as many values per decade (a linear draw would put ~90 % in the top decade)
    assert sum(1 for x in lrs if x < 1e-3) >= 15
    assert all(isinstance(v["lora_r"], int) and 4 <= v["lora_r"] <= 64 for v in values)
    assert trial_values(spec.model_copy(update={"seed": 1})) != values


@pytest.mark.parametrize(("sweep", "words"), [
    ({"parameters": {"lora_r": {"min": 8, "max": 32}}}, "trials: give the number of trials (lora_r is a range)"),
    ({"parameters": {"lora_r": {"values": [8, 200]}}}, "trial 2 (lora_r=200): training_config.lora_r"),
    ({"parameters": {"learning_rate": {"min": 0, "max": 1, "sampling": "log"}}, "trials": 2},
     "log sampling needs a range above 0"),
    ({"parameters": {"dropout": {"values": [0.1]}}}, "parameters.dropout"),
    ({"parameters": {}}, "at least 1 item"),
    ({"parameters": {"lora_r": {"values": [8], "min": 1, "max": 2}}}, "either values or a range"),
])
def test_a_bad_sweep_is_refused_naming_what_is_wrong(sweep, words):
    with pytest.raises(ValidationError) as e:
        JobSpec.model_validate({**BASE, "sweep": sweep})
    assert words in str(e.value)


def test_trial_names_must_fit_and_sweeps_are_torch_jobs():
    with pytest.raises(ValidationError, match="must fit in 64 characters"):
        JobSpec.model_validate({**BASE, "name": "x" * 62, "sweep": {"parameters": {"epochs": {"values": [1, 2]}}}})
    with pytest.raises(ValidationError, match="sweeps run framework torch jobs"):
        JobSpec.model_validate({**BASE, "framework": "tensorflow", "training_config": {"method": "full"},
                                "sweep": {"parameters": {"epochs": {"values": [1]}}}})


def test_a_trials_spec_keeps_what_the_user_set_and_gets_its_own_folder():
    data = {**BASE, "epochs": 3, "training_config": {"lora_r": 8},
            "sweep": {"parameters": {"learning_rate": {"values": [0.1]}}}}
    trial = trial_spec_data(data, {"learning_rate": 0.1, "epochs": 2}, 3, "/ckpt/sw")
    assert trial["name"] == "sw-t3" and trial["epochs"] == 2 and "sweep" not in trial
    assert trial["training_config"] == {"lora_r": 8, "learning_rate": 0.1}  # only set keys: the file keeps the rest
    assert trial["output_dir"] == "/ckpt/sw/sw-t3"
    assert JobSpec.model_validate(trial).training_config.model_fields_set == {"lora_r", "learning_rate"}


def test_the_sweep_command_builds_the_spec_and_names_a_bad_param():
    a = parse_line("sweep --name s1 --model m --dataset /d --param learning_rate=1e-4,3e-4 --param lora_r=8:32:log "
                   "--trials 4 --concurrent 2 --scheduler asha")
    spec = spec_from_args(a)
    assert spec.sweep.parameters["learning_rate"].values == [1e-4, 3e-4]
    assert spec.sweep.parameters["lora_r"].sampling == "log" and spec.sweep.trials == 4
    assert spec.sweep.concurrent == 2 and spec.sweep.scheduler == "asha"
    with pytest.raises(BadRequest, match="must be numbers"):
        spec_from_args(parse_line("sweep --name s1 --model m --dataset /d --param learning_rate=fast"))
    with pytest.raises(InvalidSpec, match="trials"):
        spec_from_args(parse_line("sweep --name s1 --model m --dataset /d --param lora_r=4:8"))


def _parent(status="RUNNING", end_time=None):
    return SimpleNamespace(submission_id="sw", status=status, message="driver died", end_time=end_time,
                           metadata={"owner": "ann"}, runtime_env={})


@pytest.mark.parametrize(("parent", "phases", "expected"), [
    ("RUNNING", [], JobStatus.QUEUED),
    ("RUNNING", ["initializing", "loading_model"], JobStatus.INITIALIZING),
    ("RUNNING", ["initializing", "running"], JobStatus.RUNNING),
    ("RUNNING", ["initializing", "running", "succeeded"], JobStatus.SUCCEEDED),
    ("RUNNING", ["running", "cancelled"], JobStatus.CANCELLED),
    ("STOPPED", ["running"], JobStatus.CANCELLED),  # the sweep was cancelled without the trial's last word
    ("FAILED", ["running"], JobStatus.FAILED),
    ("STOPPED", [], JobStatus.CANCELLED),  # never started
])
def test_a_trials_status_follows_its_events_and_its_sweep(parent, phases, expected):
    from jupyter_cleverthis.service.detail import status_of

    evs = [{"type": "phase", "phase": p, "trial": "sw-t2", "t": 100.0 + i} for i, p in enumerate(phases)]
    evs.append({"type": "phase", "phase": "running", "trial": "sw-t1", "t": 99.0})
    own = trial_events(evs, "sw-t2")
    record = trial_record(_parent(parent, end_time=200_000), {"name": "sw-t2", "spec": {**BASE, "name": "sw-t2"}},
                          own)
    assert status_of(record, own) == expected
    assert record.metadata == {"owner": "ann", "parent": "sw"} and [e["i"] for e in own] == list(range(1, len(own) + 1))


def test_trial_names():
    assert split_trial_name("my-sweep-t12") == ("my-sweep", 12)
    assert split_trial_name("my-sweep") is None and split_trial_name("x-t0") is None


# The controller's death as Ray words it when Tune ends a trial while Ray Train's controller is still winding down
# (the detail lines are Ray 2.60's raylet and gcs_server strings, as a real job's log has them), and when the
# trial's process really crashed.
_DIED = "The actor died unexpectedly before finishing this task.\n\tclass_name: TrainController\n\tpid: 22740\n"
_OWNER = (_DIED + "The actor is dead because its owner has died. Owner Id: ea70f40f Owner Ip address: 127.0.0.1 "
          "Owner worker exit type: {} Worker exit detail: Owner's worker process has crashed.")


@pytest.mark.parametrize(("message", "by_tune"), [
    (_DIED + "Worker exit type: INTENDED_SYSTEM_EXIT Worker exit detail: Destroying worker since its placement group "
     "was removed. Placement group id: 1c9a", True),
    ("Could not create the actor because its associated placement group was removed.", True),
    (_OWNER.format("INTENDED_SYSTEM_EXIT"), True),
    (_OWNER.format("SYSTEM_ERROR"), False),
    ("CUDA out of memory", False),
])
def test_a_trial_ended_by_tune_is_told_from_a_failed_one(message, by_tune):
    from cleverthis_runtime.sweep import _ended_by_tune

    try:
        try:
            raise RuntimeError(message)
        except RuntimeError as inner:
            raise ValueError("trainer.fit failed") from inner
    except ValueError as outer:  # the words may sit in the cause, as Ray Train wraps them
        assert _ended_by_tune(outer) is by_tune
