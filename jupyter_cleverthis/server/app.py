"""The server extension app: configurable clusters and a swappable service class; routes under /cleverthis/."""

from __future__ import annotations

from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Dict, Float, List, Type, Unicode

from ..service.clusters import ClusterRegistry, home
from ..service.jobs import JobService
from ..service.store import EventStore
from ..service.tensorboard import TensorBoards
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
    event_store = Unicode("", config=True, help="SQLite file of parsed job events (default $CLEVERTHIS_HOME/events.sqlite)")
    admin_users = List(
        Unicode(),
        [],
        config=True,
        help="Jupyter user names that may cancel, resume and delete other users' jobs (everyone else: their own only)",
    )
    refresh_interval = Float(3.0, config=True, help="Seconds between the front-ends' job list refreshes")

    def initialize_settings(self) -> None:
        registry = ClusterRegistry(extra=dict(self.clusters), allow_addresses=False)  # names only
        store = EventStore(self.event_store or home() / "events.sqlite")
        self.settings["cleverthis_service"] = self.service_class(registry, store, admin_users=set(self.admin_users))
        self.settings["cleverthis_refresh_interval"] = self.refresh_interval
        self.settings["cleverthis_tensorboards"] = self.tensorboards = TensorBoards(self.serverapp.base_url)

    def initialize_handlers(self) -> None:
        self.handlers.extend(handlers.routes())

    async def stop_extension(self) -> None:
        """The server is stopping: so do the TensorBoards it started."""
        self.tensorboards.stop_all()


def main(**kwargs: Any) -> None:  # pragma: no cover - `python -m` convenience
    CleverThisApp.launch_instance(**kwargs)
