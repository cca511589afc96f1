"""Live tails of one job share one upstream follow (service/log_fanout.py); the real server with 50 tails of a real
job is tests/integration/test_hardening.py::test_50_websocket_tails_for_60s_drop_no_event."""

from __future__ import annotations

import asyncio

import pytest

from jupyter_cleverthis.service import log_fanout


class Source:
    """An upstream follow that sends the chunks put in its queue (None ends it; an exception is raised)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()
        self.starts = 0
        self.closed = 0

    def start(self):
        self.starts += 1

        async def gen():
            try:
                while (item := await self.queue.get()) is not None:
                    if isinstance(item, BaseException):
                        raise item
                    yield item
            finally:
                self.closed += 1

        return gen()


async def _collect(it, out: list[str]) -> None:
    async for text in it:
        out.append(text)


def test_a_late_tail_gets_the_whole_log_from_the_one_follow():
    async def main():
        src = Source()
        first, late = [], []
        a = asyncio.ensure_future(_collect(log_fanout.shared_follow(("c", "job"), src.start), first))
        for t in ("one\n", "two\n"):
            src.queue.put_nowait(t)
        await asyncio.sleep(0.05)
        b = asyncio.ensure_future(_collect(log_fanout.shared_follow(("c", "job"), src.start), late))
        src.queue.put_nowait("three\n")
        src.queue.put_nowait(None)
        await asyncio.wait_for(asyncio.gather(a, b), 5)
        assert first == late == ["one\n", "two\n", "three\n"]
        assert src.starts == 1
        assert not log_fanout._follows  # ended, and its readers too

    asyncio.run(main())


def test_the_last_tail_leaving_stops_the_follow_and_another_job_has_its_own():
    async def main():
        src, other = Source(), Source()
        got: list[str] = []
        a = asyncio.ensure_future(_collect(log_fanout.shared_follow(("c", "job"), src.start), got))
        b = asyncio.ensure_future(_collect(log_fanout.shared_follow(("c", "job"), src.start), []))
        c = asyncio.ensure_future(_collect(log_fanout.shared_follow(("c", "job-2"), other.start), []))
        src.queue.put_nowait("x\n")
        await asyncio.sleep(0.05)
        a.cancel()
        await asyncio.sleep(0.05)
        assert src.closed == 0 and got == ["x\n"]  # one tail is still open
        b.cancel()
        await asyncio.sleep(0.05)
        assert src.closed == 1 and (src.starts, other.starts) == (1, 1)
        assert list(log_fanout._follows) == [(id(asyncio.get_running_loop()), "c", "job-2")]
        c.cancel()
        await asyncio.sleep(0.05)
        assert not log_fanout._follows

    asyncio.run(main())


def test_an_upstream_error_reaches_every_tail():
    async def main():
        src = Source()
        outs = [[], []]
        tasks = [asyncio.ensure_future(_collect(log_fanout.shared_follow(("c", "j"), src.start), o)) for o in outs]
        src.queue.put_nowait("a\n")
        src.queue.put_nowait(RuntimeError("the head went away"))
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        assert [str(r) for r in results] == ["the head went away"] * 2 and outs == [["a\n"], ["a\n"]]

    asyncio.run(main())


def test_past_the_replay_limit_sent_text_is_dropped_and_a_late_tail_starts_its_own(monkeypatch):
    monkeypatch.setattr(log_fanout, "MAX_REPLAY_BYTES", 10)

    async def main():
        src = Source()
        first, late = [], []
        a = asyncio.ensure_future(_collect(log_fanout.shared_follow(("c", "job"), src.start), first))
        for t in ("0123456789\n", "abc\n"):
            src.queue.put_nowait(t)
        await asyncio.sleep(0.05)
        follow = next(iter(log_fanout._follows.values()))
        assert follow._chunks == [] and follow._base == 2  # all sent to the one reader: nothing kept
        b = asyncio.ensure_future(_collect(log_fanout.shared_follow(("c", "job"), src.start), late))
        await asyncio.sleep(0.05)
        assert src.starts == 2  # the late tail could not be replayed the start: a follow of its own
        src.queue.put_nowait("end\n")  # (the two follows read one queue here: one of them gets it)
        src.queue.put_nowait(None)
        src.queue.put_nowait(None)
        await asyncio.wait_for(asyncio.gather(a, b), 5)
        assert first[:2] == ["0123456789\n", "abc\n"]

    asyncio.run(main())


@pytest.fixture(autouse=True)
def _empty_registry():
    log_fanout._follows.clear()
    yield
    log_fanout._follows.clear()


def test_a_tail_handed_out_as_the_last_one_leaves_keeps_the_follow():
    """The proxy gets its reader, then starts reading: the last other tail leaving in between must not stop the
    follow under it (it would end at once with part of the log)."""

    async def main():
        src = Source()
        first, second = [], []
        a = asyncio.ensure_future(_collect(log_fanout.shared_follow(("c", "job"), src.start), first))
        src.queue.put_nowait("one\n")
        await asyncio.sleep(0.05)
        handed = log_fanout.shared_follow(("c", "job"), src.start)  # not reading yet
        a.cancel()
        await asyncio.sleep(0.05)
        assert src.closed == 0 and src.starts == 1
        b = asyncio.ensure_future(_collect(handed, second))
        src.queue.put_nowait("two\n")
        src.queue.put_nowait(None)
        await asyncio.wait_for(b, 5)
        assert second == ["one\n", "two\n"] and first == ["one\n"]
        assert not log_fanout._follows

    asyncio.run(main())


def test_an_ended_follow_takes_no_new_tail():
    """A tail opened after the follow ended (a finished job, or a new job of a deleted one's name) reads Ray's log
    afresh, not the ended follow's."""

    async def main():
        src = Source()
        first, late = [], []
        gate = asyncio.Event()

        async def slow(it, out):  # a reader still sending the end of the log when the next tail opens
            async for text in it:
                out.append(text)
                await gate.wait()

        a = asyncio.ensure_future(slow(log_fanout.shared_follow(("c", "job"), src.start), first))
        src.queue.put_nowait("old\n")
        src.queue.put_nowait(None)
        await asyncio.sleep(0.05)
        b = asyncio.ensure_future(_collect(log_fanout.shared_follow(("c", "job"), src.start), late))
        src.queue.put_nowait("new\n")
        src.queue.put_nowait(None)
        gate.set()
        await asyncio.wait_for(asyncio.gather(a, b), 5)
        assert src.starts == 2 and first == ["old\n"] and late == ["new\n"]

    asyncio.run(main())
