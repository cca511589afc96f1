"""Shared fixtures: one real local Ray head per test run (free loopback ports, token auth, stopped by pid).

Under pytest-xdist (`-n 2`, as `make test` runs the integration tests) the workers of one run share that head
and one private home: the controller makes the home and its workers inherit it; the first worker to need the
head starts it (a file lock), and the controller stops it by its pid once every worker has finished.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cleverthis_runtime.strategies import environment_key as _environment_key

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_DATA = ROOT / "examples" / "data"

# Every process the tests start (kernels, servers, the CLI) sees the same private home, so the managed
# `local` cluster they find is the one this run started, never a developer's own.
_HOME = Path(os.environ.get("CLEVERTHIS_TEST_RUN_HOME") or tempfile.mkdtemp(prefix="cleverthis-tests-"))
os.environ["CLEVERTHIS_TEST_RUN_HOME"] = str(_HOME)  # inherited by this run's xdist workers
os.environ["CLEVERTHIS_HOME"] = str(_HOME)
# Logical CPUs of the test head: three 2-worker jobs of parallel tests fit at once (the tests read the number).
TEST_CLUSTER_CPUS = 6
os.environ.pop("RAY_ADDRESS", None)
os.environ.pop("CLEVERTHIS_CLUSTER", None)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The TensorFlow environment `make install-tf` builds (`cleverthis-train setup tensorflow`), outside the checkout.
_TF_PY = Path.home() / ".cache" / "cleverthis" / "home" / "envs" / "tensorflow" / "bin" / "python"
if _TF_PY.exists():
    os.environ.setdefault("CLEVERTHIS_TF_PYTHON", str(_TF_PY))
# DeepSpeed's JIT-built ops (cpu_adam ~65 s) outlive the run: every job gets this cache (PASSTHROUGH_ENV), one per
# Python environment (a clean clone's venv and a developer's would otherwise rebuild over each other's).
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "cleverthis" / "torch_extensions"
                                                  / _environment_key()))

pytest_plugins = ["pytest_jupyter.jupyter_server"]


@pytest.fixture(scope="session")
def cleverthis_home() -> Path:
    return _HOME


def _xdist_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


@pytest.fixture(scope="session")
def ray_cluster(cleverthis_home: Path) -> Iterator[object]:
    from filelock import FileLock

    from jupyter_cleverthis.service.clusters import LocalCluster

    cluster = LocalCluster("local", cleverthis_home)
    with FileLock(str(cleverthis_home / "cluster.lock")):
        # idempotent: a worker finds the head another one started. Ray's metrics export on (off by default for
        # users): test_finetune reads the job's Ray metrics from it, test_listeners checks it is on loopback.
        cfg = cluster.up(num_cpus=TEST_CLUSTER_CPUS, metrics=True)
    yield cfg  # stopped by pytest_sessionfinish


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The run's own process (the controller of an xdist run, after all its workers ended) stops the head by its pid."""
    if not _xdist_worker():
        from jupyter_cleverthis.service.clusters import LocalCluster

        LocalCluster("local", _HOME).down()


@pytest.fixture(scope="session")
def tiny_arch(cleverthis_home: Path):
    """tiny_arch("falcon") -> a tiny model of that family (cleverthis_runtime.tiny.ARCHITECTURES), built once per
    run from its transformers config with a tokenizer trained on the sample data."""
    from filelock import FileLock

    from cleverthis_runtime.tiny import build_tiny_model

    def build(arch: str) -> str:
        out = cleverthis_home / "models" / f"tiny-{arch}"
        with FileLock(str(cleverthis_home / f"tiny-{arch}.lock")):
            return build_tiny_model(str(out), [str(EXAMPLE_DATA)], arch=arch)

    return build


@pytest.fixture(scope="session")
def tiny_model(tiny_arch) -> str:
    """The tiny Llama most tests train (built once per run, shared by the xdist workers)."""
    return tiny_arch("llama")


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A private copy of the sample data (its checkpoints/ folder is the test's own)."""
    dst = tmp_path / "datasets" / "training"
    shutil.copytree(EXAMPLE_DATA, dst, ignore=shutil.ignore_patterns("checkpoints"))
    return dst


@pytest.fixture
def job_name(request: pytest.FixtureRequest) -> Iterator[str]:
    base = request.node.name.replace("_", "-").replace("[", "-").replace("]", "")[:40].strip("-")
    name = f"{base}-{int(time.time() * 1000) % 10_000_000}"
    yield name
    if "ray_cluster" in request.fixturenames:
        _stop_leftover_jobs(name)


@pytest.fixture
def stop_at_end() -> Iterator[list[str]]:
    """Job names a test starts under names of its own (the browser tests' `unique`): whichever of them still runs
    at teardown is stopped, so a failed test's 1,000-epoch job does not run on and starve the browser tests
    after it."""
    names: list[str] = []
    yield names
    for name in names:
        _stop_leftover_jobs(name)


def _stop_leftover_jobs(prefix: str) -> None:
    """A test's jobs end with it: one that failed midway must not leave its jobs running on the shared head, where
    they would starve the tests after it (a pre-flight can time out behind a few orphaned jobs)."""
    from jupyter_cleverthis.service.jobs import JobService
    from jupyter_cleverthis.service.ray_client import TERMINAL_RAY_STATUSES

    try:
        client = JobService().client("local")
        for info in client.list_jobs():
            sid = info.submission_id or ""
            if sid.startswith(prefix) and not str(info.status).endswith(TERMINAL_RAY_STATUSES):
                client.stop_job(sid)
    except Exception as e:  # the cleanup never hides the test's own result
        print(f"could not stop the jobs of {prefix}: {e}")


@pytest.fixture
def jp_server_config() -> dict:
    return {"ServerApp": {"jpserver_extensions": {"jupyter_cleverthis": True}}}


@pytest.fixture(autouse=True)
def _no_cluster_of_its_own() -> Iterator[None]:
    """No test starts a Ray cluster inside the pytest process: an implicit `ray.init()` (a `ray.data.from_items`,
    a `.remote()`) boots a second local head beside the run's shared one, which times out on a loaded machine.
    Jobs and helpers reach the shared head through the Job API or processes of their own."""
    yield
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        ray.shutdown()
        pytest.fail("the test started a Ray cluster in the pytest process; use the shared head (ray_cluster)")
