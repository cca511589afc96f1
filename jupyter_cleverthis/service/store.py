"""The event store: parsed job events kept in SQLite so curves and metrics load instantly and survive restarts.

Ray stays the source of truth: the store can always be rebuilt from a job's log. Each job keeps the log
offset parsed so far; events are unique by (src, seq), and a hole in a source's sequence numbers (a line
lost on the way) makes the next refresh re-read the whole log.

Several processes share one store (the Jupyter server and each kernel's `%train`, under one CLEVERTHIS_HOME):
every write is one `BEGIN IMMEDIATE` transaction that reads the next event index inside it, and a writer waits
for another's transaction (BUSY_TIMEOUT) instead of failing with "database is locked".
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cleverthis_runtime.events import parse_events

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
  cluster TEXT NOT NULL, job TEXT NOT NULL, i INTEGER NOT NULL, src TEXT NOT NULL, seq INTEGER NOT NULL,
  type TEXT NOT NULL, body TEXT NOT NULL,
  PRIMARY KEY (cluster, job, i), UNIQUE (cluster, job, src, seq)
);
CREATE TABLE IF NOT EXISTS cursors (
  cluster TEXT NOT NULL, job TEXT NOT NULL, log_offset INTEGER NOT NULL, final INTEGER NOT NULL,
  PRIMARY KEY (cluster, job)
);
"""


BUSY_TIMEOUT = 60.0  # seconds a writer waits for another process's transaction


class EventStore:
    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # durable enough under WAL: the log at Ray rebuilds it
        self._db.executescript(SCHEMA)
        self._lock = threading.RLock()
        self._whole: set[tuple[str, str]] = set()  # jobs known to have no hole (see ingest)

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction, taken at once (a deferred one could read a stale index, then fail to upgrade)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def cursor(self, cluster: str, job: str) -> tuple[int, bool]:
        row = self._db.execute("SELECT log_offset, final FROM cursors WHERE cluster=? AND job=?",
                               (cluster, job)).fetchone()
        return (int(row[0]), bool(row[1])) if row else (0, False)

    def ingest(self, cluster: str, job: str, text: str, *, final: bool) -> int:
        """Parse the log past the stored offset; returns how many new events were stored."""
        offset, _ = self.cursor(cluster, job)
        restart = len(text) < offset  # a different (shorter) log: start over
        if restart:
            offset = 0
        end = len(text) if final else text.rfind("\n") + 1
        new = list(parse_events(text[offset:end].splitlines())) if end > offset else []
        key = (cluster, job)
        with self._write():
            # Holes are looked for in the whole job once per process and while some remain; otherwise only where
            # the new events join the stored ones (a full scan at every read made ingest O(n^2): 27 s per
            # 100k events at 300k, bench.scale).
            suspect = key not in self._whole or self._new_holes(cluster, job, new)
            added = self._add(cluster, job, new)
            if suspect and offset > 0 and self.gaps(cluster, job):
                # A line was lost between reads: re-read everything; (src, seq) uniqueness drops repeats.
                added += self._add(cluster, job, parse_events(text[:end].splitlines()))
            if not suspect or not self.gaps(cluster, job):
                self._whole.add(key)
            else:
                self._whole.discard(key)
            self._db.execute("INSERT OR REPLACE INTO cursors VALUES (?, ?, ?, ?)",
                             (cluster, job, end if restart else max(end, offset, self.cursor(cluster, job)[0]), int(final)))
        return added

    def _new_holes(self, cluster: str, job: str, evs: list[dict[str, Any]]) -> bool:
        """Whether these events, not yet stored, leave a hole after each source's stored ones (indexed lookups)."""
        by_src: dict[str, set[int]] = {}
        for ev in evs:
            by_src.setdefault(str(ev.get("src")), set()).add(int(ev.get("seq", 0)))
        for src, seqs in by_src.items():
            row = self._db.execute("SELECT MAX(seq) FROM events WHERE cluster=? AND job=? AND src=?",
                                   (cluster, job, src)).fetchone()
            have = int(row[0] or 0)
            fresh = sorted(x for x in seqs if x > have)
            if fresh and (fresh[0] != have + 1 or fresh[-1] - fresh[0] + 1 != len(fresh)):
                return True
        return False

    def _add(self, cluster: str, job: str, evs: Any) -> int:
        """Insert inside a `_write` transaction: the next index is read under the write lock."""
        row = self._db.execute("SELECT COALESCE(MAX(i), 0) FROM events WHERE cluster=? AND job=?",
                               (cluster, job)).fetchone()
        i = int(row[0])
        added = 0
        for ev in evs:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
                (cluster, job, i + 1, str(ev.get("src")), int(ev.get("seq", 0)), str(ev["type"]),
                 json.dumps(ev, separators=(",", ":"))),
            )
            if cur.rowcount:
                i += 1
                added += 1
        return added

    def add_events(self, cluster: str, job: str, evs: list[dict[str, Any]]) -> int:
        self._whole.discard((cluster, job))  # they may leave a hole: the next ingest looks at the whole job
        with self._write():
            return self._add(cluster, job, evs)

    def events(self, cluster: str, job: str, since: int = 0, types: tuple[str, ...] | None = None,
               limit: int | None = None) -> list[dict[str, Any]]:
        q = "SELECT i, body FROM events WHERE cluster=? AND job=? AND i>?"
        args: list[Any] = [cluster, job, since]
        if types:
            q += f" AND type IN ({','.join('?' * len(types))})"
            args.extend(types)
        q += " ORDER BY i"
        if limit:
            q += " LIMIT ?"
            args.append(limit)
        out = []
        for i, body in self._db.execute(q, args):
            ev = json.loads(body)
            ev["i"] = i
            out.append(ev)
        return out

    def gaps(self, cluster: str, job: str) -> dict[str, list[int]]:
        """Missing sequence numbers per source (each source counts from 1 without holes)."""
        out: dict[str, list[int]] = {}
        rows = self._db.execute(
            "SELECT src, COUNT(*), MAX(seq) FROM events WHERE cluster=? AND job=? GROUP BY src", (cluster, job)
        ).fetchall()
        for src, n, mx in rows:
            if n != mx:
                have = {s for (s,) in self._db.execute(
                    "SELECT seq FROM events WHERE cluster=? AND job=? AND src=?", (cluster, job, src))}
                out[src] = [s for s in range(1, mx + 1) if s not in have][:100]
        return out

    def forget(self, cluster: str, job: str) -> None:
        self._whole.discard((cluster, job))
        with self._write():
            self._db.execute("DELETE FROM events WHERE cluster=? AND job=?", (cluster, job))
            self._db.execute("DELETE FROM cursors WHERE cluster=? AND job=?", (cluster, job))
