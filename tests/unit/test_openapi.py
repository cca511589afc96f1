"""docs/openapi.yaml documents exactly the server's routes and methods."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from jupyter_cleverthis.server.handlers import routes

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"


def _as_openapi(pattern: str) -> str:
    names = iter(["{key}"] if pattern.startswith("/cleverthis/tensorboard/")
                 else ["{name}"] if pattern.startswith("/cleverthis/api/templates/") else ["{cluster}", "{name}"])
    path = pattern.replace("(up|down)", "{action}").replace("(/.*)", "/{path}").replace("(.*)", "{path}")
    return re.sub(r"\(\[\^/\]\+\)", lambda _: next(names), path)


def test_openapi_matches_routes():
    doc = yaml.safe_load(DOC.read_text())
    documented = {(p, m) for p, ops in doc["paths"].items() for m in ops}
    served = {
        (_as_openapi(pattern), m)
        for pattern, handler in routes()
        for m in ("get", "post", "put", "patch", "delete")
        if m in vars(handler) or (m == "get" and "open" in vars(handler))
    }
    assert documented == served
