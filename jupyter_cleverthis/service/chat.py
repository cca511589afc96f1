"""Chat with a checkpoint: the same prompt to one or more checkpoints, answered on the cluster.

Generation never runs in the Jupyter server's process: a short helper job runs `cleverthis_runtime.chat` on
the cluster (on a GPU when the job trained on one), and its answer arrives piece by piece through the job's log
stream (service/log_stream.py), each piece handed to `on_text(index, text)` as it is generated. The sources
are a job's checkpoints by name ("epoch-1", "epoch-final") or model folders on the cluster.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import BadRequest, ClusterError
from . import runtime_env
from .helper_jobs import discard
from .log_stream import iter_job_log
from .ray_client import MARK, short_message, submit

if TYPE_CHECKING:
    from .jobs import JobService

CHAT_ENTRYPOINT = "python -m cleverthis_runtime.chat"
SERVE = ("merged", "adapter")


def resolve_sources(svc: JobService, cluster: str, job: str | None,
                    sources: list[str]) -> tuple[list[dict[str, str]], bool]:
    """[{path, label}] for the request, and whether the job trained on GPUs. With a job, each source is one of
    its checkpoints by name (default: its final checkpoint, else its newest); without, each is a model folder."""
    if job is None:
        if not sources:
            raise BadRequest("name a model folder to chat with", details={"field": "sources"})
        return [{"path": s, "label": s} for s in sources], False
    d = svc.get(cluster, job)
    if not d.checkpoints:
        raise BadRequest(f"job '{job}' has no checkpoint yet", details={"field": "sources"})
    by_name = {c.name: c for c in d.checkpoints}
    if not sources:
        final = [c for c in d.checkpoints if "epoch-final" in c.marks]
        sources = [(final or d.checkpoints)[-1].name]
    out = []
    for name in sources:
        found = by_name.get(name) or next((c for c in d.checkpoints if name in c.marks), None)
        if found is None:
            have = ", ".join(by_name) or "none yet"
            raise BadRequest(f"job '{job}' has no checkpoint '{name}' (it has: {have})", details={"field": "sources"})
        out.append({"path": found.path, "label": name})
    gpus = float((d.spec or {}).get("gpus_per_worker") or 0) > 0
    return out, gpus


def chat(svc: JobService, cluster: str, *, job: str | None, sources: list[str], prompt: str,
         system: str | None = None, max_new_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
         serve: str = "merged", seed: int | None = None,
         on_text: Callable[[int, str], Any] | None = None) -> list[dict[str, Any]]:
    """Ask every source the same prompt; returns one answer per source (chat.py's `chat_answer` fields)."""
    if not prompt.strip():
        raise BadRequest("the prompt is empty", details={"field": "prompt"})
    if serve not in SERVE:
        raise BadRequest(f"serve must be one of {', '.join(SERVE)} (got '{serve}')", details={"field": "serve"})
    if not 1 <= max_new_tokens <= 4096:
        raise BadRequest("max_new_tokens must be between 1 and 4096", details={"field": "max_new_tokens"})
    if temperature < 0 or not 0 < top_p <= 1:
        raise BadRequest("temperature must be >= 0 and top_p in (0, 1]",
                         details={"field": "temperature" if temperature < 0 else "top_p"})
    resolved, gpu = resolve_sources(svc, cluster, job, sources)
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    request: dict[str, Any] = {"sources": resolved, "messages": messages, "max_new_tokens": max_new_tokens,
                               "temperature": temperature, "top_p": top_p, "serve": serve}
    if seed is not None:
        request["seed"] = seed
    env = runtime_env.helper_runtime_env()
    env["env_vars"]["CLEVERTHIS_CHAT"] = json.dumps(request)
    svc.ensure_running(cluster)
    client = svc.client(cluster)
    sid = f"cleverthis-chat-{uuid.uuid4().hex[:12]}"
    submit(client, entrypoint=CHAT_ENTRYPOINT, submission_id=sid, runtime_env=env,
           metadata={MARK: "chat", **({"job": job} if job else {})}, **({"entrypoint_num_gpus": 1} if gpu else {}))
    try:
        answer = _follow(svc.cluster(cluster), sid, on_text)
    finally:
        discard(client, sid)
    if answer.get("error"):
        raise ClusterError(f"chat failed on the cluster: {answer['error']}")
    return list(answer.get("answers") or [])


def _follow(cfg: Any, sid: str, on_text: Callable[[int, str], Any] | None) -> dict[str, Any]:
    """Read the helper job's log as it is written: `chat_text` pieces to `on_text`, the `chat` event returned."""
    from cleverthis_runtime.events import parse_events

    rest, answer, log = "", None, []
    for text in iter_job_log(cfg, sid):
        *lines, rest = (rest + text).split("\n")
        log.extend(lines)
        for e in parse_events(lines):
            if e["type"] == "chat_text" and on_text is not None:
                on_text(int(e["index"]), str(e["text"]))
            elif e["type"] == "chat":
                answer = e
    if answer is None and rest:
        answer = next((e for e in parse_events([rest]) if e["type"] == "chat"), None)
    if answer is None:
        raise ClusterError(f"the chat job failed: {short_message(chr(10).join(log[-50:] + [rest]))}")
    return answer
