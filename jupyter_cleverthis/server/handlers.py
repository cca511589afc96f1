"""Thin REST handlers over the job service. Errors are mapped once, here, to {code, message, details}.

Routes (all under <base_url>cleverthis/api, all authenticated; see docs/rest-api.md):
  GET  /schema                                   JSON Schemas of the job spec and training config
  GET  /clusters                                 clusters with status and resources
  POST /clusters/{cluster}/up | /down            start / stop the managed local cluster
  GET  /clusters/{cluster}/jobs                  job summaries, newest first
  POST /clusters/{cluster}/jobs                  create a job (201); 422 with field errors
  GET  /clusters/{cluster}/jobs/{name}           job detail
  POST /clusters/{cluster}/jobs/{name}/cancel    request cancellation
  GET  /clusters/{cluster}/jobs/{name}/logs      the job's log text
  GET  /clusters/{cluster}/jobs/{name}/events    structured events, ?since=<index>
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from jupyter_server.base.handlers import APIHandler
from tornado import web

from ..errors import BadRequest, CleverThisError
from ..service.clusters import cluster_resources
from ..service.jobs import JobService
from ..spec import JobSpec, TrainingConfig

log = logging.getLogger(__name__)
NAME = r"[^/]+"


def api(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Authenticate, run, and map the project's errors to JSON bodies (tracebacks stay in the server log)."""

    @web.authenticated
    @functools.wraps(method)
    async def wrapper(self: BaseHandler, *args: Any, **kwargs: Any) -> None:
        try:
            await method(self, *args, **kwargs)
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

    def reply(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(data, default=str))

    def owner(self) -> str:
        user = self.current_user
        return getattr(user, "username", None) or getattr(user, "name", None) or str(user)


class SchemaHandler(BaseHandler):
    @api
    async def get(self) -> None:
        self.reply({"job_spec": JobSpec.model_json_schema(), "training_config": TrainingConfig.model_json_schema()})


class ClustersHandler(BaseHandler):
    @api
    async def get(self) -> None:
        def collect() -> list[dict[str, Any]]:
            reg = self.service.registry
            rows = []
            for name, cfg in reg.configs().items():
                status = reg.status(name)
                rows.append({**cfg.public(), "status": status,
                             "resources": cluster_resources(cfg) if status == "running" else None})
            return rows

        self.reply({"clusters": await self.run(collect)})


class ClusterActionHandler(BaseHandler):
    @api
    async def post(self, cluster: str, action: str) -> None:
        reg = self.service.registry
        cfg = reg.get(cluster)
        if not cfg.managed:
            raise BadRequest(f"cluster '{cluster}' is not managed by jupyter-cleverthis; start it where it runs")
        if action == "up":
            cfg = await self.run(reg.local(cluster).up)
        else:
            await self.run(reg.local(cluster).down)
        self.reply({**reg.get(cluster).public(), "status": reg.status(cluster)})


class JobsHandler(BaseHandler):
    @api
    async def get(self, cluster: str) -> None:
        jobs = await self.run(self.service.list, cluster)
        status = self.get_query_argument("status", None)
        if status:
            jobs = [j for j in jobs if j.status.value == status]
        self.reply({"jobs": [j.model_dump(mode="json") for j in jobs]})

    @api
    async def post(self, cluster: str) -> None:
        body = self.json_body()
        if body.get("cluster", cluster) != cluster:
            raise BadRequest(f"body cluster '{body['cluster']}' differs from the URL's '{cluster}'",
                             details={"field": "cluster"})
        body["cluster"] = cluster
        spec = self.service.validate(body)
        detail = await self.run(self.service.create, spec, owner=self.owner())
        self.reply(detail.model_dump(mode="json"), status=201)


class JobHandler(BaseHandler):
    @api
    async def get(self, cluster: str, name: str) -> None:
        detail = await self.run(self.service.get, cluster, name)
        self.reply(detail.model_dump(mode="json"))


class CancelHandler(BaseHandler):
    @api
    async def post(self, cluster: str, name: str) -> None:
        detail = await self.run(self.service.cancel, cluster, name)
        self.reply(detail.model_dump(mode="json"))


class LogsHandler(BaseHandler):
    @api
    async def get(self, cluster: str, name: str) -> None:
        self.reply({"text": await self.run(self.service.logs, cluster, name)})


class EventsHandler(BaseHandler):
    @api
    async def get(self, cluster: str, name: str) -> None:
        try:
            since = int(self.get_query_argument("since", "0"))
        except ValueError as e:
            raise BadRequest("since must be a whole number", details={"field": "since"}) from e
        evs = await self.run(self.service.events, cluster, name, since)
        self.reply({"events": evs, "next": evs[-1]["i"] if evs else since})


def routes() -> list[tuple[str, type[BaseHandler]]]:
    base = "/cleverthis/api"
    job = rf"{base}/clusters/({NAME})/jobs/({NAME})"
    return [
        (rf"{base}/schema", SchemaHandler),
        (rf"{base}/clusters", ClustersHandler),
        (rf"{base}/clusters/({NAME})/(up|down)", ClusterActionHandler),
        (rf"{base}/clusters/({NAME})/jobs", JobsHandler),
        (job, JobHandler),
        (rf"{job}/cancel", CancelHandler),
        (rf"{job}/logs", LogsHandler),
        (rf"{job}/events", EventsHandler),
    ]
