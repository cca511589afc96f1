"""Real-browser fixtures: one `jupyter lab` per run (non-root base_url, token auth) driven by Playwright + Chromium.

The server inherits CLEVERTHIS_HOME from tests/conftest.py, so the `local` cluster it shows is the test run's
own Ray head. Every test leaves screenshots under tests/artifacts/ (also when it fails).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from jupyter_cleverthis.service.clusters import free_port

from .helpers import wait_http

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
BASE_URL = "/lab-base/"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


def _chromium() -> str | None:
    """Debian's Chromium, installed with apt-get when missing and possible (never `playwright install`)."""
    found = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if found:
        return found
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run("apt-get update -qq && apt-get install -y -qq chromium", shell=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=False)
        return shutil.which("chromium")
    return None


@dataclass(frozen=True)
class Lab:
    url: str  # http://127.0.0.1:PORT/lab-base/
    token: str
    root_dir: Path

    def lab_url(self, path: str = "lab") -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.url}{path}{sep}token={self.token}"

    def reset_workspace(self) -> None:
        """Forget the default workspace (JupyterLab's saved layout) through its REST API."""
        req = urllib.request.Request(f"{self.url}lab/api/workspaces/default", method="DELETE",
                                     headers={"Authorization": f"token {self.token}"})
        try:
            urllib.request.urlopen(req, timeout=30).close()
        except urllib.error.HTTPError as e:
            if e.code != 404:  # none saved yet
                raise

    def reset_theme(self) -> None:
        """Back to JupyterLab's default (light) theme: a test that switched to the dark one changed the user's
        settings on the server, and the next test's page would open dark (the sidebar test's theme check then
        saw no change and failed)."""
        req = urllib.request.Request(f"{self.url}lab/api/settings/@jupyterlab/apputils-extension:themes",
                                     method="PUT", data=json.dumps({"raw": "{}"}).encode(),
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=30).close()


@pytest.fixture(autouse=True)
def jp_asyncio_loop() -> None:
    """Replaces pytest-jupyter's autouse loop fixture: Playwright's sync API runs its own loop in this thread."""
    return None


@pytest.fixture(autouse=True)
def jp_server_cleanup() -> None:
    """No in-process jupyter_server here (the lab runs in its own process)."""
    return None


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = _chromium()
    if not path:
        pytest.skip("Chromium is missing and cannot be installed here (needs root and apt-get: `make chromium`)")
    return path


@contextmanager
def run_lab(base: Path, name: str = "jupyter-lab", env: dict[str, str] | None = None) -> Iterator[Lab]:
    """A real `jupyter lab` from this venv on a free loopback port under base_url /lab-base/, its own folders under
    `base`, its output in tests/artifacts/<name>.log; `env` adds to the test run's environment."""
    root_dir, workspaces, settings, runtime = (base / n for n in ("root", "workspaces", "settings", "runtime"))
    for d in (root_dir, workspaces, settings, runtime):
        d.mkdir()
    # Quiet, repeatable runs: no news or update checks, no developer settings or workspaces leaking in.
    notification = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    token, port = secrets.token_hex(16), free_port()
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTER_RUNTIME_DIR=str(runtime), **(env or {}))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log_path = ARTIFACTS / f"{name}.log"
    log = open(log_path, "w")  # noqa: SIM115 (closed at teardown)
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.base_url={BASE_URL}",
         f"--ServerApp.root_dir={root_dir}", f"--LabApp.workspaces_dir={workspaces}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.extension_manager=readonly", "--ServerApp.allow_root=True"],
        cwd=root_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}{BASE_URL}"
    try:
        wait_http(f"{url}api/status?token={token}", proc, "jupyter lab", log_path)
        yield Lab(url=url, token=token, root_dir=root_dir)
    finally:
        proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="session")
def lab(ray_cluster: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The lab most tests use: its `local` cluster is the test run's Ray head."""
    with run_lab(tmp_path_factory.mktemp("lab")) as running:
        yield running


@pytest.fixture(scope="session")
def long_curve_job(ray_cluster: object, tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A succeeded job of 5,000 steps on the test run's head: long_curve_job.py, a Ray job printing the runtime's
    events, stands in for the training runtime (its entrypoint); everything after Ray's log is the product's."""
    import shlex

    from jupyter_cleverthis.service import runtime_env
    from jupyter_cleverthis.service.jobs import JobService
    from jupyter_cleverthis.spec import JobSpec, JobStatus

    script = Path(__file__).with_name("long_curve_job.py")
    name = f"ui-5000-steps-{secrets.token_hex(3)}"
    svc = JobService()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runtime_env, "entrypoint", lambda spec: f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}")
        svc.create(JobSpec(name=name, base_model=tiny_model, dataset_path=str(tmp_path_factory.mktemp("curve-data")),
                           epochs=1, workers=1), check=False)
    final = svc.wait("local", name, timeout=300)
    assert final.status == JobStatus.SUCCEEDED and final.metrics and final.metrics.step == 5000, final
    return name


@pytest.fixture(scope="session")
def browser(chromium_path: str) -> Iterator[Browser]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is missing (pip install -e '.[dev]')")
    sync_playwright = sync_api.sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


class Shots:
    """Numbered screenshots of one test under tests/artifacts/ (`<test>-NN-<what>.png`)."""

    def __init__(self, page: Page, test: str) -> None:
        self.page, self.test = page, test
        self.taken: list[Path] = []
        self._n = 0

    def __call__(self, what: str) -> Path:
        self._n += 1
        path = ARTIFACTS / f"{self.test}-{self._n:02d}-{what}.png"
        self.page.screenshot(path=str(path))
        self.taken.append(path)
        return path


def open_lab_page(browser: Browser, lab: Lab, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh browser context on JupyterLab, started and with the splash gone."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.set_default_timeout(30_000)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    pg.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    request.node.ui_shots = shots = Shots(pg, request.node.name)
    request.node.ui_errors = errors
    try:
        lab.reset_workspace()  # the tabs an earlier test left open (a notebook, its widgets) stay shut
        lab.reset_theme()  # and the theme it chose is not this test's
        pg.goto(lab.lab_url("lab"))
        pg.wait_for_function("() => window.jupyterapp !== undefined", timeout=90_000)
        pg.evaluate("() => window.jupyterapp.started.then(() => window.jupyterapp.restored).then(() => true)")
        pg.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
        # An empty workspace gets a Launcher once JupyterLab has restored, and the Launcher takes the focus: seen
        # taking it from the sidebar test's first keyboard steps on a loaded machine. Let it come first.
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        try:
            pg.wait_for_selector(".jp-Launcher", state="visible", timeout=20_000)
        except PlaywrightTimeout:
            print("no Launcher opened within 20 s")  # the test goes on; its own waits say what is missing
        yield pg
    finally:
        report = getattr(request.node, "rep_call", None)
        try:
            shots("FAILED" if report is None or report.failed else "final")
        except Exception as e:  # the screenshot must never hide the test's own error
            print(f"screenshot failed: {e}")
        (ARTIFACTS / f"{request.node.name}-console.log").write_text("\n".join(errors) + "\n")
        context.close()


@pytest.fixture
def page(browser: Browser, lab: Lab, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh browser context on the shared lab."""
    yield from open_lab_page(browser, lab, request)


def _of_page(request: pytest.FixtureRequest, what: str) -> object:
    """What the test's page fixture (`page`, or one built on open_lab_page) set up; it must come first."""
    value = getattr(request.node, what, None)
    assert value is not None, "name the page fixture before shots and console_errors in the test's arguments"
    return value


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Shots:
    """`shots("what")` saves the page as tests/artifacts/<test>-NN-what.png."""
    return _of_page(request, "ui_shots")  # type: ignore[return-value]


@pytest.fixture
def console_errors(request: pytest.FixtureRequest) -> list[str]:
    """The page's uncaught exceptions and console errors so far (a live list)."""
    return _of_page(request, "ui_errors")  # type: ignore[return-value]
