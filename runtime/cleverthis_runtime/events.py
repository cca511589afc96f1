"""Structured events: how the runtime speaks to the UI.

Each event is one line in the job's log: a fixed prefix, then one JSON object with a per-source sequence
number (`src`, `seq`), a wall-clock time `t` and a `type`; each type's fields are a pydantic model in
event_models.py, which `emit` checks (the service and the front-end's types rely on that schema). Ray prefixes lines printed by worker actors
with "(RayTrainWorker pid=...)", so the parser finds the prefix anywhere in a line.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import ValidationError

from . import event_models

PREFIX = "@@cleverthis-event "

_lock = threading.Lock()
_counter = itertools.count(1)
_source: str | None = None
_trial: str | None = None


def set_source(name: str) -> None:
    """Name this process's event stream (e.g. "driver", "rank0"); sequence numbers count per source."""
    global _source, _counter
    with _lock:
        _source = name
        _counter = itertools.count(1)


def set_trial(name: str | None) -> None:
    """A sweep's trial (sweep.py): this process's events carry `trial` (the trial's job name), which is how the
    service tells the trials of one Ray job apart."""
    global _trial
    _trial = name


def emit(type_: str, **fields: Any) -> dict[str, Any]:
    """Print one event line and flush it, so it reaches Ray's log tail promptly. The fields must match the
    type's model (event_models.py): a mismatch is a programming error, raised before anything is printed."""
    with _lock:
        event = {"src": _source or f"pid{os.getpid()}", "seq": next(_counter), "t": round(time.time(), 3), "type": type_}
        if _trial:
            event["trial"] = _trial
        event.update({k: str(v) if isinstance(v, event_models.Phase) else v for k, v in fields.items()})
        event_models.check(event)
        line = to_line(event)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    return event


def keep_in_ray_logs() -> None:
    """Exempt event lines from Ray's log deduplication (call before importing ray in a job's driver).

    Ray drops a worker's log line when another process printed a line that is the same once every word
    containing a digit is removed, within 5 s: every event line reduces to the bare prefix, so with two
    workers, or a restarted worker group, events would be lost. The driver is where worker logs are
    deduplicated, so this is set there.
    """
    pattern = re.escape(PREFIX.strip())
    current = os.environ.get("RAY_DEDUP_LOGS_ALLOW_REGEX")
    if current and pattern not in current:
        pattern = f"{current}|{pattern}"
    os.environ["RAY_DEDUP_LOGS_ALLOW_REGEX"] = pattern


def to_line(event: dict[str, Any]) -> str:
    """The log line of an event (without the newline); printing it again is harmless: parsers keep one
    copy per (src, seq)."""
    return PREFIX + json.dumps(event, separators=(",", ":"), default=str)


def parse_line(line: str) -> dict[str, Any] | None:
    """The first event on a log line, or None (see `events_on_line`)."""
    return next(events_on_line(line), None)


_decoder = json.JSONDecoder()


def events_on_line(line: str) -> Iterator[dict[str, Any]]:
    """Every event on a log line. Usually one, but two threads printing into one process's stdout can join
    lines: Ray's `print` of a forwarded worker line writes the text and its newline in two writes, and the
    driver's re-print of that event can land between them (`(RayTrainWorker ...) @@...{...}@@...{...}`).
    Each object is decoded from its prefix on, ignoring what follows it.

    An event is checked against its type's model (event_models.py): a valid `phase` event's phase becomes a
    `Phase` (a str, so it compares and serialises as the word); an unknown type, or one that does not validate
    (another runtime version, a user's print), is kept as it is and marked with `"invalid": "<why>"` for a known
    type; nothing is dropped."""
    idx = line.find(PREFIX)
    while idx >= 0:
        start = idx + len(PREFIX)
        try:
            obj, end = _decoder.raw_decode(line, start)
        except ValueError:  # a cut-off copy: look for the next prefix inside it
            idx = line.find(PREFIX, start)
            continue
        idx = line.find(PREFIX, end)
        if isinstance(obj, dict) and "type" in obj:
            yield _checked(obj)


def _checked(obj: dict[str, Any]) -> dict[str, Any]:
    model = event_models.BY_TYPE.get(str(obj["type"]))
    if model is not None:
        try:
            ev = model.model_validate(obj)
        except ValidationError as e:
            obj["invalid"] = f"{e.error_count()} field(s) do not match the {obj['type']} event's model: " + \
                "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()[:3])
        else:
            if isinstance(ev, event_models.PhaseEvent):
                obj["phase"] = ev.phase
    return obj


def parse_events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Events found in log lines, in log order, duplicates (same src and seq) dropped."""
    seen: set[tuple[str, int]] = set()
    for line in lines:
        for ev in events_on_line(line):
            key = (str(ev.get("src")), int(ev.get("seq", 0)))
            if key in seen:
                continue
            seen.add(key)
            yield ev


def typed(event: dict[str, Any]) -> event_models.Event:
    """The pydantic model of a parsed event (an unknown or malformed one stays a plain `Event`)."""
    return event_models.parse(event)
