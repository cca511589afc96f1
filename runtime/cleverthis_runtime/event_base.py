"""The envelope every event line has (event_models.py holds one model per event type)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Event(BaseModel):
    """The envelope every event line has."""

    model_config = ConfigDict(extra="allow")
    src: str | None = None
    seq: int = 0
    t: float | None = None
    type: str
    trial: str | None = None  # the sweep trial (its job name) that printed it (sweep.py)
