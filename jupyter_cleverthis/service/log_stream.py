"""A job's log as it is written, by the fastest path the cluster offers (docs/jupyterlab.md, the job tab's live log).

Ray's own job tail (`/api/jobs/{id}/logs/tail`) sleeps a second between reads, so its lines arrive 1-2 s after
they are printed. Ray's state API streams the same driver log file through the head's log agent with a poll
interval of our choosing (`/api/v0/logs/stream?submission_id=…&node_id=…&interval=…`, what
`ray.util.state.get_log(follow=True)` uses); lines then arrive within about that interval. That stream never
ends by itself, so the job's status is watched beside it, and the follow ends once the job is over and the
stream has gone quiet. Where the stream cannot be had (a Ray without it, a job whose driver never started)
the follow falls back to Ray's job tail, or to the finished job's whole log.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import aiohttp
from tornado import httpclient, websocket

from .ray_client import TERMINAL_RAY_STATUSES

if TYPE_CHECKING:
    from .clusters import ClusterConfig

log = logging.getLogger(__name__)

STREAM_API = "/api/v0/logs/stream"  # Ray's state API: a log file followed through the node's log agent
STREAM_INTERVAL_S = 0.05  # the log agent's read interval (bench P5: p95 ~0.1 s end to end)
STATUS_POLL_S = 1.0  # how often the job's status is asked while following
QUIET_S = 0.5  # after the job is over, the stream is read until it has been quiet this long


class StreamUnavailable(Exception):
    """The state API's log stream cannot serve this job (the caller falls back to Ray's tail)."""


async def job_record(cfg: ClusterConfig, name: str) -> dict[str, Any] | None:
    """Ray's record of job `name` (the JSON of `GET /api/jobs/{id}`), None when there is none; raises
    aiohttp's errors when Ray does not answer."""
    async with aiohttp.ClientSession(headers=cfg.headers()) as session:
        return await _get_json(session, f"{cfg.address}/api/jobs/{quote(name, safe='')}")


async def follow_job_log(cfg: ClusterConfig, name: str, info: dict[str, Any] | None = None) -> AsyncIterator[str]:
    """The job's log from its first byte, as text, until the job is over; the fast stream where it can be had.
    `info` is the job's record when the caller has just read it."""
    try:
        async with aiohttp.ClientSession(headers=cfg.headers(), timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=10, sock_read=None)) as session:
            async for text in _follow_stream(session, cfg.address, name, info):
                yield text
        return
    except StreamUnavailable as e:
        log.info("log of %s: Ray's state API stream unavailable (%s); following Ray's job tail", name, e)
    async for text in _follow_ray_tail(cfg, name):
        yield text


def iter_job_log(cfg: ClusterConfig, name: str) -> Iterator[str]:
    """`follow_job_log` for a synchronous caller (the CLI; `%train logs --follow` in a kernel, whose own event
    loop is already running): the follow runs on an event loop of its own in a thread."""
    items: queue.Queue[str | BaseException | None] = queue.Queue()

    async def pump() -> None:
        try:
            async for text in follow_job_log(cfg, name):
                items.put(text)
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            items.put(e)
        finally:
            items.put(None)

    threading.Thread(target=asyncio.run, args=(pump(),), name="cleverthis-log-follow", daemon=True).start()
    while (item := items.get()) is not None:
        if isinstance(item, BaseException):
            raise item
        yield item


async def _get_json(session: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as r:
        if r.status == 404:
            return None
        r.raise_for_status()
        body: dict[str, Any] = await r.json(content_type=None)
        return body


async def _follow_stream(session: aiohttp.ClientSession, address: str, name: str,
                         info: dict[str, Any] | None) -> AsyncIterator[str]:
    job_url = f"{address}/api/jobs/{quote(name, safe='')}"
    info = info or await _get_json(session, job_url)
    if info is None:
        raise StreamUnavailable("no such job")
    while not info.get("driver_node_id") and info.get("status") not in TERMINAL_RAY_STATUSES:
        await asyncio.sleep(STATUS_POLL_S)  # pending: the driver's node is not known yet
        info = await _get_json(session, job_url) or info
    if info.get("status") in TERMINAL_RAY_STATUSES:  # over already: the log is complete
        yield str((await _get_json(session, f"{job_url}/logs") or {}).get("logs") or "")
        return
    query = urlencode({"submission_id": info.get("submission_id") or name, "node_id": info["driver_node_id"],
                       "interval": STREAM_INTERVAL_S, "lines": -1})
    async with session.get(f"{address}{STREAM_API}?{query}") as stream:
        if stream.status != 200:
            raise StreamUnavailable(f"the dashboard answered {stream.status}")
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for chunk in stream.content.iter_any():
                    chunks.put_nowait(chunk)
            except aiohttp.ClientError as e:
                log.info("log stream of %s broke off: %s", name, e)
            finally:
                chunks.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            now = time.monotonic()
            last_data, next_poll, over_at = now, now + STATUS_POLL_S, None
            while True:
                try:
                    chunk = await asyncio.wait_for(chunks.get(), timeout=STATUS_POLL_S / 2)
                except asyncio.TimeoutError:
                    chunk = b""
                if chunk is None:  # the stream ended (the head went away)
                    break
                now = time.monotonic()
                if chunk:
                    last_data = now
                    text = decoder.decode(chunk)
                    if text:
                        yield text
                if now >= next_poll:
                    next_poll = now + STATUS_POLL_S
                    status = (await _get_json(session, job_url) or {}).get("status")
                    if over_at is None and status in TERMINAL_RAY_STATUSES:
                        over_at = now
                # the stream never ends by itself: once the job is over, what it wrote last has arrived when
                # the stream has been quiet for a while (the agent reads every STREAM_INTERVAL_S)
                if over_at is not None and now - last_data >= QUIET_S and now - over_at >= QUIET_S:
                    break
            rest = decoder.decode(b"", final=True)
            if rest:
                yield rest
        finally:
            reader.cancel()


async def _follow_ray_tail(cfg: ClusterConfig, name: str) -> AsyncIterator[str]:
    """Ray's own tail websocket (plain-text frames, ends when the job does)."""
    url = cfg.address.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
    conn = await websocket.websocket_connect(
        httpclient.HTTPRequest(f"{url}/api/jobs/{quote(name, safe='')}/logs/tail", headers=cfg.headers()))
    try:
        while True:
            msg = await conn.read_message()
            if msg is None:
                return
            yield msg if isinstance(msg, str) else msg.decode(errors="replace")
    finally:
        conn.close()
