"""The loss-curve hint of the notebook's LossCurve: the service's diagnosis (service/diagnosis.py), the one
source the sidebar and `%train show` use too."""

from __future__ import annotations

from ..service.diagnosis import PATTERNS, advice, interpret

HINTS = {pattern: advice(pattern) for pattern in PATTERNS}

__all__ = ["HINTS", "interpret"]
