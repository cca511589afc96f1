"""The notebook widgets in a real JupyterLab: CreateJobForm creates a job, LossCurve and JobView follow it."""

from __future__ import annotations

import re
import time

import nbformat
import pytest

pytest.importorskip("playwright.sync_api", reason="playwright is missing (pip install -e '.[dev]')")

from playwright.sync_api import Locator, Page, expect  # noqa: E402

from .helpers import (  # noqa: E402
    JOB_DONE_S,
    assert_no_console_errors,
    doc_screenshot,
    field,
    fill_fields,
    plot_points,
    run_command,
    set_theme,
    unique,
    wait_kernel_idle,
    wait_until,
)

pytestmark = pytest.mark.integration

CELLS = [
    "%load_ext jupyter_cleverthis",
    "from jupyter_cleverthis.widgets import CreateJobForm, LossCurve, JobView",
    "form = CreateJobForm(); form",
    "LossCurve(form.job)",
    "JobView(form.job)",
]
BADGE = ".jp-CleverThis-JobDetail-header .jp-CleverThis-badge"


def run_cell(notebook: Locator, index: int) -> Locator:
    """Select a cell, run it with Shift+Enter as a user would, wait for its execution count; returns the cell."""
    cell = notebook.locator(".jp-Cell").nth(index)
    cell.locator(".jp-InputArea-prompt").click()
    cell.page.keyboard.press("Shift+Enter")
    expect(cell.locator(".jp-InputArea-prompt")).to_have_text(re.compile(r"\[\d+\]"), timeout=120_000)
    return cell


def test_widgets_create_follow_and_detail(page: Page, shots, console_errors, lab, tiny_model, dataset,
                                         long_curve_job) -> None:
    # and a 5,000-step job: `%train show` (the job view) and the curve `%train` shows, whole
    long_cells = [f"%train show {long_curve_job}", f"from jupyter_cleverthis import Job; LossCurve(Job.attach({long_curve_job!r}))"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in CELLS + long_cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, lab.root_dir / "widgets.ipynb")

    run_command(page, "docmanager:open", {"path": "widgets.ipynb"})
    panel = page.locator(".jp-NotebookPanel").filter(has=page.locator(".jp-Notebook"))
    notebook = panel.locator(".jp-Notebook")
    expect(notebook.locator(".jp-Cell")).to_have_count(len(CELLS) + len(long_cells))
    wait_kernel_idle(page)

    for i in range(3):
        run_cell(notebook, i)
    form_cell = notebook.locator(".jp-Cell").nth(2)
    form = form_cell.locator(".jp-OutputArea-output .jp-CleverThis-CreateJobForm")
    expect(form).to_be_visible(timeout=60_000)
    expect(form.get_by_role("tab")).to_have_text(["Training", "Fine-tuning"])
    expect(field(form, "epochs").locator("input")).to_have_value("3")
    shots("form")

    name = unique("ui-nb")
    name_input = field(form, "name").locator("input")
    name_input.click()
    name_input.press_sequentially(name)  # real key presses: notebook shortcuts must not fire in the widget
    fill_fields(form, {"base_model": tiny_model, "dataset_path": dataset, "epochs": 2, "batch_size": 8, "workers": 1})
    expect(name_input).to_have_value(name)
    expect(notebook.locator(".jp-Cell")).to_have_count(len(CELLS) + len(long_cells))
    form_cell.locator(".jp-CleverThis-createSubmit").click()

    # The widget turns into the created job's detail (once the kernel has run the pre-flight and submitted).
    badge = form_cell.locator(BADGE)
    expect(form_cell.locator(".jp-CleverThis-JobDetail-name")).to_be_visible(timeout=180_000)
    expect(form_cell.locator(".jp-CleverThis-JobDetail-name")).to_have_text(name)
    expect(form).to_be_hidden()
    expect(form_cell.locator(".jp-CleverThis-formError:visible")).to_have_count(0)
    expect(badge).to_be_visible()
    shots("form-job-created")
    seen = [badge.inner_text()]
    deadline = time.monotonic() + JOB_DONE_S
    while seen[-1] not in ("running", "succeeded", "failed", "cancelled") and time.monotonic() < deadline:
        page.wait_for_timeout(500)
        if (status := badge.inner_text()) != seen[-1]:
            seen.append(status)
    assert seen[-1] in ("running", "succeeded"), f"status went {seen}"
    assert len(seen) > 1, f"status never changed from {seen[0]}"
    print(f"CreateJobForm widget status: {' -> '.join(seen)}")
    shots("form-job-running")

    curve_cell = run_cell(notebook, 3)
    plot = curve_cell.locator(".js-plotly-plot").first
    expect(plot).to_be_visible(timeout=60_000)
    wait_until(page, "el => el.data && el.data[0] && el.data[0].x && el.data[0].x.length > 0",
               plot.element_handle(), what="the widget's curve has its first points", timeout_s=JOB_DONE_S,
               state="el => el.data && el.data[0] && el.data[0].x ? el.data[0].x.length : null")
    first_points = plot_points(plot)
    shots("loss-curve")

    detail_cell = run_cell(notebook, 4)
    detail = detail_cell.locator(".jp-CleverThis-JobDetail")
    expect(detail.locator(".jp-CleverThis-JobDetail-name")).to_be_visible(timeout=60_000)
    expect(detail.locator(".jp-CleverThis-JobDetail-name")).to_have_text(name)
    expect(detail_cell.locator(BADGE)).to_have_text("succeeded", timeout=JOB_DONE_S * 1000)
    expect(detail.locator(".jp-CleverThis-JobDetail-checkpointList li")).to_have_count(2)
    expect(detail.locator(".jp-CleverThis-LogView-text")).not_to_have_class(re.compile("jp-mod-empty"))
    expect(badge).to_be_visible()
    expect(badge).to_have_text("succeeded")  # the form's own view followed the job to the end
    expect(curve_cell.locator(".jp-CleverThis-curveStatus")).to_contain_text("succeeded", timeout=30_000)
    final_points = plot_points(plot)
    assert final_points >= max(first_points, 10), (first_points, final_points)
    curve_cell.scroll_into_view_if_needed()
    shots("loss-curve-final")
    detail_cell.scroll_into_view_if_needed()
    shots("job-detail")
    doc_screenshot(page, "notebook-job")
    # The dark theme: the curve paints no background of its own, so it sits on the notebook's dark one.
    set_theme(page, "JupyterLab Dark")
    curve_cell.scroll_into_view_if_needed()
    backgrounds = plot.evaluate("el => [...el.querySelectorAll('.main-svg')].map(s => getComputedStyle(s).backgroundColor)")
    assert backgrounds and all(b in ("rgba(0, 0, 0, 0)", "transparent") for b in backgrounds), backgrounds
    # plotly draws a transparent plot area as fill rgb(0, 0, 0) with fill-opacity 0
    assert plot.locator("rect.bg").first.evaluate("r => getComputedStyle(r).fillOpacity") == "0"
    shots("loss-curve-dark")

    # The 5,000-step job in both notebook front-ends: every point the server sends, from step 1 to 5,000.
    for index, selector in ((len(CELLS), ".jp-CleverThis-LossCurve-plot"), (len(CELLS) + 1, ".js-plotly-plot")):
        cell = run_cell(notebook, index)
        long_plot = cell.locator(selector).first
        expect(long_plot).to_be_visible(timeout=60_000)
        wait_until(page, "el => el.data && el.data[0] && el.data[0].x && el.data[0].x.at(-1) === 5000",
                   long_plot.element_handle(), what=f"the curve in {selector} reaches step 5,000",
                   state="el => el.data && el.data[0] && el.data[0].x ? el.data[0].x.slice(-3) : null")
        xs = long_plot.evaluate("el => Array.from(el.data[0].x)")
        assert xs[0] == 1 and 1000 <= len(xs) <= 2000 and xs == sorted(xs), (selector, xs[:3], len(xs))
        cell.scroll_into_view_if_needed()
        shots(f"curve-5000-steps-{'view' if index == len(CELLS) else 'magic'}")
    # Every widget above shares one parse of the front-end bundle (widgets/bundle.py): the page holds one module.
    assert page.evaluate("() => globalThis.__jupyterCleverthisWidgets.size") == 1
    assert_no_console_errors(console_errors)
