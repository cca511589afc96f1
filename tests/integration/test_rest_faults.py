"""What a real Ray cannot be made to do on demand: a cluster that is down, answers 500s, or is slow.

A small fake Ray dashboard on loopback plays those parts; everything else is tested on the real cluster.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from tornado.httpclient import HTTPClientError

pytestmark = pytest.mark.integration
VERSION = {"version": "4", "ray_version": "2.60.0", "ray_commit": "x", "session_name": "fake"}


class _FakeRay(BaseHTTPRequestHandler):
    slow = 0.0

    def log_message(self, *a):  # keep test output quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        if self.path.startswith("/api/version"):
            return self._send(200, VERSION)
        time.sleep(self.slow)
        self._send(500, {"error": "Traceback (most recent call last): boom secret-internals"})

    do_POST = do_GET  # noqa: N815


@pytest.fixture(scope="module")
def fake_ray():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeRay)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def jp_server_config(fake_ray):
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_cleverthis": True}},
        "CleverThisApp": {"clusters": {"fake": {"address": fake_ray}, "down": {"address": "http://127.0.0.1:9"}}},
    }


async def _err(jp_fetch, *parts, **kw):
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch(*parts, **kw)
    body = json.loads(e.value.response.body)
    assert set(body) == {"code", "message", "details"}
    assert "Traceback" not in body["message"] and "secret-internals" not in json.dumps(body)
    return e.value.code, body


async def test_cluster_answering_500_is_a_clean_502(jp_fetch):
    code, body = await _err(jp_fetch, "cleverthis", "api", "clusters", "fake", "jobs")
    assert code == 502 and body["code"] == "ray_error" and "fake" in body["message"]
    code, body = await _err(jp_fetch, "cleverthis", "api", "clusters", "fake", "jobs", "j1")
    assert code == 502


async def test_cluster_down_is_a_clear_409(jp_fetch):
    code, body = await _err(jp_fetch, "cleverthis", "api", "clusters", "down", "jobs")
    assert code == 409 and body["code"] == "cluster_not_running" and "not running" in body["message"]
    code, body = await _err(jp_fetch, "cleverthis", "api", "clusters", "down", "jobs", method="POST",
                            body=json.dumps({"name": "x"}))
    assert code == 409
    clusters = json.loads((await jp_fetch("cleverthis", "api", "clusters")).body)["clusters"]
    assert {c["name"]: c["status"] for c in clusters}["down"] == "unreachable"


async def test_slow_cluster_does_not_block_the_server(jp_fetch):
    import asyncio

    # Order, not a clock: the schema call must be answered while the cluster call is still waiting on Ray.
    # A blocked IOLoop would answer nothing until the 6 s Ray call ended, and the slow call would finish first.
    _FakeRay.slow = 6.0
    try:
        slow = asyncio.ensure_future(jp_fetch("cleverthis", "api", "clusters", "fake", "jobs", raise_error=False))
        await asyncio.sleep(0.5)
        fast = await jp_fetch("cleverthis", "api", "schema")
        assert fast.code == 200
        assert not slow.done(), "the schema call waited for the slow cluster call: the server's loop was blocked"
        assert (await slow).code == 502
    finally:
        _FakeRay.slow = 0.0
