"""Saved job specs ("Save as template" in the sidebar, offered by the Create Job form): one YAML file per template
under `$CLEVERTHIS_HOME/templates/<name>.yaml`, in the same form `%%train` and `cleverthis-train create --config`
read. A template is a spec without its job name (each job needs a new one); it is checked as a spec when saved."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import BadRequest, InvalidSpec, TemplateNotFound
from ..spec import NAME_PATTERN, NAME_RULE, JobSpec, error_list
from .clusters import home

# A template's name follows the job-name rule (it is a file name too).
NAME = re.compile(NAME_PATTERN)
# What a template never keeps: the job's own name.
NOT_KEPT = ("name",)


class TemplateStore:
    def __init__(self, root: Path | None = None) -> None:
        self.dir = (root or home()) / "templates"

    def list(self) -> list[dict[str, Any]]:
        """Every template, by name: [{name, spec}] (a file that is not a YAML mapping is skipped)."""
        out = []
        for path in sorted(self.dir.glob("*.yaml")) if self.dir.is_dir() else []:
            try:
                spec = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(spec, dict):
                out.append({"name": path.stem, "spec": spec})
        return out

    def save(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Store `spec` (less its job name) as template `name`, replacing one of that name; returns it."""
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise BadRequest(f"Template name: {NAME_RULE}", details={"field": "name"})
        kept = {k: v for k, v in spec.items() if k not in NOT_KEPT and v is not None}
        try:
            JobSpec.model_validate({**kept, "name": "template-check"})
        except ValidationError as e:
            raise InvalidSpec("the template is not a valid job spec", details={"errors": error_list(e)}) from e
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(kept, f, sort_keys=False, allow_unicode=True)
        os.replace(tmp, self.dir / f"{name}.yaml")  # a reader sees the old template or the new one, whole
        return {"name": name, "spec": kept}

    def delete(self, name: str) -> None:
        path = self.dir / f"{name}.yaml"
        if not NAME.fullmatch(name) or not path.exists():
            raise TemplateNotFound(f"no template named '{name[:100]}'", details={"field": "name"})
        path.unlink()
