"""What differs between the frameworks, behind one small protocol: `backend_for(spec.framework)`.

The driver (`__main__`), the pre-flight and the service ask the backend instead of branching on the framework.
Both implementations import their ML libraries lazily: the service and the driver load this module cheaply.
"""

from __future__ import annotations

from typing import Any, Protocol

from .spec import JobSpec, TrainingConfig


class Backend(Protocol):
    framework: str
    #: the Python environment the job runs in: None for the cluster's own, else its name ("tensorflow": the
    #: environment `cleverthis-train setup tensorflow` builds)
    environment: str | None
    #: environment variables the job's processes need (beside the job's own)
    env_vars: dict[str, str]

    def check_base_model(self, path: str) -> None:
        """Raise ValueError (naming what is wrong) when `path` cannot be this framework's base model."""

    def refusals(self, tc: TrainingConfig) -> list[tuple[str, str]]:
        """(field, message) for each request of the merged training config this framework cannot honour here."""

    def preflight_facts(self, spec: JobSpec, tc: TrainingConfig, ds: Any, out: dict[str, Any], err: Any, *,
                        quick: bool = False) -> None:
        """The pre-flight's model facts (token lengths, the plan, ...) into `out`; `err(field, message)` for
        problems. `quick`: only what create checks, without reading the model's weights or the whole data."""

    def fit(self, spec: JobSpec, job: str, loop_config: dict[str, Any]) -> None:
        """The driver's half: start Ray Train's trainer with the workers' loop and wait for it."""


def backend_for(framework: str) -> Backend:
    if framework == "torch":
        from .torch_backend import TorchBackend

        return TorchBackend()
    if framework == "tensorflow":
        from .tf_backend import TensorflowBackend

        return TensorflowBackend()
    raise ValueError(f"framework {framework!r}: choose torch or tensorflow")
