"""jupyter-cleverthis: launch and monitor distributed training and fine-tuning jobs on Ray clusters.

Public names: `Job` (the job handle), `jupyter_cleverthis.widgets`, the `%train` magic
(`%load_ext jupyter_cleverthis`) and the server extension. Imports are lazy so the runtime side and the
console script stay light.
"""

from __future__ import annotations

from typing import Any

from cleverthis_runtime import __version__  # noqa: F401 (one version: js/package.json, written at build)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-cleverthis"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .server.app import CleverThisApp

    return [{"module": "jupyter_cleverthis", "app": CleverThisApp}]


def load_ipython_extension(ipython: Any) -> None:
    from .magics import TrainMagics

    ipython.register_magics(TrainMagics)


def __getattr__(name: str) -> Any:
    if name == "Job":
        from .job import Job

        return Job
    raise AttributeError(f"module 'jupyter_cleverthis' has no attribute '{name}'")
