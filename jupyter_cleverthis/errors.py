"""One exception hierarchy; the server's base handler maps it to HTTP answers, the CLI to one line."""

from __future__ import annotations

from typing import Any


class CleverThisError(Exception):
    """An error a user can act on. `code` is stable, `message` is one readable sentence."""

    status = 400
    code = "error"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.details))

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


def _rebuild(cls: type[CleverThisError], message: str, details: dict[str, Any]) -> CleverThisError:
    return cls(message, details=details)


class InvalidSpec(CleverThisError):
    status, code = 422, "invalid_spec"


class BadRequest(CleverThisError):
    status, code = 400, "bad_request"


class ClusterNotFound(CleverThisError):
    status, code = 404, "cluster_not_found"


class ClusterNotRunning(CleverThisError):
    status, code = 409, "cluster_not_running"


class Forbidden(CleverThisError):
    """The user may not do this (Jupyter's authorizer refused, or the job belongs to somebody else)."""

    status, code = 403, "forbidden"


class JobNotFound(CleverThisError):
    status, code = 404, "job_not_found"


class TemplateNotFound(CleverThisError):
    status, code = 404, "template_not_found"


class JobExists(CleverThisError):
    status, code = 409, "job_exists"


class JobConflict(CleverThisError):
    """The job's state does not allow the operation (e.g. delete a running job)."""

    status, code = 409, "job_conflict"


class ClusterError(CleverThisError):
    """Ray answered with an error we cannot map more precisely."""

    status, code = 502, "ray_error"
