"""What the browser reaches on a cluster through the server: the dashboard (for "Open Ray Dashboard" behind
JupyterHub) and the live log tail (a websocket fed by service/log_stream.py). Configured clusters only; the Ray token
is added here and never reaches the browser.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any
from urllib.parse import unquote

import aiohttp
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado import httpclient, web, websocket

from ..errors import BadRequest, CleverThisError, ClusterNotFound
from ..service.log_fanout import shared_follow
from ..service.log_stream import follow_job_log, job_record
from .handlers import RESOURCE, BaseHandler, api

log = logging.getLogger(__name__)
_BAD_PATH = re.compile(r"(^|/)\.\.(/|$)|\\|^/|://|%2f|%5c|%2e%2e", re.IGNORECASE)
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-encoding", "content-length",
                "set-cookie", "server"}


def configured_cluster(handler: BaseHandler | LogTailHandler, cluster: str) -> Any:
    """A cluster known by name; raw addresses are refused here so the proxy cannot be pointed elsewhere."""
    cfgs = handler.settings["cleverthis_service"].registry.configs()
    if cluster not in cfgs:
        raise ClusterNotFound(f"unknown cluster '{cluster}'", details={"field": "cluster"})
    return cfgs[cluster]


class DashboardProxyHandler(BaseHandler):
    @api
    async def get(self, cluster: str, path: str) -> None:
        raw_path = self.request.path.split(f"/cleverthis/proxy/{cluster}/", 1)[-1]
        if _BAD_PATH.search(raw_path) or _BAD_PATH.search(unquote(path)):
            raise BadRequest("path not allowed through the dashboard proxy", details={"field": "path"})
        cfg = configured_cluster(self, cluster)
        url = f"{cfg.address}/{path}"
        if self.request.query:
            url += f"?{self.request.query}"
        req = httpclient.HTTPRequest(url, headers=cfg.headers(), request_timeout=30, follow_redirects=False)
        try:
            resp = await httpclient.AsyncHTTPClient().fetch(req, raise_error=False)
        except OSError as e:
            raise CleverThisError(f"cluster '{cluster}' is not reachable: {e}") from e
        self.set_status(resp.code if resp.code != 599 else 502)
        for k, v in resp.headers.get_all():
            if k.lower() not in _HOP_HEADERS and k.lower() != "location":
                self.set_header(k, v)
        self.finish(resp.body or b"")


class LogTailHandler(WebSocketMixin, websocket.WebSocketHandler, JupyterHandler):  # type: ignore[misc]
    """The job's log, live, as plain-text frames (service/log_stream.py: Ray's state API stream, else its tail);
    the socket closes when the job is over and its log has been sent."""

    auth_resource = RESOURCE

    @authorized
    async def get(self, *args: Any, **kwargs: Any) -> None:
        if self.current_user is None:
            raise web.HTTPError(403)
        cluster, name = args
        try:
            self._cfg = configured_cluster(self, cluster)
        except CleverThisError as e:
            raise web.HTTPError(e.status, e.message) from e
        try:
            self._info = await job_record(self._cfg, name)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:  # ValueError: a body that is not JSON
            raise web.HTTPError(502, f"cannot follow the log of '{name}': cluster '{cluster}' did not answer") from e
        if self._info is None:
            raise web.HTTPError(404, f"no job named '{name}' on cluster '{cluster}'")
        self._name = name
        await super().get(*args, **kwargs)

    def open(self, *args: Any, **kwargs: Any) -> None:
        super().open(*args, **kwargs)
        self._relay_task = asyncio.ensure_future(self._relay())

    async def _relay(self) -> None:
        try:
            # every tail of this job in this server reads one upstream follow (service/log_fanout.py)
            cfg, name, info = self._cfg, self._name, self._info
            async for text in shared_follow((cfg.address, name), lambda: follow_job_log(cfg, name, info)):
                await self.write_message(text)
        except (websocket.WebSocketClosedError, asyncio.CancelledError):
            pass
        except Exception as e:  # noqa: BLE001 - the socket closes; the detail's refresh still shows the log
            log.warning("log of %s: %s", self._name, e)
        finally:
            self.close()

    def on_message(self, message: str | bytes) -> None:  # the tail is one-way
        return None

    def on_close(self) -> None:
        task = getattr(self, "_relay_task", None)
        if task is not None:
            task.cancel()
