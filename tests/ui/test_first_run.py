"""A new user's first run, in a JupyterLab of its own whose `local` cluster is stopped: start it from the sidebar
(offered by Create Job), run a job, get notified when it ends, create a second job from the first, export a spec,
be notified of a job a notebook started while the sidebar is closed, and stop the cluster. No notebook is opened
in the browser; the notebook job runs in a real kernel (`jupyter execute`), as a user's notebook would run it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api", reason="playwright is missing (pip install -e '.[dev]')")

from playwright.sync_api import Browser, Locator, Page, expect  # noqa: E402

from .conftest import ARTIFACTS, Lab, open_lab_page, run_lab  # noqa: E402
from .helpers import (  # noqa: E402
    JOB_DONE_S,
    assert_no_console_errors,
    field,
    fill_fields,
    job_tab,
    open_training_panel,
    tab_badge,
    unique,
)

pytestmark = pytest.mark.integration

START_MS = 240_000  # a Ray head, its dashboard and job agent on a loaded 2-core machine
PREFLIGHT_MS = 180_000


@pytest.fixture(scope="module")
def first_run_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A CLEVERTHIS_HOME of its own: its `local` cluster is stopped until the sidebar starts it. Whatever the
    test leaves running is stopped by its pid."""
    from jupyter_cleverthis.service.clusters import LocalCluster

    home = tmp_path_factory.mktemp("first-run-home")
    try:
        yield home
    finally:
        LocalCluster("local", home).down()


@pytest.fixture(scope="module")
def first_run_lab(first_run_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with run_lab(tmp_path_factory.mktemp("first-run-lab"), "jupyter-lab-first-run",
                 env={"CLEVERTHIS_HOME": str(first_run_home)}) as lab:
        yield lab


@pytest.fixture
def fresh_page(browser: Browser, first_run_lab: Lab, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from open_lab_page(browser, first_run_lab, request)


def toast(page: Page, text: str) -> Locator:
    """A JupyterLab notification saying `text`."""
    return page.locator(".jp-Notification-Toast-success, .jp-Notification-Toast-info, .jp-Notification-Toast-error",
                        has_text=text)


def run_notebook_job(home: Path, spec: dict[str, object], work: Path) -> None:
    """A notebook that creates a job with %%train, executed in a real kernel (no --wait: it ends once submitted)."""
    import yaml

    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "display_name": "py"}},
          "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": src} for i, src in enumerate(["%load_ext jupyter_cleverthis",
                                                              "%%train\n" + yaml.safe_dump(spec)])]}
    path = work / "first-run-job.ipynb"
    path.write_text(json.dumps(nb))
    env = dict(os.environ, CLEVERTHIS_HOME=str(home))
    out = subprocess.run([str(Path(sys.executable).parent / "jupyter"), "execute", str(path)], env=env, cwd=work,
                         capture_output=True, text=True, timeout=600)
    (ARTIFACTS / "first-run-notebook.log").write_text(out.stdout + out.stderr)
    assert out.returncode == 0, out.stderr[-2000:]


def test_first_run_from_a_stopped_cluster(fresh_page: Page, shots, console_errors, first_run_home, tiny_model,
                                          dataset, tmp_path) -> None:
    page = fresh_page
    panel = open_training_panel(page)

    # Stopped: the panel says so in words, with Start, and no red box.
    expect(panel.locator(".jp-CleverThis-clusterSelect option:checked")).to_have_text("local (stopped)")
    empty = panel.locator(".jp-CleverThis-clusterEmpty")
    expect(empty).to_contain_text("The cluster \u201clocal\u201d is stopped.")
    expect(empty.get_by_role("button", name="Start local")).to_be_visible()
    expect(panel.locator(".jp-CleverThis-errorBar")).to_be_hidden()
    expect(panel.locator(".jp-CleverThis-clusterAction")).to_have_text("Start")
    expect(panel.locator(".jp-CleverThis-dashboardLink")).to_be_hidden()
    shots("stopped")

    # Create Job on the stopped cluster offers to start it; the header shows the progress, then the form opens.
    panel.get_by_role("button", name="Create Job").click()
    page.get_by_role("button", name="Start cluster").click()
    progress = panel.locator(".jp-CleverThis-clusterProgress")
    expect(progress).to_be_visible()
    expect(progress).to_contain_text("Starting \u201clocal\u201d")
    shots("starting")
    dialog = page.locator(".jp-CleverThis-CreateJobDialog")
    expect(dialog.locator(".jp-CleverThis-SchemaForm").first).to_be_visible(timeout=START_MS)
    expect(progress).to_be_hidden()
    expect(panel.locator(".jp-CleverThis-clusterStatus")).to_have_attribute("data-status", "running")
    expect(empty).to_be_hidden()
    link = panel.locator(".jp-CleverThis-dashboardLink")
    expect(link).to_be_visible()
    href = link.get_attribute("href") or ""
    assert href.endswith("/cleverthis/proxy/local/"), href
    # the link goes through the server's authenticated proxy: the browser's session reaches the Ray dashboard
    version = page.request.get(href + "api/version")
    assert version.ok and "ray_version" in version.json(), version.text()[:300]

    # A bad name: words, not the expression.
    fill_fields(dialog, {"name": "bad/name"})
    dialog.locator(".jp-Dialog-footer").get_by_role("button", name="Create").click()
    name_error = field(dialog, "name").locator(".jp-CleverThis-fieldError")
    expect(name_error).to_have_text(re.compile(r"^Use letters, digits, '\.', '_' or '-', starting and ending"))
    assert "[" not in name_error.inner_text()

    # The first job, from the sidebar: the user is told when it ends.
    first = unique("first-run")
    fill_fields(dialog, {"name": first, "base_model": tiny_model, "dataset_path": dataset, "epochs": 1,
                         "batch_size": 8, "workers": 1})
    dialog.locator(".jp-Dialog-footer").get_by_role("button", name="Create").click()
    expect(dialog).to_be_hidden(timeout=PREFLIGHT_MS)
    first_tab = job_tab(page, first)
    expect(first_tab.locator(".jp-CleverThis-JobDetail-name")).to_have_text(first)
    shots("first-job")
    done = toast(page, f"Training job \u201c{first}\u201d succeeded.")
    expect(done).to_be_visible(timeout=JOB_DONE_S * 1000)
    shots("first-job-notified")

    # Create from this job: the form holds its spec under a new name; the copy runs (and is cancelled at once).
    first_tab.locator(".jp-CleverThis-JobDetail-clone").click()
    dialog = page.locator(".jp-CleverThis-CreateJobDialog")
    expect(dialog.locator(".jp-CleverThis-SchemaForm").first).to_be_visible()
    copy = f"{first}-2"
    expect(field(dialog, "name").locator("input")).to_have_value(copy)
    expect(field(dialog, "base_model").locator("input")).to_have_value(tiny_model)
    expect(field(dialog, "dataset_path").locator("input")).to_have_value(str(dataset))
    expect(field(dialog, "epochs").locator("input")).to_have_value("1")
    expect(field(dialog, "batch_size").locator("input")).to_have_value("8")
    expect(dialog.get_by_role("tab", name="Fine-tuning")).to_have_attribute("aria-selected", "true")
    shots("clone-form")
    # its own checkpoint folder (the data's checkpoints/ holds the first job's)
    fill_fields(dialog, {"output_dir": tmp_path / "copy-checkpoints"})
    dialog.locator(".jp-Dialog-footer").get_by_role("button", name="Create").click()
    expect(dialog).to_be_hidden(timeout=PREFLIGHT_MS)
    copy_tab = job_tab(page, copy)
    expect(copy_tab.locator(".jp-CleverThis-JobDetail-name")).to_have_text(copy)

    # Export: the copy's spec as YAML that %%train reads.
    copy_tab.locator(".jp-CleverThis-JobDetail-export").click()
    yaml_box = page.locator(".jp-Dialog .jp-CleverThis-exportYaml")
    expect(yaml_box).to_contain_text(f"name: {copy}")
    import yaml

    exported = yaml.safe_load(yaml_box.inner_text())
    assert exported["base_model"] == tiny_model and exported["epochs"] == 1 and exported["batch_size"] == 8
    shots("export")
    page.locator(".jp-Dialog").get_by_role("button", name="Close").click()

    # Save as template: the Create Job form offers it, and a choice fills the form (not the job's name).
    copy_tab.locator(".jp-CleverThis-JobDetail-template").click()
    page.locator(".jp-Dialog input").fill("first-run-template")
    page.locator(".jp-Dialog").get_by_role("button", name="Ok").click()
    expect(toast(page, "Template \u201cfirst-run-template\u201d saved")).to_be_visible()
    assert (first_run_home / "templates" / "first-run-template.yaml").exists()
    panel.get_by_role("button", name="Create Job").click()
    dialog = page.locator(".jp-CleverThis-CreateJobDialog")
    expect(dialog.locator(".jp-CleverThis-SchemaForm").first).to_be_visible()
    fill_fields(dialog, {"name": "typed-name"})
    dialog.locator(".jp-CleverThis-CreateJobForm-template").select_option("first-run-template")
    expect(field(dialog, "base_model").locator("input")).to_have_value(tiny_model)
    expect(field(dialog, "output_dir").locator("input")).to_have_value(str(tmp_path / "copy-checkpoints"))
    expect(field(dialog, "name").locator("input")).to_have_value("typed-name")
    shots("template-chosen")
    dialog.locator(".jp-Dialog-footer").get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()

    copy_tab.locator(".jp-CleverThis-JobDetail-cancel").click()
    page.get_by_role("button", name="Cancel job").click()
    expect(toast(page, f"Training job \u201c{copy}\u201d was cancelled.")).to_be_visible(timeout=120_000)

    # A job a notebook starts while the sidebar is closed: the notification comes anyway, and Open shows it.
    page.evaluate("() => window.jupyterapp.commands.execute('application:toggle-left-area')")
    expect(panel).to_be_hidden()
    from_nb = unique("first-run-nb")
    run_notebook_job(first_run_home, {"name": from_nb, "base_model": tiny_model, "dataset_path": str(dataset),
                                      "epochs": 1, "batch_size": 8, "workers": 1,
                                      "output_dir": str(tmp_path / "nb-checkpoints")}, tmp_path)
    nb_done = toast(page, f"Training job \u201c{from_nb}\u201d succeeded.")
    expect(nb_done).to_be_visible(timeout=JOB_DONE_S * 1000)
    expect(panel).to_be_hidden()
    shots("notebook-job-notified")
    nb_done.get_by_role("button", name="Open").click()
    nb_tab = job_tab(page, from_nb)
    expect(nb_tab.locator(".jp-CleverThis-JobDetail-name")).to_have_text(from_nb)
    expect(tab_badge(nb_tab)).to_have_text("succeeded")
    shots("notebook-job-opened")

    assert_no_console_errors(console_errors)

    # Stop: confirmed, then the panel is back to its first words.
    panel = open_training_panel(page)
    panel.locator(".jp-CleverThis-clusterAction").click()
    page.get_by_role("button", name="Stop cluster").click()
    expect(empty).to_contain_text("The cluster \u201clocal\u201d is stopped.", timeout=120_000)
    expect(panel.locator(".jp-CleverThis-clusterAction")).to_have_text("Start")
    expect(panel.locator(".jp-CleverThis-errorBar")).to_be_hidden()
    shots("stopped-again")
    # A request in flight as the cluster stops may be refused; nothing else may go wrong.
    assert_no_console_errors(console_errors, r"Failed to load resource: the server responded with a status of 409")
