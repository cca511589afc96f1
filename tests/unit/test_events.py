from __future__ import annotations

import json

from cleverthis_runtime import events
from jupyter_cleverthis.service.jobs import _JobEvents


def test_emit_then_parse_roundtrip(capsys):
    events.set_source("driver")
    events.emit("phase", phase="initializing")
    events.emit("step", step=1, loss=2.5)
    lines = capsys.readouterr().out.splitlines()
    evs = list(events.parse_events(lines))
    assert [(e["type"], e["seq"], e["src"]) for e in evs] == [("phase", 1, "driver"), ("step", 2, "driver")]


def test_parse_finds_prefix_after_ray_worker_prefix_and_drops_duplicates():
    line = "(RayTrainWorker pid=123) " + events.PREFIX + json.dumps({"src": "rank0", "seq": 4, "type": "step"})
    evs = list(events.parse_events([line, line, "plain log line", events.PREFIX + "{broken"]))
    assert len(evs) == 1 and evs[0]["seq"] == 4


def test_incremental_feed_ignores_partial_last_line():
    je = _JobEvents()
    full = events.PREFIX + json.dumps({"src": "d", "seq": 1, "type": "phase", "phase": "running"}) + "\n"
    je.feed(full[:20])
    assert je.events == []
    je.feed(full)
    je.feed(full + full)  # the same line again (e.g. a replayed tail) counts once
    assert [e["i"] for e in je.events] == [1]
