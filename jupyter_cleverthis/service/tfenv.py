"""The TensorFlow environment: `framework: tensorflow` jobs run their driver and workers with its python.

TensorFlow never enters the Jupyter environment. `cleverthis-train setup tensorflow` builds the environment
under `$CLEVERTHIS_HOME/envs/tensorflow` from the same base Python and with the same Ray (and pydantic) version as
the caller; jobs find it there, or at `$CLEVERTHIS_TF_PYTHON` (a path on the cluster's nodes). Ray needs one
version across a cluster, so a TensorFlow environment with another Ray is refused before submit.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import InvalidSpec
from .clusters import home

PYTHON_ENV = "CLEVERTHIS_TF_PYTHON"
REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements-tf.txt"
STAMP = ".cleverthis-env.json"
SETUP_COMMAND = "cleverthis-train setup tensorflow"


def default_dir() -> Path:
    return home() / "envs" / "tensorflow"


def python() -> str:
    """The TensorFlow environment's python: $CLEVERTHIS_TF_PYTHON, else the one `setup tensorflow` built."""
    configured = os.environ.get(PYTHON_ENV)
    if configured:
        return configured
    local = default_dir() / "bin" / "python"
    if local.exists():
        return str(local)
    raise InvalidSpec(
        f"framework: tensorflow needs the TensorFlow environment, which is not installed: create it with "
        f"`{SETUP_COMMAND}` (it goes to {default_dir()}) or set {PYTHON_ENV} to the python of an environment "
        f"built from jupyter_cleverthis/requirements-tf.txt on the cluster's nodes",
        details={"field": "framework"},
    )


def ray_version_of(py: str) -> str | None:
    """The Ray version installed beside this python (read from its metadata, without starting it); None when
    the python is not on this machine (a path on remote nodes) or has no Ray."""
    env = Path(py).parent.parent
    for meta in sorted(glob.glob(str(env / "lib" / "python*" / "site-packages" / "ray-*.dist-info" / "METADATA"))):
        for line in Path(meta).read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


def check_ray_version(py: str, cluster_ray: str | None) -> None:
    """Refuse a TensorFlow environment whose Ray is not the cluster's (Ray needs one version across a cluster)."""
    mine = ray_version_of(py)
    if mine and cluster_ray and mine != cluster_ray:
        raise InvalidSpec(
            f"framework: tensorflow: the TensorFlow environment ({py}) has Ray {mine}, but the cluster runs Ray "
            f"{cluster_ray}; Ray needs one version across a cluster: run `{SETUP_COMMAND}` again",
            details={"field": "framework"},
        )


def _wanted() -> dict[str, str]:
    import pydantic
    import ray

    return {
        "python": os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
        "ray": ray.__version__,
        "pydantic": pydantic.VERSION,
        "requirements": hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest(),
    }


def setup(path: Path | None = None, *, out: Callable[[str], None] = print) -> Path:
    """Create (or bring up to date) the TensorFlow environment; idempotent. Returns its python."""
    env = Path(path) if path else default_dir()
    py = env / "bin" / "python"
    want = _wanted()
    stamp = env / STAMP
    try:
        have = json.loads(stamp.read_text())
    except (OSError, ValueError):
        have = None
    if have == want and py.exists():
        out(f"the TensorFlow environment is up to date: {py} (Ray {want['ray']})")
        return py
    env.parent.mkdir(parents=True, exist_ok=True)
    if not py.exists() or (have and have.get("python") != want["python"]):
        out(f"creating the TensorFlow environment in {env} ...")
        subprocess.run([want["python"], "-m", "venv", "--clear", str(env)], check=True)
    out(f"installing TensorFlow, Ray {want['ray']} and pydantic {want['pydantic']} into {env} ...")
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(REQUIREMENTS), f"ray[default,train]=={want['ray']}",
                    f"pydantic=={want['pydantic']}"], check=True)
    env.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(want, indent=2))
    out(f"the TensorFlow environment is ready: {py}")
    return py
