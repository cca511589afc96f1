"""A team on a real JupyterHub (jupyterhub from PyPI, configurable-http-proxy from npm, DummyAuthenticator,
SimpleLocalProcessSpawner, all on loopback) sharing the test run's Ray cluster, in Chromium: alice creates a job
in her sidebar under /user/alice/, bob's sidebar lists it with owner alice and refuses his Cancel, alice's Cancel
works, and the Ray token is in no response either of them receives."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api", reason="playwright is missing (pip install -e '.[dev]')")

from playwright.sync_api import Browser, Page, expect  # noqa: E402

from jupyter_cleverthis.service.clusters import free_ports  # noqa: E402

from .conftest import ARTIFACTS  # noqa: E402
from .helpers import JOB_DONE_S, job_tab, open_training_panel, tab_badge, unique, wait_http  # noqa: E402
from .test_sidebar import BADGE, create_job, job_row  # noqa: E402

pytestmark = pytest.mark.integration
VENV_BIN = Path(sys.executable).parent
PASSWORD = "team-password"


def _proxy() -> str:
    """configurable-http-proxy, installed by `make install` (npm) into ~/.cache/cleverthis/chp."""
    found = shutil.which("configurable-http-proxy") or str(
        Path.home() / ".cache" / "cleverthis" / "chp" / "node_modules" / ".bin" / "configurable-http-proxy")
    assert os.path.exists(found), "configurable-http-proxy is missing: run `make install`"
    return found


@pytest.fixture(scope="module")
def hub(ray_cluster, cleverthis_home: Path, tmp_path_factory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("hub")
    port, api_port, hub_port = free_ports(3)
    for user in ("alice", "bob"):
        (base / "home" / user).mkdir(parents=True)
    settings = base / "lab-settings"
    note = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    note.parent.mkdir(parents=True)
    note.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env_for_users = {
        "CLEVERTHIS_HOME": str(cleverthis_home),  # the same cluster and event store for the whole team
        "HF_HUB_OFFLINE": "1", "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
    }
    (base / "jupyterhub_config.py").write_text(f"""
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.command = [{_proxy()!r}]
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {PASSWORD!r}
c.Authenticator.allow_all = True
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(base / "home" / "{username}")!r}
c.Spawner.cmd = [{str(VENV_BIN / "jupyterhub-singleuser")!r}]
c.Spawner.default_url = "/lab"
c.Spawner.args = ["--ServerApp.allow_root=True", "--LabApp.expose_app_in_browser=True",
                  "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
c.Spawner.environment = {env_for_users!r}
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
c.JupyterHub.db_url = "sqlite:///{base / 'hub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(base / "cookie_secret")!r}
c.ConfigurableHTTPProxy.pid_file = {str(base / "proxy.pid")!r}
c.JupyterHub.cleanup_servers = True
""")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = open(ARTIFACTS / "jupyterhub.log", "w")  # noqa: SIM115 (closed at teardown)
    proc = subprocess.Popen([str(VENV_BIN / "jupyterhub"), "-f", str(base / "jupyterhub_config.py")], cwd=base,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/hub/api/", proc, "jupyterhub", ARTIFACTS / "jupyterhub.log")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)  # the hub stops the users' servers and the proxy (cleanup_servers)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


def _login(browser: Browser, hub: str, user: str, seen: list[str]) -> Page:
    """A browser of the user's own: log in, wait for their server's JupyterLab; every response body is kept."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()

    def keep(resp) -> None:  # noqa: ANN001
        try:
            seen.append(resp.text())
        except Exception:  # redirects and streamed bodies have none
            pass

    page.on("response", keep)
    page.goto(f"{hub}/hub/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", PASSWORD)
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_url(f"**/user/{user}/lab**", timeout=180_000)
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=120_000)
    page.evaluate("() => window.jupyterapp.started.then(() => window.jupyterapp.restored).then(() => true)")
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=120_000)
    return page


def test_two_users_share_the_cluster_and_own_their_jobs(browser, hub, ray_cluster, tiny_model, dataset,
                                                        stop_at_end) -> None:
    seen: list[str] = []
    alice = _login(browser, hub, "alice", seen)
    try:
        panel_a = open_training_panel(alice)
        name = unique("hub-alice")
        stop_at_end.append(name)
        create_job(alice, panel_a, {"name": name, "base_model": tiny_model, "dataset_path": dataset, "epochs": 3000,
                                    "batch_size": 4, "workers": 1})
        tab_a = job_tab(alice, name)
        expect(tab_badge(tab_a)).to_have_text("running", timeout=JOB_DONE_S * 1000)
        alice.screenshot(path=str(ARTIFACTS / "hub-01-alice-running.png"))

        bob = _login(browser, hub, "bob", seen)
        try:
            panel_b = open_training_panel(bob)
            row = job_row(panel_b, name)
            expect(row).to_be_visible(timeout=60_000)
            expect(row.locator(".jp-CleverThis-JobTable-cell-owner")).to_have_text("alice")  # the hub identity, not a random id
            mine = panel_b.locator(".jp-CleverThis-mineFilter")
            mine.check()
            expect(row).to_be_hidden()  # not bob's
            mine.uncheck()
            row.click()
            tab_b = job_tab(bob, name)
            tab_b.locator(".jp-CleverThis-JobDetail-cancel").click()
            # the answer is an error bar, not a page: no navigation to wait for (under load that wait timed out)
            bob.get_by_role("button", name="Cancel job").click(no_wait_after=True)
            bar = tab_b.locator(".jp-CleverThis-errorBar")
            # a round trip through the hub's proxy to bob's server and Ray: seconds on a loaded machine
            expect(bar).to_contain_text(f"job '{name}' belongs to alice: only alice (or an admin", timeout=60_000)
            expect(tab_badge(tab_b)).to_have_text("running")
            bob.screenshot(path=str(ARTIFACTS / "hub-02-bob-refused.png"))
        finally:
            bob.context.close()

        tab_a.locator(".jp-CleverThis-JobDetail-cancel").click()
        alice.get_by_role("button", name="Cancel job").click()
        expect(tab_badge(tab_a)).to_have_text("cancelled", timeout=120_000)
        expect(job_row(panel_a, name).locator(BADGE)).to_have_text("cancelled")
        alice.screenshot(path=str(ARTIFACTS / "hub-03-alice-cancelled.png"))
    finally:
        alice.context.close()
    token = ray_cluster.auth_token()
    assert token and seen and not [s for s in seen if token in s]
