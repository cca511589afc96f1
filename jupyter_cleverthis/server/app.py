"""The server extension app: configurable clusters and a swappable service class; routes under /cleverthis/."""

from __future__ import annotations

from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Dict, Type

from ..service.clusters import ClusterRegistry
from ..service.jobs import JobService
from . import handlers


class CleverThisApp(ExtensionApp):
    name = "jupyter_cleverthis"
    load_other_extensions = True

    clusters = Dict(
        {},
        config=True,
        help='Extra clusters: {"name": {"address": "http://head:8265", "token_file": "/path"}}. '
        "The managed `local` cluster and RAY_ADDRESS are always known.",
    )
    service_class = Type(JobService, klass=JobService, config=True, help="The job service implementation")

    def initialize_settings(self) -> None:
        registry = ClusterRegistry(extra=dict(self.clusters))
        self.settings["cleverthis_service"] = self.service_class(registry)

    def initialize_handlers(self) -> None:
        self.handlers.extend(handlers.routes())


def main(**kwargs: Any) -> None:  # pragma: no cover - `python -m` convenience
    CleverThisApp.launch_instance(**kwargs)
