from __future__ import annotations

import json

from cleverthis_runtime import events
from jupyter_cleverthis.service.store import EventStore


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


def _line(src: str, seq: int, **kw) -> str:
    return events.PREFIX + json.dumps({"src": src, "seq": seq, "type": "step", **kw}) + "\n"


def test_store_ignores_partial_last_line_and_repeats(tmp_path):
    store = EventStore(tmp_path / "e.sqlite")
    full = _line("d", 1)
    store.ingest("c", "j", full[:20], final=False)
    assert store.events("c", "j") == []
    store.ingest("c", "j", full, final=False)
    store.ingest("c", "j", full + full, final=False)  # the same line again (a replayed tail) counts once
    assert [e["i"] for e in store.events("c", "j")] == [1]


def test_store_survives_restart_and_continues_from_offset(tmp_path):
    path = tmp_path / "e.sqlite"
    text = _line("rank0", 1, loss=3.0) + _line("rank0", 2, loss=2.0)
    EventStore(path).ingest("c", "j", text, final=False)
    again = EventStore(path)  # a new server process
    assert [e["loss"] for e in again.events("c", "j")] == [3.0, 2.0]
    again.ingest("c", "j", text + _line("rank0", 3, loss=1.0), final=True)
    assert [e["i"] for e in again.events("c", "j", since=2)] == [3]
    assert again.cursor("c", "j")[1] is True


def test_store_detects_gaps_and_refills_from_the_full_log(tmp_path):
    store = EventStore(tmp_path / "e.sqlite")
    full = _line("rank0", 1) + _line("rank0", 2) + _line("rank0", 3)
    # A tail that lost line 2: the events it delivered are stored, the hole is visible...
    store.add_events("c", "j", [json.loads(x[len(events.PREFIX):]) for x in (_line("rank0", 1), _line("rank0", 3))])
    assert store.gaps("c", "j") == {"rank0": [2]}
    # ...and the next read of the full log fills it.
    store.ingest("c", "j", full, final=False)
    store.ingest("c", "j", full, final=False)
    assert store.gaps("c", "j") == {}
    assert sorted(e["seq"] for e in store.events("c", "j")) == [1, 2, 3]


def test_final_phase_is_not_replaced_by_a_late_worker_line():
    """A worker's log line can reach the job log after the driver's own last word (Ray forwards it later)."""
    from jupyter_cleverthis.service.jobs import phase_of

    evs = [{"type": "phase", "phase": p} for p in ("running", "cancelling", "cancelled", "cancel_checkpoint_written")]
    assert phase_of(evs) == "cancelled"
    assert phase_of(evs[:2] + [{"type": "step"}]) == "cancelling"
    assert phase_of([{"type": "step"}]) is None


def test_secrets_of_the_server_environment_never_reach_a_job(monkeypatch):
    """Ray shows a job's env_vars in its job records: only settings and file paths travel."""
    from jupyter_cleverthis.service.jobs import JobService
    from jupyter_cleverthis.spec import JobSpec

    secrets = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
               "AWS_SESSION_TOKEN": "session-tok", "HF_TOKEN": "hf_secret_token"}
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    env = JobService.__new__(JobService)._runtime_env(JobSpec(name="x", dataset_path="s3://b/d"))
    text = json.dumps(env)
    assert not [v for v in secrets.values() if v in text]
    assert env["env_vars"]["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"


def _writer(path: str, k: int, text: str) -> None:
    """One process of several writing the same job: its own source's events in small batches, and the shared log."""
    store = EventStore(path)
    for start in range(1, 201, 5):
        store.add_events("c", "j", [{"src": f"p{k}", "seq": s, "type": "step"} for s in range(start, start + 5)])
        store.ingest("c", "j", text[: len(text) * start // 200], final=False)


def test_store_shared_by_processes_loses_and_repeats_nothing(tmp_path):
    """The Jupyter server and kernels write one store: no "database is locked", no index given twice, no event lost."""
    import multiprocessing

    path = str(tmp_path / "e.sqlite")
    EventStore(path)  # the schema, before the writers race for it
    text = "".join(_line("rank0", s) for s in range(1, 101))
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, k, text)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    store = EventStore(path)
    store.ingest("c", "j", text, final=True)
    evs = store.events("c", "j")
    assert [e["i"] for e in evs] == list(range(1, 4 * 200 + 100 + 1))
    assert sorted(e["seq"] for e in evs if e["src"] == "rank0") == list(range(1, 101))
    assert store.gaps("c", "j") == {}


def test_a_hole_in_a_new_read_is_refilled_and_a_clean_store_is_not_rescanned(tmp_path, monkeypatch):
    store = EventStore(tmp_path / "e.sqlite")
    lines = [_line("rank0", k) for k in range(1, 7)]
    store.ingest("c", "j", "".join(lines[:2]), final=False)
    scans = []
    real = EventStore.gaps
    monkeypatch.setattr(EventStore, "gaps", lambda self, c, j: (scans.append(1), real(self, c, j))[1])
    # a clean continuation: no whole-job scan
    store.ingest("c", "j", "".join(lines[:3]), final=False)
    assert scans == [] and [e["seq"] for e in store.events("c", "j")] == [1, 2, 3]
    # a read whose new part skips line 5 (a tail that lost it) while the full log has it: refilled at once
    text = "".join(lines)
    cursor = len("".join(lines[:3]))
    tail_lost = text[:cursor] + lines[3] + lines[5]
    store.ingest("c", "j", tail_lost, final=False)
    assert scans and sorted(e["seq"] for e in store.events("c", "j")) == [1, 2, 3, 4, 6]
    store.ingest("c", "j", text + _line("rank0", 7), final=False)  # the hole is still known: the full log fills it
    assert sorted(e["seq"] for e in store.events("c", "j")) == [1, 2, 3, 4, 5, 6, 7]
