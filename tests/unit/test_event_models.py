"""The events' models: what the runtime emits is what the schema says, and parsing keeps everything."""

import re
from pathlib import Path

import pytest

from cleverthis_runtime import event_models, events
from cleverthis_runtime.event_models import Phase

RUNTIME = Path(events.__file__).parent


def test_every_emitted_type_and_phase_has_a_model():
    src = "\n".join(p.read_text() for p in RUNTIME.glob("*.py"))
    types = set(re.findall(r'emit\(\s*"([a-z_]+)"', src))
    assert types, "no emit calls found"
    assert types <= set(event_models.BY_TYPE), types - set(event_models.BY_TYPE)
    # phase="x" and phase="x" if ... else "y"
    exprs = re.findall(r'phase=("[a-z_]+"(?: if [^,]* else "[a-z_]+")?)', src)
    phases = {word for e in exprs for word in re.findall(r'"([a-z_]+)"', e)}
    assert {"initializing", "cancel_checkpoint_written", "training_done"} <= phases
    assert phases <= {p.value for p in Phase}, phases - {p.value for p in Phase}


def test_emit_refuses_a_field_of_the_wrong_type_and_an_unknown_type(capsys):
    with pytest.raises(event_models.EventFieldError, match="step"):
        events.emit("step", step="not a number")
    with pytest.raises(event_models.EventFieldError, match="no model"):
        events.emit("made_up")
    assert capsys.readouterr().out == ""  # nothing printed for a refused event
    ev = events.emit("phase", phase=Phase.running, total_steps=3)
    assert ev["phase"] == "running" and '"phase":"running"' in capsys.readouterr().out


def test_parse_types_known_events_and_keeps_unknown_and_malformed_ones():
    step = events.typed({"src": "rank0", "seq": 1, "t": 1.0, "type": "step", "step": 2, "loss": 1.5, "extra": 7})
    assert isinstance(step, event_models.StepEvent) and step.loss == 1.5 and step.model_extra == {"extra": 7}
    other = events.typed({"src": "x", "seq": 1, "type": "someone_elses", "value": 1})
    assert type(other) is event_models.Event and other.model_extra == {"value": 1}
    bad = events.typed({"src": "x", "seq": 2, "type": "step", "step": "oops"})
    assert type(bad) is event_models.Event and bad.model_extra == {"step": "oops"}
    phase = events.typed({"src": "driver", "seq": 3, "type": "phase", "phase": "cancelling"})
    assert phase.phase is Phase.cancelling and phase.phase == "cancelling"


def test_the_schema_is_a_union_discriminated_by_type():
    schema = event_models.json_schema()
    assert schema["discriminator"]["propertyName"] == "type"
    assert set(schema["discriminator"]["mapping"]) == set(event_models.BY_TYPE)
    assert schema["$defs"]["Phase"]["enum"] == [p.value for p in Phase]


def test_the_service_side_parser_checks_each_line_against_its_model():
    good = events.to_line({"src": "driver", "seq": 1, "t": 1.0, "type": "phase", "phase": "running"})
    ev = events.parse_line("(RayTrainWorker pid=1) " + good)
    assert ev["phase"] is Phase.running and "invalid" not in ev
    bad = events.parse_line(events.to_line({"src": "rank0", "seq": 2, "type": "step", "step": "x", "loss": 1}))
    assert bad["step"] == "x" and "step" in bad["invalid"]  # kept, and said why
    other = events.parse_line(events.to_line({"src": "me", "seq": 3, "type": "my_own", "n": 1}))
    assert other == {"src": "me", "seq": 3, "type": "my_own", "n": 1}
    assert events.parse_line("no event here") is None


def test_two_events_joined_on_one_line_are_both_found():
    """Ray's print of a forwarded worker line writes its newline separately, and the driver's re-print of the
    same event can land between the two writes: the worker's fatal error is then on no line of its own, and a
    parser of one event per line would leave the job's error at "phase failed"."""
    err = events.to_line({"src": "rank0", "seq": 56, "t": 1.0, "type": "error", "kind": "disk_full",
                          "message": "cannot write checkpoint epoch-2: [Errno 28] No space left on device",
                          "traceback": "Traceback ...\n  {\"not\": \"an event\"}\n" * 300})
    failed = events.to_line({"src": "driver", "seq": 4, "t": 2.0, "type": "phase", "phase": "failed"})
    log = ["(RayTrainWorker pid=7) " + err + err, "", failed]
    found = list(events.parse_events(log))
    assert [(e["src"], e["seq"], e["type"]) for e in found] == [("rank0", 56, "error"), ("driver", 4, "phase")]
    assert found[0]["kind"] == "disk_full" and "invalid" not in found[0]
    # A copy cut off mid-object, then a whole one: the whole one is found; text after an object is ignored.
    cut = "(RayTrainWorker pid=7) " + err[: len(err) // 2] + failed + " trailing words"
    assert [(e["src"], e["seq"]) for e in events.events_on_line(cut)] == [("driver", 4)]
    assert list(events.events_on_line(events.PREFIX + "{not json")) == []
