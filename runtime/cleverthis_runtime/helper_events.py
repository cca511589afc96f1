"""The events of the helper jobs (pre-flight, model download, export, chat): part of event_models' union."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .event_base import Event


class DownloadProgressEvent(Event):
    type: Literal["download_progress"]
    model: str
    node: str | None = None
    what: str | None = None
    downloaded: int = 0
    total: int | None = None


class DownloadDoneEvent(Event):
    type: Literal["download_done"]
    model: str
    path: str
    seconds: float | None = None


class DownloadEvent(Event):
    """The answer of a pre-fetch helper job (`model.download`): per node, cached or downloaded."""

    type: Literal["download"]
    model: str
    revision: str | None = None
    ok: bool
    nodes: list[dict[str, Any]] = Field(default_factory=list)
    seconds: float | None = None
    error: str | None = None


class FieldProblem(BaseModel):
    """One pre-flight error: the spec field, the message and, for a dataset's bad line, its path, line and text."""

    field: str
    message: str
    path: str | None = None
    line: int | None = None
    text: str | None = None


class PreflightEvent(Event):
    """The answer of a pre-flight helper job: errors by field, warnings, and the facts it measured."""

    type: Literal["preflight"]
    errors: list[FieldProblem] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class ExportEvent(Event):
    """The answer of an export helper job (export.py): the standalone fp16/bf16 folder written, or the error."""

    type: Literal["export"]
    source: str
    path: str | None = None
    dtype: str | None = None
    size_bytes: int | None = None
    error: str | None = None


class ChatTextEvent(Event):
    """A piece of a chat answer as the model generates it (chat.py): `index` is the source's place in the request."""

    type: Literal["chat_text"]
    index: int
    text: str


class ChatAnswer(BaseModel):
    """One source's whole answer: which folder, served how (merged weights, or base plus adapter), its numbers."""

    index: int
    label: str
    path: str
    served_as: str
    text: str
    new_tokens: int
    seconds: float


class ChatAnswerEvent(Event, ChatAnswer):
    """One source's answer, emitted once it is complete."""

    type: Literal["chat_answer"]


class ChatEvent(Event):
    """The answer of a chat helper job: every source's answer in order, or the error."""

    type: Literal["chat"]
    answers: list[ChatAnswer] = Field(default_factory=list)
    error: str | None = None
