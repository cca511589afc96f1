"""What a job carries to the cluster: its entrypoint and Ray runtime_env (the spec, the runtime package, settings).

The spec travels in the runtime_env's `CLEVERTHIS_SPEC` variable, and `spec_of` reads it back from Ray's job
record: Ray stays the source of truth for what a job was asked to do.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import cleverthis_runtime
from cleverthis_runtime.backend import backend_for
from cleverthis_runtime.checkpoints import stop_grace_seconds

from ..spec import JobSpec
from . import tfenv

ENTRYPOINT = "python -m cleverthis_runtime"
PREFLIGHT_ENTRYPOINT = "python -m cleverthis_runtime.preflight"
DOWNLOAD_ENTRYPOINT = "python -m cleverthis_runtime.download"
EXPORT_ENTRYPOINT = "python -m cleverthis_runtime.export"
#: the Python environments a backend may name (Backend.environment), each with python() and check_ray_version()
ENVIRONMENTS = {"tensorflow": tfenv}

# What the Jupyter server's environment passes on to its jobs: the model cache, the DeepSpeed op cache and the
# object stores' settings (s3:// and gs:// dataset paths, read through fsspec).  Settings and file paths only:
# secrets (AWS keys, HF_TOKEN, ...) would be visible in Ray's job records, so jobs take those from their
# nodes' own environment or from the credentials files named here (docs/datasets.md).
PASSTHROUGH_ENV = ("HF_HOME", "HF_HUB_OFFLINE", "TORCH_EXTENSIONS_DIR",
                   "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                   "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                   "GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST",
                   # experiment tracking (docs/tracking.md): where to, never the keys (WANDB_API_KEY,
                   # MLFLOW_TRACKING_PASSWORD/TOKEN stay on the nodes); a URI's user:password is dropped
                   "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_MODE",
                   "WANDB_DIR", "WANDB_BASE_URL")


def job_runtime_env(spec: JobSpec) -> dict[str, Any]:
    """The runtime_env of a training job, and of its pre-flight (which must see what the job will see)."""
    env_vars = {
        "CLEVERTHIS_SPEC": spec_json(spec),
        "CLEVERTHIS_JOB": spec.name,
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # Ray Train's print patch sends a worker's print() to its logger *and*, since Ray wraps the worker's
        # stdout, to stdout too: every Trainer log line ({'loss': ...}) would reach the job log twice
        "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
    }
    # How long Ray waits after the SIGTERM of a cancel before SIGKILL: enough to write a checkpoint
    # (rule in docs/checkpoints.md, "Cancel and resume"; training_config.cancel_grace_s overrides it).
    tc = spec.training_config
    env_vars["RAY_JOB_STOP_WAIT_TIME_S"] = str(stop_grace_seconds(
        spec.base_model, tc.method if tc else None, tc.cancel_grace_s if tc else None))
    env = {"py_modules": [runtime_package()], "env_vars": {**env_vars, **passthrough_env()}}
    backend = backend_for(spec.framework)
    py = job_python(spec)
    if py is not None:  # Ray starts the job's supervisor and every worker with it (the entrypoint too: `entrypoint`)
        env["py_executable"] = py
    env["env_vars"].update(backend.env_vars)
    return env


def job_python(spec: JobSpec) -> str | None:
    """The python a job runs with: None for the cluster's own, else that of its backend's environment (the
    TensorFlow environment for framework tensorflow: `tfenv`)."""
    name = backend_for(spec.framework).environment
    if name is None:
        return None
    if name not in ENVIRONMENTS:
        raise ValueError(f"framework {spec.framework}: no environment named {name!r} is known")
    return ENVIRONMENTS[name].python()


def helper_runtime_env() -> dict[str, Any]:
    """The runtime_env of a helper job that needs no spec (the model download)."""
    return {"py_modules": [runtime_package()], "env_vars": {"PYTHONUNBUFFERED": "1", **passthrough_env()}}


def runtime_package() -> str:
    """The cluster-side runtime's folder, shipped with every job as a py_module."""
    return str(Path(cleverthis_runtime.__file__).parent)


def entrypoint(spec: JobSpec) -> str:
    py = job_python(spec)
    return f"{shlex.quote(py)} -m cleverthis_runtime" if py is not None else ENTRYPOINT


def spec_json(spec: JobSpec) -> str:
    """The spec as the runtime reads it: training_config holds only the keys the user set, so that the
    dataset's training_config.json keeps every other key (a bare dump would override them with defaults)."""
    data = spec.model_dump(mode="json")
    if spec.training_config is not None:
        data["training_config"] = spec.training_config.model_dump(mode="json", exclude_unset=True)
    return json.dumps(data)


def spec_of(runtime_env: dict[str, Any] | None) -> dict[str, Any] | None:
    """The spec a job was submitted with, read back from its runtime_env (None when it has none)."""
    raw = ((runtime_env or {}).get("env_vars") or {}).get("CLEVERTHIS_SPEC")
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def passthrough_env() -> dict[str, str]:
    out = {k: os.environ[k] for k in PASSTHROUGH_ENV if os.environ.get(k)}
    for k in ("MLFLOW_TRACKING_URI", "WANDB_BASE_URL"):
        if k in out:
            out[k] = without_userinfo(out[k])
    return out


def without_userinfo(uri: str) -> str:
    """`https://user:secret@host/x` -> `https://host/x`: a password in a URI stays out of Ray's job records."""
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    return urlunsplit(parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")))
