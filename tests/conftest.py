"""Shared fixtures: one real local Ray head per test run (free loopback ports, token auth, stopped by pid)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_DATA = ROOT / "examples" / "data"

# Every process the tests start (kernels, servers, the CLI) sees the same private home, so the managed
# `local` cluster they find is the one this run started, never a developer's own.
_HOME = Path(tempfile.mkdtemp(prefix="cleverthis-tests-"))
os.environ["CLEVERTHIS_HOME"] = str(_HOME)
os.environ.pop("RAY_ADDRESS", None)
os.environ.pop("CLEVERTHIS_CLUSTER", None)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest_plugins = ["pytest_jupyter.jupyter_server"]


@pytest.fixture(scope="session")
def cleverthis_home() -> Path:
    return _HOME


@pytest.fixture(scope="session")
def ray_cluster(cleverthis_home: Path) -> Iterator[object]:
    from jupyter_cleverthis.service.clusters import LocalCluster

    cluster = LocalCluster("local", cleverthis_home)
    cfg = cluster.up()
    try:
        yield cfg
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def tiny_model(cleverthis_home: Path) -> str:
    from cleverthis_runtime.tiny import build_tiny_model

    return build_tiny_model(str(cleverthis_home / "models" / "tiny-llama"), [str(EXAMPLE_DATA)])


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A private copy of the sample data (its checkpoints/ folder is the test's own)."""
    dst = tmp_path / "datasets" / "training"
    shutil.copytree(EXAMPLE_DATA, dst, ignore=shutil.ignore_patterns("checkpoints"))
    return dst


@pytest.fixture
def job_name(request: pytest.FixtureRequest) -> str:
    base = request.node.name.replace("_", "-").replace("[", "-").replace("]", "")[:40].strip("-")
    return f"{base}-{int(time.time() * 1000) % 10_000_000}"


@pytest.fixture
def jp_server_config() -> dict:
    return {"ServerApp": {"jpserver_extensions": {"jupyter_cleverthis": True}}}
