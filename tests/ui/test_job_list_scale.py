"""A 1,000-job list in the sidebar (the jobs request is answered by a fixture: no 1,000 real Ray jobs)."""

from __future__ import annotations

import json
import re
import time

import pytest

pytest.importorskip("playwright.sync_api", reason="playwright is missing (pip install -e '.[dev]')")

from playwright.sync_api import Page, Route, expect  # noqa: E402

from .helpers import assert_no_console_errors, open_training_panel  # noqa: E402

pytestmark = pytest.mark.integration

N = 1000
STATUSES = ["succeeded", "failed", "cancelled", "running", "queued", "initializing"]
JOBS_URL = re.compile(r".*/cleverthis/api/clusters/local/jobs(\?.*)?$")


def summaries(n: int) -> list[dict[str, object]]:
    """Job summaries as the server answers them, newest first (job-0999 newest, job-0000 oldest)."""
    now = time.time()
    jobs = []
    for i in range(n):
        created = now - 3600 - (n - i) * 60
        status = STATUSES[i % len(STATUSES)]
        ended = None if status in ("running", "queued", "initializing") else created + 600
        jobs.append({
            "name": f"bulk-job-{i:04d}", "cluster": "local", "status": status, "ray_status": "SUCCEEDED",
            "job_type": "finetune" if i % 2 else "train", "framework": "torch", "base_model": "tiny",
            "dataset_path": "/datasets/training", "epochs": 3, "batch_size": 32, "workers": 2,
            "owner": f"user{i % 7}", "created_at": created, "started_at": None if status == "queued" else created + 5, "ended_at": ended,
            "elapsed_s": 595.0 if ended else None, "message": None,
        })
    return jobs[::-1]


def test_thousand_job_list_renders_and_scrolls(page: Page, shots, console_errors) -> None:
    body = json.dumps({"jobs": summaries(N)})
    served = []

    def fulfill(route: Route) -> None:
        served.append(time.perf_counter())
        route.fulfill(status=200, content_type="application/json", body=body)

    page.route(JOBS_URL, fulfill)
    t0 = time.perf_counter()
    panel = open_training_panel(page)
    table = panel.locator(".jp-CleverThis-JobTable")
    expect(table).to_have_attribute("aria-rowcount", str(N), timeout=30_000)
    rows = table.locator(".jp-CleverThis-JobTable-row:visible")
    expect(rows.first).to_have_attribute("data-name", "bulk-job-0999")  # newest first
    done = time.perf_counter()
    assert served, "the panel never asked for the job list"
    rendered_ms, after_response_ms = (done - t0) * 1000, (done - served[0]) * 1000
    # Virtualised: only the window around the viewport is in the DOM, not 1,000 rows.
    in_dom = table.locator(".jp-CleverThis-JobTable-row").count()
    assert 0 < in_dom < 100, f"{in_dom} row elements for {N} jobs"
    shots("top")

    viewport = table.locator(".jp-CleverThis-JobTable-viewport")
    t1 = time.perf_counter()
    viewport.evaluate("el => { el.scrollTop = el.scrollHeight; }")
    last = table.locator('.jp-CleverThis-JobTable-row[data-name="bulk-job-0000"]')
    expect(last).to_be_in_viewport()
    scroll_ms = (time.perf_counter() - t1) * 1000
    expect(last.locator(".jp-CleverThis-badge")).to_have_text("succeeded")
    expect(last).to_have_attribute("aria-rowindex", str(N))
    assert table.locator(".jp-CleverThis-JobTable-row").count() < 100
    shots("bottom")

    # A poll later (3 s) the list is still the fixture's, the scroll position kept.
    polls = len(served)
    deadline = time.monotonic() + 10
    while len(served) == polls and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    assert len(served) > polls, "the panel stopped polling the job list"
    expect(last).to_be_in_viewport()
    assert_no_console_errors(console_errors)

    print(f"\n{N}-job list: first render {rendered_ms:.0f} ms after opening the panel "
          f"({after_response_ms:.0f} ms after the response), scroll to the last job {scroll_ms:.0f} ms, "
          f"{in_dom} row elements in the DOM")
