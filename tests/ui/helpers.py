"""Page helpers shared by the UI tests (what a user does: open the panel, fill the form, run a command)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

PANEL_ID = "jp-CleverThis-training"
# The manual's screenshots (docs/_static/screenshots): the tests save them as they pass each view, and they are
# committed so the docs build without a browser.
DOC_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "_static" / "screenshots"
JOB_DONE_S = 300  # a tiny 2-epoch job takes about a minute on 2 cores; Ray start-up dominates


def wait_http(url: str, proc: Any, what: str, log: Any, timeout_s: float = 120) -> None:
    """Wait until `url` answers 200 while the server process `proc` lives (its output goes to `log`)."""
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer on {url}; see {log}")
        time.sleep(0.3)


def doc_screenshot(page: Page, name: str) -> Path:
    """Save the page as the manual's screenshot `docs/_static/screenshots/<name>.png`."""
    DOC_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = DOC_SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def run_command(page: Page, command: str, args: dict[str, Any] | None = None) -> None:
    """Run a JupyterLab command through the app exposed by `--LabApp.expose_app_in_browser`."""
    page.evaluate("([c, a]) => window.jupyterapp.commands.execute(c, a).then(() => true)", [command, args or {}])


def open_training_panel(page: Page, width: int = 480) -> Locator:
    """Open the Training panel from the left sidebar and drag it wider (job names readable in screenshots)."""
    panel = page.locator(f"#{PANEL_ID}")
    if not panel.is_visible():
        page.locator(f'.jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id="{PANEL_ID}"]').click()
    panel.wait_for(state="visible")
    box = panel.bounding_box()
    if box and box["width"] < width - 10:
        handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle:not(.lm-mod-hidden)").first
        hb = handle.bounding_box()
        if hb:
            y = hb["y"] + hb["height"] / 2
            page.mouse.move(hb["x"] + hb["width"] / 2, y)
            page.mouse.down()
            page.mouse.move(box["x"] + width, y, steps=5)
            page.mouse.up()
    return panel


def field(form: Locator, name: str) -> Locator:
    """The row of a generated form field (`[data-field=name]`)."""
    return form.locator(f'[data-field="{name}"]')


def fill_fields(form: Locator, values: dict[str, Any]) -> None:
    for name, value in values.items():
        field(form, name).locator("input").fill(str(value))


def unique(prefix: str) -> str:
    return f"{prefix}-{int(time.time() * 1000) % 100_000_000}"


def plot_points(plot: Locator) -> int:
    """Points of the first trace of a plotly graph div (its `data`, as drawn)."""
    return int(plot.evaluate("el => (el.data && el.data[0] && el.data[0].x ? el.data[0].x.length : 0)"))


def set_theme(page: Page, theme: str) -> None:
    run_command(page, "apputils:change-theme", {"theme": theme})
    wait_until(page, "t => document.body.dataset.jpThemeName === t", theme, what=f"the theme became {theme}",
               state="() => document.body.dataset.jpThemeName")


def wait_kernel_idle(page: Page, timeout_s: float = 120) -> None:
    """Wait until the current notebook's kernel is connected and idle (the indicator alone can be early)."""
    page.wait_for_function(
        """() => {
            const w = window.jupyterapp.shell.currentWidget;
            const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
            return !!k && k.connectionStatus === 'connected' && k.status === 'idle';
        }""",
        timeout=timeout_s * 1000,
    )


def assert_no_console_errors(errors: list[str], *allowed: str) -> None:
    """No uncaught exception or console error in the page, except those matching the `allowed` regexes."""
    unexpected = [e for e in errors if not any(re.search(a, e) for a in allowed)]
    assert not unexpected, "errors in the browser console:\n" + "\n".join(unexpected)


def job_tab(page: Page, name: str, cluster: str = "local") -> Locator:
    """A job's main-area tab (js/src/jobTab.ts: id jp-CleverThis-job-<cluster>-<name> for names and clusters of
    letters, digits and "-" (a cluster's "-" is escaped), as the tests' are)."""
    return page.locator(f'[id="jp-CleverThis-job-{cluster}-{name}"]')


def tab_badge(tab: Locator) -> Locator:
    """The status badge in a job tab's header."""
    return tab.locator(".jp-CleverThis-JobDetail-header .jp-CleverThis-badge")


def wait_until(page: Page, predicate: str, arg: Any = None, *, what: str, timeout_s: float = 60,
               state: str | None = None) -> None:
    """`page.wait_for_function(predicate, arg)`, failing with what was awaited and, where `state` (a JS function
    of the same `arg`) is given, what the page showed instead: a timeout says which wait, not only "60000ms"."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(predicate, arg=arg, timeout=timeout_s * 1000)
    except PlaywrightTimeout:
        seen = ""
        if state is not None:
            try:
                seen = f"; the page shows {page.evaluate(state, arg)!r}"
            except Exception as err:  # noqa: BLE001 - the page may be gone; the wait's failure is what counts
                seen = f"; its state could not be read ({err})"
        raise AssertionError(f"not within {timeout_s:g} s: {what}{seen}") from None
