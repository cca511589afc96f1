"""One upstream follow of a job's log for every live tail of that job in this server.

Each open tail (the sidebar's log, a widget, a second browser tab, a teammate's view on a shared server) used to
open its own follow: a Ray log stream read every 0.05 s by the head's log agent, and a status poll a second.
Fifty tails of one job were fifty streams and fifty polls. Now the first tail of a job starts the follow
(log_stream.follow_job_log) and later ones join it: each reader gets the log from its first byte, replayed from
what the follow has read so far, then live. The buffer is the job's log as read so far; past MAX_REPLAY_BYTES the
follow stops taking new readers (a later tail starts a follow of its own) and drops what every reader has sent.
The follow ends with the job (its readers then end too), or when its last reader leaves; an ended follow takes
no new reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

MAX_REPLAY_BYTES = 32 * 1024 * 1024  # a log longer than this is not replayed to a tail that joins late


class SharedFollow:
    """One upstream follow (an async iterator of text) and its readers."""

    def __init__(self, source: AsyncIterator[str], on_idle: Callable[[SharedFollow], None]) -> None:
        self._chunks: list[str] = []
        self._base = 0  # the index, in the whole follow, of _chunks[0]
        self._size = 0
        self.done = False
        self._error: BaseException | None = None
        self._positions: dict[int, int] = {}  # reader id -> the next index it reads
        self._pending = 0  # readers handed out (`read`) that have not started reading yet
        self._cond = asyncio.Condition()
        self._on_idle = on_idle
        self._task = asyncio.ensure_future(self._pump(source))

    @property
    def open_to_new_readers(self) -> bool:
        """Only a live follow with the whole log so far: an ended one may be a job of the same name that was
        deleted (a new tail then reads Ray's log afresh)."""
        return not self.done and self._base == 0 and self._size <= MAX_REPLAY_BYTES

    async def _pump(self, source: AsyncIterator[str]) -> None:
        try:
            async for text in source:
                async with self._cond:
                    self._chunks.append(text)
                    self._size += len(text)
                    self._cond.notify_all()
        except Exception as e:  # noqa: BLE001 - each reader raises it
            self._error = e
        finally:
            self.done = True
            async with self._cond:
                self._cond.notify_all()

    def read(self) -> AsyncIterator[str]:
        """The log from its first byte, then live, until the follow ends (its error is raised here). Counted at
        once: the last reader leaving before this one starts must not stop the follow under it."""
        self._pending += 1
        return self._read()

    async def _read(self) -> AsyncIterator[str]:
        me = object()
        key = id(me)
        self._pending -= 1
        self._positions[key] = self._base
        try:
            while True:
                async with self._cond:
                    await self._cond.wait_for(lambda: self._positions[key] - self._base < len(self._chunks)
                                              or self.done)
                    i = self._positions[key] - self._base
                    ready = self._chunks[i:]
                if not ready:  # done, and all sent
                    if self._error is not None:
                        raise self._error
                    return
                for text in ready:
                    self._positions[key] += 1
                    yield text
                self._trim()
        finally:
            del self._positions[key]
            if not self._positions and not self._pending:
                if not self.done:
                    self._task.cancel()
                self._on_idle(self)

    def _trim(self) -> None:
        """Past the replay limit, drop what every reader has sent."""
        if self._size <= MAX_REPLAY_BYTES or not self._positions:
            return
        drop = min(self._positions.values()) - self._base
        if drop > 0:
            self._size -= sum(len(t) for t in self._chunks[:drop])
            del self._chunks[:drop]
            self._base += drop


_follows: dict[tuple[Any, ...], SharedFollow] = {}


def shared_follow(key: tuple[Any, ...], start: Callable[[], AsyncIterator[str]]) -> AsyncIterator[str]:
    """A reader of the follow under `key` (on this event loop), starting one with `start()` when none can take
    a new reader."""
    full = (id(asyncio.get_running_loop()), *key)
    follow = _follows.get(full)
    if follow is None or not follow.open_to_new_readers:
        def idle(f: SharedFollow) -> None:
            if _follows.get(full) is f:
                del _follows[full]

        follow = _follows[full] = SharedFollow(start(), idle)
    return follow.read()
