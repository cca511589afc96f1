"""Thin REST handlers over the job service. Errors are mapped once, here, to {code, message, details}.

Routes (all under <base_url>cleverthis/api, all authenticated; see docs/openapi.yaml):
  GET  /schema                                   JSON Schemas of the job spec and training config
  GET  /clusters                                 clusters with status and resources
  GET  /clusters/{cluster}/nodes                 alive nodes: free and total resources, what each job holds
  GET  /clusters/{cluster}/compare?jobs=a,b      where the jobs' specs differ, key by key
  POST /clusters/{cluster}/download              {model, revision}: pre-fetch a Hub model on every node
  GET  /templates                                saved specs;  PUT|DELETE /templates/{name}: save / remove one
  POST /clusters/{cluster}/up | /down            start / stop the managed local cluster
  POST /clusters/{cluster}/plan                  pre-flight plan for a spec, without submitting
  GET  /clusters/{cluster}/jobs                  job summaries (?status=&owner=&sort=&offset=&limit=)
  POST /clusters/{cluster}/jobs                  create a job (201); 422 with field errors
  GET  /clusters/{cluster}/jobs/{name}           job detail;  DELETE: forget a finished job
  POST /clusters/{cluster}/jobs/{name}/cancel    request cancellation
  POST /clusters/{cluster}/jobs/{name}/resume    a new job continuing from the latest checkpoint
  GET  /clusters/{cluster}/jobs/{name}/logs      the job's log text (?offset=&limit=)
  WS   /clusters/{cluster}/jobs/{name}/logs/tail live log lines
  GET  /clusters/{cluster}/jobs/{name}/events    structured events, ?since=<index>
  GET  /clusters/{cluster}/jobs/{name}/metrics   loss curves, downsampled (?max_points=&after_step=)
  GET  /clusters/{cluster}/jobs/{name}/tensorboard  {url} of the TensorBoard of the job's checkpoint folder
  GET  /clusters/{cluster}/jobs/{name}/spec      the job's submitted spec, also as YAML (clone, export)
  POST /clusters/{cluster}/jobs/{name}/export    {checkpoint, dtype}: a standalone merged fp16/bf16 folder (201)
Sweeps (GET .../sweep, .../sweep/best) and chat (POST .../chat, streamed): experiments.py.
Dashboard proxy: <base_url>cleverthis/proxy/{cluster}/{path} (configured clusters only).
TensorBoard proxy: <base_url>cleverthis/tensorboard/{key}/{path} (GET and POST, both reads).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from pydantic import BaseModel
from tornado import web

from ..errors import BadRequest, CleverThisError, Forbidden
from ..schemas import schema_bundle
from ..service.jobs import JobService, default_owner
from ..service.models import (
    ClusterInfo,
    ClusterList,
    ClusterState,
    Curves,
    DownloadResult,
    EventsPage,
    JobPage,
    LogsPage,
    NodeList,
    Preflight,
    SpecExport,
    Template,
    TemplateList,
)
from ..service.probes import cluster_resources
from ..spec import spec_yaml

log = logging.getLogger(__name__)
NAME = r"[^/]+"
# Jupyter's authorizer sees every request as (action, "cleverthis"): GET is "read"; POST and DELETE are "write".
RESOURCE = "cleverthis"


def api(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Authenticate, authorize (Jupyter's authorizer), run, and map the project's errors to JSON bodies
    (tracebacks stay in the server log)."""
    checked = authorized(resource=RESOURCE)(method)

    @web.authenticated
    @functools.wraps(method)
    async def wrapper(self: BaseHandler, *args: Any, **kwargs: Any) -> None:
        try:
            try:
                await checked(self, *args, **kwargs)
            except web.HTTPError as e:
                if e.status_code != 403:
                    raise
                action = "read" if self.request.method in ("GET", "HEAD") else "change"
                raise Forbidden(f"this server does not allow you to {action} training jobs or clusters") from e
        except CleverThisError as e:
            self.set_status(e.status)
            self.finish(json.dumps(e.as_dict()))
        except web.HTTPError:
            raise
        except Exception:
            log.exception("unhandled error in %s %s", self.request.method, self.request.path)
            self.set_status(500)
            self.finish(json.dumps({"code": "internal", "message": "internal server error (see the server log)",
                                    "details": {}}))

    return wrapper


class BaseHandler(APIHandler):
    auth_resource = RESOURCE

    @property
    def service(self) -> JobService:
        return self.settings["cleverthis_service"]

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Service calls block on HTTP to Ray: keep them off the server's event loop."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    def json_body(self) -> dict[str, Any]:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError as e:
            raise BadRequest(f"request body is not valid JSON: {e}") from e
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        return body

    def int_arg(self, name: str, default: int) -> int:
        if (raw := self.get_query_argument(name, None)) in (None, ""):
            return default
        try:
            value = int(raw)
        except ValueError as e:
            raise BadRequest(f"{name} must be a whole number (got '{raw[:40]}')", details={"field": name}) from e
        if value < 0:
            raise BadRequest(f"{name} must not be negative", details={"field": name})
        return value

    def spec_from_body(self, cluster: str) -> Any:
        body = self.json_body()
        if body.get("cluster", cluster) != cluster:
            raise BadRequest(f"body cluster '{body['cluster']}' differs from the URL's '{cluster}'",
                             details={"field": "cluster"})
        body["cluster"] = cluster
        return self.service.validate(body)

    def reply(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(data, default=str))

    def reply_model(self, body: BaseModel, status: int = 200) -> None:
        """Answer with a model of service/models.py, as the front-end's generated types describe it."""
        self.set_status(status)
        self.finish(body.model_dump_json())

    def owner(self) -> str:
        """The Jupyter identity (under JupyterHub: the hub user). A shared server token identifies nobody: Jupyter
        then makes up a random "Anonymous ..." user per request, and the owner is the server's own user instead."""
        user = self.current_user
        if _is_anonymous(user):
            return default_owner()
        return getattr(user, "username", None) or getattr(user, "name", None) or str(user)


class SchemaHandler(BaseHandler):
    @api
    async def get(self) -> None:
        self.reply({**schema_bundle(), "refresh_interval_s": self.settings.get("cleverthis_refresh_interval", 3.0)})


class TemplatesHandler(BaseHandler):
    @api
    async def get(self) -> None:
        self.reply_model(TemplateList.model_validate({"templates": await self.run(self.service.templates.list)}))


class TemplateHandler(BaseHandler):
    @api
    async def put(self, name: str) -> None:
        spec = self.json_body().get("spec")
        if not isinstance(spec, dict):
            raise BadRequest("the body needs the template's spec as an object: {\"spec\": {...}}",
                             details={"field": "spec"})
        self.reply_model(Template.model_validate(await self.run(self.service.templates.save, name, spec)))

    @api
    async def delete(self, name: str) -> None:
        await self.run(self.service.templates.delete, name)
        self.set_status(204)
        self.finish()


class ClustersHandler(BaseHandler):
    @api
    async def get(self) -> None:
        def collect() -> ClusterList:
            reg = self.service.registry
            rows = []
            for name, cfg in reg.configs().items():
                status = reg.status(name)
                rows.append(ClusterInfo.model_validate({
                    **cfg.public(), "status": status,
                    "resources": cluster_resources(cfg) if status == "running" else None}))
            root = getattr(self.contents_manager, "root_dir", None)  # (None for a contents manager of no folder)
            return ClusterList(clusters=rows, user=self.owner(), server_root=root and os.path.abspath(root))

        self.reply_model(await self.run(collect))


class ClusterActionHandler(BaseHandler):
    @api
    async def post(self, cluster: str, action: str) -> None:
        reg = self.service.registry
        cfg = reg.get(cluster)
        if not cfg.managed:
            raise BadRequest(f"cluster '{cluster}' is not managed by jupyter-cleverthis; start it where it runs")

        def act() -> None:
            # One start or stop at a time per cluster: two clicks (or two tabs) must not launch two heads.
            with _CLUSTER_ACTIONS.setdefault(cluster, threading.Lock()):
                if action == "up":
                    reg.local(cluster).up()
                else:
                    reg.local(cluster).down()

        await self.run(act)
        self.reply_model(ClusterState.model_validate({**reg.get(cluster).public(), "status": reg.status(cluster)}))


_CLUSTER_ACTIONS: dict[str, threading.Lock] = {}


class DownloadHandler(BaseHandler):
    @api
    async def post(self, cluster: str) -> None:
        """Pre-fetch a Hub model into every node's cache (model.download); answers when every node has answered
        (minutes for a large model: the front-ends show it as running)."""
        body = self.json_body()
        model, revision = body.get("model"), body.get("revision")
        if not isinstance(model, str) or not model.strip():
            raise BadRequest("model must be a Hugging Face model id (org/name)", details={"field": "model"})
        if revision is not None and not isinstance(revision, str):
            raise BadRequest("revision must be a branch, tag or commit", details={"field": "revision"})
        res = await self.run(self.service.download, cluster, model.strip(), revision=revision or None)
        self.reply_model(DownloadResult.model_validate(res))


class NodesHandler(BaseHandler):
    @api
    async def get(self, cluster: str) -> None:
        self.reply_model(NodeList.model_validate({"nodes": await self.run(self.service.nodes, cluster)}))


class JobsHandler(BaseHandler):
    @api
    async def get(self, cluster: str) -> None:
        jobs, total = await self.run(
            self.service.query, cluster,
            status=self.get_query_argument("status", None) or None,
            owner=self.get_query_argument("owner", None) or None,
            sort=self.get_query_argument("sort", "-created_at"),
            offset=self.int_arg("offset", 0), limit=self.int_arg("limit", 0) or None,
        )
        self.reply_model(JobPage(jobs=jobs, total=total))

    @api
    async def post(self, cluster: str) -> None:
        spec = self.spec_from_body(cluster)
        detail = await self.run(self.service.create, spec, owner=self.owner())
        self.reply_model(detail, status=201)


class PlanHandler(BaseHandler):
    @api
    async def post(self, cluster: str) -> None:
        spec = self.spec_from_body(cluster)
        self.reply_model(Preflight.model_validate(await self.run(self.service.preflight, spec)))


class JobHandler(BaseHandler):
    @api
    async def get(self, cluster: str, name: str) -> None:
        self.reply_model(await self.run(self.service.get, cluster, name))

    @api
    async def delete(self, cluster: str, name: str) -> None:
        await self.run(self.service.delete, cluster, name, user=self.owner())
        self.set_status(204)
        self.finish()


class CancelHandler(BaseHandler):
    @api
    async def post(self, cluster: str, name: str) -> None:
        self.reply_model(await self.run(self.service.cancel, cluster, name, user=self.owner()))


class ResumeHandler(BaseHandler):
    @api
    async def post(self, cluster: str, name: str) -> None:
        body = self.json_body()
        epochs = body.get("epochs")
        if epochs is not None and (not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1):
            raise BadRequest("epochs must be a whole number >= 1", details={"field": "epochs"})
        new_name, checkpoint = body.get("name"), body.get("checkpoint")
        for key, value in (("name", new_name), ("checkpoint", checkpoint)):
            if value is not None and not isinstance(value, str):
                raise BadRequest(f"{key} must be a string", details={"field": key})
        detail = await self.run(self.service.resume, cluster, name, epochs=epochs, new_name=new_name,
                                owner=self.owner(), checkpoint=checkpoint)
        self.reply_model(detail, status=201)


class ExportHandler(BaseHandler):
    @api
    async def post(self, cluster: str, name: str) -> None:
        body = self.json_body()
        checkpoint, dtype = body.get("checkpoint"), body.get("dtype", "bf16")
        for key, value in (("checkpoint", checkpoint), ("dtype", dtype)):
            if not isinstance(value, str) or not value:
                raise BadRequest(f"{key} must be a checkpoint name" if key == "checkpoint" else "dtype must be bf16 or fp16",
                                 details={"field": key})
        result = await self.run(self.service.export, cluster, name, checkpoint, dtype, user=self.owner())
        self.reply_model(result, status=201)


class SpecHandler(BaseHandler):
    @api
    async def get(self, cluster: str, name: str) -> None:
        spec = await self.run(self.service.spec, cluster, name)
        self.reply_model(SpecExport(spec=spec, yaml=spec_yaml(spec)))


class LogsHandler(BaseHandler):
    @api
    async def get(self, cluster: str, name: str) -> None:
        self.reply_model(LogsPage.model_validate(await self.run(
            self.service.logs, cluster, name, offset=self.int_arg("offset", 0), limit=self.int_arg("limit", 0) or None)))


class EventsHandler(BaseHandler):
    @api
    async def get(self, cluster: str, name: str) -> None:
        since = self.int_arg("since", 0)
        evs = await self.run(self.service.events, cluster, name, since)
        self.reply_model(EventsPage(events=evs, next=evs[-1]["i"] if evs else since))


class MetricsHandler(BaseHandler):
    @api
    async def get(self, cluster: str, name: str) -> None:
        n = self.int_arg("max_points", 1000)
        if not 4 <= n <= 100_000:
            raise BadRequest("max_points must be between 4 and 100000", details={"field": "max_points"})
        raw = self.get_query_argument("after_step", None)
        after = self.int_arg("after_step", 0) if raw not in (None, "") else None
        self.reply_model(Curves.model_validate(
            await self.run(self.service.metrics, cluster, name, max_points=n, after_step=after)))


def _is_anonymous(user: Any) -> bool:
    """jupyter_server's IdentityProvider.generate_anonymous_user: a uuid4 hex username, name "Anonymous <moon>"."""
    name, username = str(getattr(user, "name", "")), str(getattr(user, "username", ""))
    return name.startswith("Anonymous ") and re.fullmatch(r"[0-9a-f]{32}", username) is not None


def routes() -> list[tuple[str, type[Any]]]:
    from .experiments import CompareHandler
    from .experiments import routes as experiment_routes
    from .proxy import DashboardProxyHandler, LogTailHandler
    from .tensorboard import TensorBoardHandler, TensorBoardProxyHandler

    base = "/cleverthis/api"
    job = rf"{base}/clusters/({NAME})/jobs/({NAME})"
    return [
        (rf"{base}/schema", SchemaHandler),
        (rf"{base}/templates", TemplatesHandler),
        (rf"{base}/templates/({NAME})", TemplateHandler),
        (rf"{base}/clusters", ClustersHandler),
        (rf"{base}/clusters/({NAME})/(up|down)", ClusterActionHandler),
        (rf"{base}/clusters/({NAME})/plan", PlanHandler),
        (rf"{base}/clusters/({NAME})/nodes", NodesHandler),
        (rf"{base}/clusters/({NAME})/compare", CompareHandler),
        (rf"{base}/clusters/({NAME})/download", DownloadHandler),
        (rf"{base}/clusters/({NAME})/jobs", JobsHandler),
        (job, JobHandler),
        (rf"{job}/cancel", CancelHandler),
        (rf"{job}/resume", ResumeHandler),
        (rf"{job}/logs", LogsHandler),
        (rf"{job}/logs/tail", LogTailHandler),
        (rf"{job}/events", EventsHandler),
        (rf"{job}/metrics", MetricsHandler),
        (rf"{job}/tensorboard", TensorBoardHandler),
        (rf"{job}/spec", SpecHandler),
        (rf"{job}/export", ExportHandler),
        *experiment_routes(job),
        (r"/cleverthis/proxy/([^/]+)/(.*)", DashboardProxyHandler),
        (r"/cleverthis/tensorboard/([^/]+)(/.*)", TensorBoardProxyHandler),
    ]
