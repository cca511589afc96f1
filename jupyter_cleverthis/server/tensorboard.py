"""'Open in TensorBoard': the REST call that starts (or finds) the TensorBoard of a job's checkpoint folder, and the
authenticated proxy in front of it (service/tensorboard.py runs them on loopback)."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from tornado import httpclient, web

from ..errors import BadRequest
from ..service.models import TensorBoardLink
from ..service.tensorboard import TensorBoards
from .handlers import RESOURCE, BaseHandler, api

# What TensorBoard's answers keep: never its cookies or connection headers.
_KEEP = {"content-type", "cache-control", "etag", "last-modified", "expires", "x-content-type-options"}


def boards(handler: Any) -> TensorBoards:
    return handler.settings["cleverthis_tensorboards"]


class TensorBoardHandler(BaseHandler):
    """GET .../jobs/{name}/tensorboard: {url, log_dir, run} of the TensorBoard showing the job's checkpoint folder."""

    @api
    async def get(self, cluster: str, name: str) -> None:
        detail = await self.run(self.service.get, cluster, name)
        tb = detail.tracking.tensorboard if detail.tracking is not None else None
        log_dir = tb.log_dir if tb is not None else None
        if not log_dir:
            raise BadRequest(f"job '{name}' wrote no TensorBoard records (its report_to has no tensorboard, or it "
                             "has not started training yet)", details={"field": "report_to"})
        board = await self.run(boards(self).open, log_dir)
        self.reply_model(TensorBoardLink(url=boards(self).path_prefix(board.key) + "/", log_dir=board.log_dir, run=name))


class TensorBoardProxyHandler(JupyterHandler):
    """<base_url>cleverthis/tensorboard/<key>/...: the TensorBoard of one checkpoint folder, for a logged-in user
    allowed to read jobs. Its POSTs are reads (TensorBoard's data queries), authorized as such; they carry no
    XSRF token (TensorBoard's own page sends them) and change nothing."""

    auth_resource = RESOURCE
    reads = frozenset({"GET", "POST"})  # the methods that only read (tests/integration/test_authorization.py)

    def check_xsrf_cookie(self) -> None:  # read-only queries (see the class docstring)
        return None

    @web.authenticated
    @authorized("read", resource=RESOURCE)
    async def get(self, key: str, path: str) -> None:
        await self._relay(key)

    @web.authenticated
    @authorized("read", resource=RESOURCE)
    async def post(self, key: str, path: str) -> None:
        await self._relay(key)

    async def _relay(self, key: str) -> None:
        board = boards(self).target(key)
        if board is None:
            raise web.HTTPError(404, "no TensorBoard runs under this address: open it again from the job")
        headers = {k: v for k, v in self.request.headers.get_all()
                   if k.lower() in ("content-type", "accept", "if-none-match", "if-modified-since")}
        req = httpclient.HTTPRequest(f"http://127.0.0.1:{board.port}{self.request.uri}", method=self.request.method,
                                     headers=headers, body=self.request.body if self.request.method == "POST" else None,
                                     request_timeout=60, follow_redirects=False, decompress_response=True)
        resp = await httpclient.AsyncHTTPClient().fetch(req, raise_error=False)
        if resp.code == 599:
            raise web.HTTPError(502, "TensorBoard did not answer")
        self.set_status(resp.code)
        for k, v in resp.headers.get_all():
            if k.lower() in _KEEP:
                self.set_header(k, v)
        if resp.code == 304:
            self.finish()
        else:
            self.finish(resp.body or b"")
