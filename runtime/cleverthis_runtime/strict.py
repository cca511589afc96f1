"""The strict base of the spec's models: unknown keys are refused with a "did you mean"."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class StrictModel(BaseModel):
    """Rejects unknown keys with a "did you mean" suggestion naming the closest known key."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = set(cls.model_fields)
            for key in data:
                if isinstance(key, str) and key not in known:
                    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
                    hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(sorted(known))}"
                    raise ValueError(f"unknown key '{key}'{hint}")
        return data
