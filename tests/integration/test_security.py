"""A Ray token goes only where it was configured to go: a real jupyter_server, and a listener on loopback that
records every request it gets. No URL trick makes the server contact it, let alone send it an Authorization header."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from jupyter_cleverthis.service.clusters import ClusterRegistry

SECRET = "environment-default-ray-token-0123456789"


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, dict[str, str]]] = []

    def _any(self) -> None:
        self.seen.append((self.command, self.path, dict(self.headers)))
        body = json.dumps({"ray_version": "2.60.0", "data": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _any

    def log_message(self, *args: object) -> None:
        pass


class _V6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


@pytest.fixture
def listeners():
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)]
    try:
        servers.append(_V6Server(("::1", 0), _Recorder))
    except OSError:  # no IPv6 loopback here
        pass
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    _Recorder.seen = []
    yield [s.server_address[1] for s in servers]
    for s in servers:
        s.shutdown()
        s.server_close()


def _tricks(port4: int, port6: int | None) -> list[str]:
    raw = [f"http://127.0.0.1:{port4}", f"HTTP://127.0.0.1:{port4}", f"hTtP://127.0.0.1:{port4}/",
           f"http://local@127.0.0.1:{port4}", f"http://local:x@127.0.0.1:{port4}", f"https://127.0.0.1:{port4}",
           f"//127.0.0.1:{port4}", f"http://localhost:{port4}", f"http://2130706433:{port4}",
           f"http://0x7f.0.0.1:{port4}"]
    if port6:
        raw += [f"http://[::1]:{port6}", f"http://[0:0:0:0:0:0:0:1]:{port6}", f"http://local@[::1]:{port6}"]
    out = []
    for r in raw:
        once = quote(r, safe="")
        out += [once, quote(once, safe=""), once.lower().replace("%3a", "%3A"), r.replace("/", "%2F"),
                r.replace("/", "%2f").replace(":", "%3a")]
    return out


async def test_no_request_reaches_an_unconfigured_address(jp_fetch, jp_serverapp, jp_http_port, jp_base_url,
                                                          listeners, monkeypatch, tmp_path):
    monkeypatch.setenv("RAY_AUTH_TOKEN", SECRET)  # the environment's default token, read at request time
    token_file = tmp_path / "ray_token"
    token_file.write_text(SECRET)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token_file))
    port4, port6 = listeners[0], (listeners[1] if len(listeners) > 1 else None)
    token = jp_serverapp.identity_provider.token
    client = AsyncHTTPClient()
    base = f"http://127.0.0.1:{jp_http_port}{jp_base_url}"
    routes = [("GET", "cleverthis/api/clusters/{c}/jobs"), ("POST", "cleverthis/api/clusters/{c}/jobs"),
              ("GET", "cleverthis/api/clusters/{c}/jobs/j"), ("POST", "cleverthis/api/clusters/{c}/jobs/j/cancel"),
              ("POST", "cleverthis/api/clusters/{c}/jobs/j/resume"), ("GET", "cleverthis/api/clusters/{c}/jobs/j/logs"),
              ("GET", "cleverthis/api/clusters/{c}/jobs/j/events"), ("GET", "cleverthis/api/clusters/{c}/jobs/j/metrics"),
              ("POST", "cleverthis/api/clusters/{c}/plan"), ("POST", "cleverthis/api/clusters/{c}/down"),
              ("DELETE", "cleverthis/api/clusters/{c}/jobs/j"), ("GET", "cleverthis/proxy/{c}/api/version"),
              ("GET", "cleverthis/api/clusters/{c}/jobs/j/logs/tail")]
    body = json.dumps({"name": "probe", "base_model": "/m", "dataset_path": "/d"})
    tried = 0
    for cluster in _tricks(port4, port6):
        for method, route in routes:
            url = base + route.format(c=cluster)
            r = await client.fetch(HTTPRequest(url, method=method, headers={"Authorization": f"token {token}"},
                                               body=body if method in ("POST", "PUT") else None,
                                               follow_redirects=False), raise_error=False)
            assert r.code >= 300, (method, url, r.code, r.body[:200])
            assert SECRET.encode() not in (r.body or b"")
            tried += 1
    assert tried >= 13 * 50
    leaked = [(m, p) for m, p, h in _Recorder.seen if any(k.lower() == "authorization" for k in h)]
    assert leaked == [], leaked
    assert _Recorder.seen == [], _Recorder.seen[:5]  # not even contacted


def test_the_default_token_goes_to_configured_clusters_only(monkeypatch, tmp_path):
    monkeypatch.setenv("RAY_AUTH_TOKEN", SECRET)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "prod.token").write_text("prod-token")
    (tmp_path / "clusters.json").write_text(json.dumps({
        "prod": {"address": "http://prod-head:8265", "token_file": str(tmp_path / "prod.token")},
        "team": {"address": "http://team-head:8265"},
    }))
    monkeypatch.setenv("RAY_ADDRESS", "http://env-head:8265")
    cli = ClusterRegistry(tmp_path)  # the user's own process: raw addresses allowed
    assert cli.get("prod").headers() == {"Authorization": "Bearer prod-token"}
    assert cli.get("http://prod-head:8265/").headers() == {"Authorization": "Bearer prod-token"}  # its own token
    assert cli.get("team").headers() == {"Authorization": f"Bearer {SECRET}"}  # configured: the default applies
    assert cli.get("ray-address").headers() == {"Authorization": f"Bearer {SECRET}"}
    assert cli.get("http://elsewhere:8265").headers() == {}  # nobody configured it: no token at all
    assert cli.local().config().headers() == {}  # the managed cluster has its own token file (none yet)
    server = ClusterRegistry(tmp_path, allow_addresses=False)
    for raw in ("http://elsewhere:8265", "http://prod-head:8265"):
        with pytest.raises(Exception, match="unknown cluster"):
            server.get(raw)
    assert server.get("prod").address == "http://prod-head:8265"


def test_ray_sdk_adds_no_default_token_to_an_address_without_one(listeners, monkeypatch, tmp_path):
    """Ray's own JobSubmissionClient attaches the environment's token (RAY_AUTH_TOKEN...) to any address when token
    auth is on; the service's clients never let it (CLI path: a raw address is allowed, its token is not)."""
    from jupyter_cleverthis.service.jobs import JobService

    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", SECRET)
    svc = JobService(ClusterRegistry(tmp_path))
    try:
        svc.client(f"http://127.0.0.1:{listeners[0]}").get_job_info("x")
    except Exception:  # the recorder's answer is not a job: only what it received matters
        pass
    assert _Recorder.seen, "the client never contacted the listener"
    assert not [h for _, _, h in _Recorder.seen if any(k.lower() == "authorization" for k in h)], _Recorder.seen
