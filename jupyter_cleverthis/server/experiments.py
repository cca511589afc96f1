"""REST for what users do right after a run (docs/sweeps-chat.md): compare jobs' specs and a sweep's trials,
take the best trial's spec to the form, and chat with a job's checkpoints (the answer streamed as it is generated).

  GET  /clusters/{cluster}/jobs/{name}/sweep       the sweep's trials compared, and its best trial
  GET  /clusters/{cluster}/jobs/{name}/sweep/best  the best trial's spec (Create from best), also as YAML
  POST /clusters/{cluster}/jobs/{name}/chat        {prompt, sources, max_new_tokens, temperature, top_p, serve}:
                                                   newline-delimited JSON: {"type": "text", index, text} pieces,
                                                   then {"type": "answers", answers} or {"type": "error", message}
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from ..errors import BadRequest, CleverThisError
from ..service.models import Comparison, SpecExport
from ..spec import error_list, format_errors, spec_yaml
from .handlers import BaseHandler, api


class ChatRequest(BaseModel):
    """The body of a chat request (the widget's and the sidebar's settings)."""

    prompt: str
    sources: list[str] = Field(default_factory=list, description="Checkpoint names (default: the final one)")
    system: str | None = None
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    serve: Literal["merged", "adapter"] = "merged"


class CompareHandler(BaseHandler):
    @api
    async def get(self, cluster: str) -> None:
        names = list(dict.fromkeys(n.strip() for n in self.get_query_argument("jobs", "").split(",") if n.strip()))
        if not 2 <= len(names) <= 10:
            raise BadRequest("jobs must name 2 to 10 different jobs, separated by commas", details={"field": "jobs"})
        self.reply_model(Comparison(jobs=names, diff=await self.run(self.service.compare, cluster, names)))


class SweepHandler(BaseHandler):
    @api
    async def get(self, cluster: str, name: str) -> None:
        self.reply_model(await self.run(self.service.sweep, cluster, name))


class BestSpecHandler(BaseHandler):
    @api
    async def get(self, cluster: str, name: str) -> None:
        spec = await self.run(self.service.best_spec, cluster, name)
        self.reply_model(SpecExport(spec=spec, yaml=spec_yaml(spec)))


class ChatHandler(BaseHandler):
    @api
    async def post(self, cluster: str, name: str) -> None:
        try:
            req = ChatRequest.model_validate(self.json_body())
        except ValidationError as e:
            errors = error_list(e)
            raise BadRequest(format_errors(e), details={"field": errors[0]["field"], "errors": errors}) from e
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def on_text(index: int, text: str) -> None:
            loop.call_soon_threadsafe(pieces.put_nowait, {"type": "text", "index": index, "text": text})

        task = asyncio.ensure_future(self.run(self.service.chat, cluster, job=name, on_text=on_text,
                                              **req.model_dump()))
        started = False
        while True:
            getter = asyncio.ensure_future(pieces.get())
            done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                break
            started = started or self._start_stream()
            await self._line(getter.result())
        while not pieces.empty():
            started = started or self._start_stream()
            await self._line(pieces.get_nowait())
        try:
            answers = task.result()
        except CleverThisError as e:
            if not started:  # nothing sent yet: the usual error answer, with its status
                raise
            await self._line({"type": "error", "message": e.message})
        else:
            self._start_stream()
            await self._line({"type": "answers", "answers": answers})
        self.finish()

    def _start_stream(self) -> bool:
        self.set_header("Content-Type", "application/x-ndjson")
        self.set_header("Cache-Control", "no-cache")
        return True

    async def _line(self, obj: dict[str, Any]) -> None:
        self.write(json.dumps(obj, default=str) + "\n")
        await self.flush()


def routes(job: str) -> list[tuple[str, type[Any]]]:
    return [(rf"{job}/sweep", SweepHandler), (rf"{job}/sweep/best", BestSpecHandler), (rf"{job}/chat", ChatHandler)]
