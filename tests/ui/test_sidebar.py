"""The Training sidebar in a real JupyterLab: create, watch, inspect and cancel jobs on the test run's cluster."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("playwright.sync_api", reason="playwright is missing (pip install -e '.[dev]')")

from playwright.sync_api import Locator, Page, expect  # noqa: E402

from .helpers import (  # noqa: E402
    JOB_DONE_S,
    assert_no_console_errors,
    doc_screenshot,
    field,
    fill_fields,
    job_tab,
    open_training_panel,
    plot_points,
    run_command,
    set_theme,
    tab_badge,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

BADGE = ".jp-CleverThis-badge"
PREFLIGHT_MS = 180_000  # a create runs a pre-flight Ray job first: seconds when idle, more on a loaded machine


def open_create_dialog(page: Page, panel: Locator) -> Locator:
    panel.get_by_role("button", name="Create Job").click()
    dialog = page.locator(".jp-CleverThis-CreateJobDialog")
    expect(dialog.locator(".jp-CleverThis-SchemaForm").first).to_be_visible()  # the schema has loaded
    return dialog


def create_job(page: Page, panel: Locator, values: dict[str, object]) -> None:
    dialog = open_create_dialog(page, panel)
    fill_fields(dialog, values)
    dialog.locator(".jp-Dialog-footer").get_by_role("button", name="Create").click()
    expect(dialog).to_be_hidden(timeout=PREFLIGHT_MS)  # closes once the server has run the pre-flight and submitted


def job_row(panel: Locator, name: str) -> Locator:
    return panel.locator(f'.jp-CleverThis-JobTable-row[data-name="{name}"]')


def test_sidebar_create_watch_cancel_and_dark_theme(page: Page, shots, console_errors, tiny_model, dataset, lab,
                                                    stop_at_end) -> None:
    panel = open_training_panel(page)
    expect(panel.locator(".jp-CleverThis-clusterStatus")).to_have_attribute("data-status", "running")
    expect(panel.locator(".jp-CleverThis-clusterSelect option:checked")).to_have_text("local (running)")
    shots("panel")

    # The Create Job dialog: both tabs and the page's defaults.
    dialog = open_create_dialog(page, panel)
    expect(dialog.get_by_role("tab")).to_have_text(["Training", "Fine-tuning"])
    for name, default in {"epochs": "3", "batch_size": "32", "base_model": "meta-llama/Llama-2-7b-hf",
                          "dataset_path": "/datasets/training"}.items():
        expect(field(dialog, name).locator("input")).to_have_value(default)
    expect(field(dialog, "epochs").locator("label")).to_have_text("Epochs")
    expect(field(dialog, "batch_size").locator("label")).to_have_text("Batch Size")
    expect(field(dialog, "base_model").locator("label")).to_have_text("Base Model")
    expect(field(dialog, "dataset_path").locator("label")).to_have_text("Dataset Path")
    dialog.get_by_role("tab", name="Training", exact=True).click()
    expect(dialog.get_by_role("tab", name="Training", exact=True)).to_have_attribute("aria-selected", "true")
    dialog.get_by_role("tab", name="Fine-tuning").click()
    expect(dialog.get_by_role("tab", name="Fine-tuning")).to_have_attribute("aria-selected", "true")
    shots("create-dialog")
    # The keyboard: arrows move between the tabs; Tab stays inside the modal; Escape gives the focus back.
    dialog.get_by_role("tab", name="Fine-tuning").focus()
    page.keyboard.press("ArrowLeft")
    expect(dialog.get_by_role("tab", name="Training", exact=True)).to_be_focused()
    expect(dialog.get_by_role("tab", name="Training", exact=True)).to_have_attribute("aria-selected", "true")
    page.keyboard.press("ArrowRight")
    expect(dialog.get_by_role("tab", name="Fine-tuning")).to_be_focused()
    expect(dialog.get_by_role("tab", name="Fine-tuning")).to_have_attribute("aria-selected", "true")
    create_button = dialog.locator(".jp-Dialog-footer").get_by_role("button", name="Create")
    create_button.focus()
    page.keyboard.press("Tab")  # past the last element: back to the first, still in the dialog
    assert page.evaluate("() => !!document.activeElement.closest('.jp-CleverThis-CreateJobDialog')")
    page.keyboard.press("Shift+Tab")
    expect(create_button).to_be_focused()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(panel.get_by_role("button", name="Create Job")).to_be_focused()
    dialog = open_create_dialog(page, panel)

    # The advanced options: training_config as grouped fields with choices, each where it applies, and JSON.
    dialog.locator("summary", has_text="Advanced (training_config.json)").click()
    advanced = dialog.locator(".jp-CleverThis-TrainingConfigForm")
    expect(advanced.locator("fieldset legend")).to_have_text(
        ["Method", "LoRA", "Precision, strategy, DeepSpeed and model parallelism", "Optimisation", "Data and validation",
         "Checkpoints", "Tracking and runtime"])
    method = field(advanced, "method").locator("select")
    expect(method.locator("option")).to_have_text(["\u2014", "full", "lora", "qlora"])
    expect(field(advanced, "lora_r")).to_be_visible()  # an automatic method picks LoRA for a fine-tune
    expect(field(advanced, "quantization")).to_be_hidden()
    method.select_option(label="qlora")
    expect(field(advanced, "quantization")).to_be_visible()
    method.select_option(label="full")
    expect(field(advanced, "lora_r")).to_be_hidden()
    expect(field(advanced, "quantization")).to_be_hidden()
    method.select_option(label="\u2014")
    field(advanced, "lora_r").locator("input").fill("8")
    advanced.locator(".jp-CleverThis-jsonToggle").check()
    tc_json = advanced.locator("textarea.jp-CleverThis-configJson")
    expect(tc_json).to_be_visible()
    assert json.loads(tc_json.input_value()) == {"lora_r": 8}  # only what was set, not ~30 defaults
    advanced.locator(".jp-CleverThis-jsonToggle").uncheck()
    expect(field(advanced, "lora_r").locator("input")).to_have_value("8")
    shots("create-dialog-advanced")
    # The Sweep section: the parameters the model allows, each as values or a range (nothing is sent until one is
    # chosen: the jobs below are plain jobs).
    dialog.locator("summary", has_text="Sweep (Ray Tune)").click()
    sweep = dialog.locator(".jp-CleverThis-SweepForm")
    expect(sweep.get_by_label("Sweep parameter 1").locator("option")).to_have_count(8)
    sweep.get_by_label("mode 1").select_option("range")
    expect(sweep.get_by_label("min 1")).to_be_visible()
    expect(sweep.get_by_label("values 1")).to_be_hidden()
    sweep.get_by_label("mode 1").select_option("values")
    shots("create-dialog-sweep")

    # Invalid values: each error under its own field, and the dialog stays open.
    fill_fields(dialog, {"name": "bad/name", "epochs": 0})
    dialog.locator(".jp-Dialog-footer").get_by_role("button", name="Create").click()
    expect(field(dialog, "epochs").locator(".jp-CleverThis-fieldError")).to_have_text(re.compile("at least 1"))
    expect(field(dialog, "name").locator(".jp-CleverThis-fieldError")).to_have_text(re.compile("^Use letters, digits"))
    expect(field(dialog, "batch_size").locator(".jp-CleverThis-fieldError")).to_have_count(0)
    expect(dialog).to_be_visible()
    shots("create-dialog-errors")
    # An error only the server finds (its pre-flight on the cluster): a 422 shown under that field.
    missing = dataset.parent / "missing"
    fill_fields(dialog, {"name": unique("ui-missing"), "epochs": 1, "base_model": tiny_model,
                         "dataset_path": missing, "workers": 1})
    expect(field(dialog, "name").locator(".jp-CleverThis-fieldError")).to_have_count(0)  # cleared on input
    dialog.locator(".jp-Dialog-footer").get_by_role("button", name="Create").click()
    expect(field(dialog, "dataset_path").locator(".jp-CleverThis-fieldError")).to_contain_text(
        str(missing), timeout=PREFLIGHT_MS)
    expect(dialog).to_be_visible()
    shots("create-dialog-server-error")
    # A dataset broken on one line, in a folder this server shows: the error offers that line in the editor.
    broken = lab.root_dir / unique("broken-data")
    broken.mkdir()
    rows = (dataset / "train.jsonl").read_text().splitlines()
    (broken / "train.jsonl").write_text("\n".join(rows[:2] + ['{"instruction": "q", "output": 3}'] + rows[2:]) + "\n")
    fill_fields(dialog, {"dataset_path": broken})
    dialog.locator(".jp-Dialog-footer").get_by_role("button", name="Create").click()
    data_error = field(dialog, "dataset_path").locator(".jp-CleverThis-fieldError")
    expect(data_error).to_contain_text("line 3: instruction format needs a string 'output'", timeout=PREFLIGHT_MS)
    expect(data_error.locator(".jp-CleverThis-dataLine-text")).to_have_text('{"instruction": "q", "output": 3}')
    shots("create-dialog-data-line")
    data_error.get_by_role("button", name="Open at line 3").click()
    expect(dialog).to_be_hidden()  # the modal steps aside for the editor
    expect(page.locator("#jp-main-dock-panel .jp-FileEditor .cm-editor")).to_be_visible()
    cursor_line = """() => { const w = window.jupyterapp.shell.currentWidget;
        const e = w && w.content && w.content.editor;
        return e ? e.getLine(e.getCursorPosition().line) : null; }"""
    # the cursor on the bad line (the editor opens first, its text arrives after: wait for the line, not the editor)
    bad_line = '{"instruction": "q", "output": 3}'
    wait_until(page, f"() => ({cursor_line})() === {json.dumps(bad_line)}",
               what="the editor opened on the dataset's file, its cursor on the bad line", timeout_s=30,
               state=f"() => ({{tab: String(window.jupyterapp.shell.currentWidget?.title.label), line: ({cursor_line})()}})")
    shots("data-line-in-editor")
    dialog = open_create_dialog(page, panel)  # the form comes back as it was set aside
    expect(field(dialog, "dataset_path").locator("input")).to_have_value(str(broken))
    expect(field(dialog, "base_model").locator("input")).to_have_value(tiny_model)
    # The pre-flight plan previews the first examples as the model sees them, the trained tokens highlighted.
    fill_fields(dialog, {"dataset_path": dataset})
    dialog.get_by_role("button", name="Pre-flight plan").click()
    preview = dialog.locator(".jp-CleverThis-preview")
    expect(preview.locator("li")).to_have_count(5, timeout=PREFLIGHT_MS)
    first = preview.locator("li").first
    expect(first.locator("mark.jp-CleverThis-trained").first).to_be_visible()
    expect(first.locator(".jp-CleverThis-previewHead")).to_contain_text(re.compile(r"\d+ of \d+ tokens trained"))
    prompt = "".join(first.locator(".jp-CleverThis-untrained").all_inner_texts())
    answer = "".join(first.locator("mark.jp-CleverThis-trained").all_inner_texts())
    assert "<|assistant|>" in prompt and "<|assistant|>" not in answer and answer.strip()  # the prompt has no loss
    expect(dialog.locator('tr[data-key="chat_template"]')).to_contain_text("the model's own template")
    first.scroll_into_view_if_needed()
    shots("create-dialog-preview")
    doc_screenshot(page, "create-dialog")
    dialog.locator(".jp-Dialog-footer").get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()

    # A short job: it opens in a main-area tab, its row appears in the sidebar and reaches succeeded; the tab has
    # logs, loss points and checkpoints.
    short = unique("ui-short")
    create_job(page, panel, {"name": short, "base_model": tiny_model, "dataset_path": dataset, "epochs": 2,
                             "batch_size": 8, "workers": 1})
    tab = job_tab(page, short)
    expect(tab.locator(".jp-CleverThis-JobDetail-name")).to_have_text(short)  # the main area shows the new job
    expect(panel.locator(".jp-CleverThis-JobDetail")).to_have_count(0)  # the sidebar keeps the list
    row = job_row(panel, short)
    expect(row).to_be_visible()
    shots("short-job-row")
    expect(row.locator(BADGE)).to_have_text("succeeded", timeout=JOB_DONE_S * 1000)
    shots("short-job-succeeded")
    detail = tab.locator(".jp-CleverThis-JobDetail")
    expect(tab_badge(tab)).to_have_text("succeeded")
    expect(detail.locator(".jp-CleverThis-JobDetail-checkpointList li")).to_have_count(2)
    expect(detail.locator(".jp-CleverThis-JobDetail-checkpointList")).to_contain_text("epoch-1")
    expect(detail.locator(".jp-CleverThis-JobDetail-checkpointList")).to_contain_text("epoch-2")
    # each worker's latest resource use (every worker reports one at each epoch's end)
    expect(detail.locator('section[data-section="utilisation"] tr')).to_have_count(1)
    expect(detail.locator('section[data-section="utilisation"] tr')).to_contain_text(re.compile(r"rank 0 .*CPU \d+ %"))
    logs = detail.locator(".jp-CleverThis-LogView-text")
    expect(logs).not_to_have_class(re.compile("jp-mod-empty"))
    assert len(logs.inner_text().splitlines()) > 5
    plot = detail.locator(".jp-CleverThis-LossCurve-plot")
    expect(plot.locator(".scatterlayer .trace path.js-line")).to_have_count(1)
    step_cell = detail.locator('.jp-CleverThis-JobDetail-progress tr[data-key="Step"] td')
    # The curve and the progress table are fetched apart: wait until both show the job's last step.
    wait_until(page, "([el, cell]) => el.data && el.data[0].x.length > 0"
               " && el.data[0].x.length === Number(cell.textContent.replace(/,/g, ''))",
               [plot.element_handle(), step_cell.element_handle()],
               what="the curve's points and the progress table's last step agree",
               state="([el, cell]) => ({points: el.data ? el.data[0].x.length : null, step: cell.textContent})")
    last_step = int(step_cell.inner_text().replace(",", ""))
    assert last_step >= 10
    steps = plot_points(plot)  # one point per step the job reported
    # Drawn, not just passed to plotly (plotly drops nearly collinear vertices, so not one per point).
    assert plot.locator(".scatterlayer .trace path.js-line").get_attribute("d").count("L") >= steps // 2
    # a curve one can read: the main area's width, not the sidebar's
    assert (plot.bounding_box() or {"width": 0})["width"] > 600
    # the service's reading of the curve, in the page's words, under it
    hint = detail.locator(".jp-CleverThis-JobDetail-curveHint")
    expect(hint).to_have_attribute("data-pattern", re.compile("^(smooth|oscillating|spiking|near_zero|flat)$"))
    expect(hint.locator(".jp-CleverThis-JobDetail-curveAdvice")).to_have_text(re.compile(
        r"^Loss (decreasing smoothly|oscillating without decrease|decreasing then spiking|near zero very quickly"
        r"|not decreasing at all): "))
    detail.locator('section[data-section="checkpoints"]').scroll_into_view_if_needed()
    shots("short-job-detail")
    doc_screenshot(page, "job-tab")

    # Try it: chat with a checkpoint, generated on the cluster: the browser reads the answer token by token from the
    # server's stream (newline-delimited JSON pieces; the view showing each piece as it comes is a vitest test).
    detail.locator('li[data-checkpoint="epoch-2"]').get_by_role("button", name="Try it").click()
    chat = detail.locator(".jp-CleverThis-JobDetail-tryIt")
    expect(chat.locator(".jp-CleverThis-JobDetail-tryIt-title")).to_have_text(re.compile("^Try epoch-2"))
    chat.get_by_label("Prompt").fill("Tell me about rivers")
    chat.get_by_label("max new tokens").fill("16")
    chat.get_by_label("temperature").fill("1")
    # Sampled at temperature 1, the trained tiny model may end its answer after one token (it learned to stop): a
    # one-token answer cannot show streaming, so ask again, at most three times, for one of two tokens or more.
    for _ask in range(3):
        with page.expect_response(lambda r: "/chat" in r.url and r.request.method == "POST",
                                  timeout=PREFLIGHT_MS) as response:
            chat.get_by_role("button", name="Ask").click()
        status = chat.get_by_role("status")
        expect(status).to_have_text(re.compile(r"^epoch-2: .*\d+ tokens"), timeout=PREFLIGHT_MS)
        assert response.value.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.value.text().splitlines() if line.strip()]
        pieces = [x["text"] for x in lines if x["type"] == "text"]
        answer = chat.locator(".jp-CleverThis-JobDetail-tryIt-answer").inner_text()
        assert "".join(pieces) == lines[-1]["answers"][0]["text"], lines
        assert answer.strip() == "".join(pieces).strip()
        # an answer of two text tokens or more (the last of new_tokens may be the end token) ends the asking
        if len(pieces) >= 2 or lines[-1]["answers"][0]["new_tokens"] > 2:
            break
    assert len(pieces) >= 2, lines  # pieces as generated, not one block at the end
    shots("try-it")
    doc_screenshot(page, "try-it")

    # A long job: a second tab beside the first; wait until running, cancel from its tab, see cancelled.
    long = unique("ui-long")  # its own checkpoint folder: the data's checkpoints/ belongs to the short job
    stop_at_end.append(long)
    create_job(page, panel, {"name": long, "base_model": tiny_model, "dataset_path": dataset, "epochs": 1000,
                             "batch_size": 4, "workers": 1, "output_dir": dataset.parent / "long-checkpoints"})
    long_tab = job_tab(page, long)
    expect(long_tab.locator(".jp-CleverThis-JobDetail-name")).to_have_text(long)
    expect(tab_badge(long_tab)).to_have_text("running", timeout=JOB_DONE_S * 1000)
    # a slow-throughput hint while it runs: one worker, no data parallelism
    expect(long_tab.locator('.jp-CleverThis-JobDetail-hint[data-kind="one_worker"]')).to_contain_text(
        "One worker: the job does not use data parallelism", timeout=60_000)
    shots("long-job-running")
    doc_screenshot(page, "sidebar")
    # The cluster's nodes from the sidebar: the head, its free CPUs, and the long job's worker holding one.
    panel.locator(".jp-CleverThis-nodes-summary").click()
    head = panel.locator(".jp-CleverThis-nodes-row").first
    expect(head.locator("td").first).to_have_text("127.0.0.1 (head)", timeout=60_000)  # loaded when opened
    # the long job alone: an earlier test's failed job may still be releasing its CPU (for minutes, while Ray's
    # controller retries its worker group), which would change the suggestions below
    expect(head.locator(".jp-CleverThis-nodes-heldBy")).to_have_text(f"{long} (1 CPU)", timeout=JOB_DONE_S * 1000)
    shots("nodes")
    # A job that asks for more than is free: queued, and its tab says what blocks it, node by node, and what
    # would let it start (the long job holds one of the head's 6 CPUs).
    queued = unique("ui-queued")
    create_job(page, panel, {"name": queued, "base_model": tiny_model, "dataset_path": dataset, "epochs": 1,
                             "batch_size": 8, "workers": 6, "output_dir": dataset.parent / "queued-checkpoints"})
    queued_tab = job_tab(page, queued)
    why = queued_tab.locator(".jp-CleverThis-JobDetail-queued")
    expect(why.locator(".jp-CleverThis-JobDetail-queuedMessage")).to_have_text(re.compile(
        r"^Why queued: needs 6 workers \u00d7 1 CPU with PACK; node 127\.0\.0\.1 \(head\) has [0-5] free CPUs? "
        rf"\(.*1 used by job {long}.*\)$"), timeout=JOB_DONE_S * 1000)
    expect(why.locator(".jp-CleverThis-JobDetail-queuedSuggestions li")).to_contain_text(
        ["fewer workers: 5 would start now", f"wait for job {long} to end"])
    shots("queued-job-why")
    queued_tab.locator(".jp-CleverThis-JobDetail-cancel").click()
    page.get_by_role("button", name="Cancel job").click()
    expect(tab_badge(queued_tab)).to_have_text("cancelled", timeout=120_000)
    job_row(panel, long).click()  # back to the long job's tab, as a user would from the list
    expect(long_tab).to_be_visible()
    long_tab.locator(".jp-CleverThis-JobDetail-cancel").click()
    page.get_by_role("button", name="Cancel job").click()  # JupyterLab's confirmation dialog
    expect(tab_badge(long_tab)).to_have_text("cancelled", timeout=120_000)
    expect(long_tab.locator(".jp-CleverThis-JobDetail-cancel")).to_be_disabled()
    shots("long-job-cancelled")

    # Compare from the sidebar: Ctrl+click marks the two jobs, "Compare" overlays their curves in a tab and
    # lists where their settings differ.
    job_row(panel, short).click(modifiers=["Control"])
    marks = panel.locator(".jp-CleverThis-marks")
    expect(marks).to_contain_text("1 job marked")
    job_row(panel, long).click(modifiers=["Control"])
    expect(marks).to_contain_text("2 jobs marked")
    expect(job_row(panel, short)).to_have_class(re.compile("jp-mod-marked"))
    marks.get_by_role("button", name="Compare").click()
    compare = page.locator("#jp-main-dock-panel .jp-CleverThis-CompareTab")
    expect(compare).to_be_visible()
    compare_plot = compare.locator(".jp-CleverThis-LossCurve-plot")
    expect(compare_plot.locator(".scatterlayer .trace").first).to_be_visible(timeout=30_000)
    names = compare_plot.evaluate("el => el.data.map(t => [t.name, t.x.length])")
    assert [n for n, _ in names] == [short, long] and names[0][1] == last_step, names  # one curve per job
    diff = compare.locator(".jp-CleverThis-compare-diff")
    expect(diff.locator("thead th")).to_have_text(["setting", short, long])
    expect(diff.locator('tr[data-key="epochs"] td')).to_have_text(["epochs", "2", "1000"])
    expect(diff.locator('tr[data-key="batch_size"] td')).to_have_text(["batch_size", "8", "4"])
    expect(diff.locator('tr[data-key="output_dir"]')).to_contain_text("long-checkpoints")
    shots("compare-two-jobs")
    doc_screenshot(page, "compare")
    page.locator(".lm-TabBar-tab", has_text="Compare").locator(".lm-TabBar-tabCloseIcon").click()
    expect(compare).to_have_count(0)
    marks.get_by_role("button", name="Clear").click()
    expect(marks).to_be_hidden()

    # Both tabs survive a reload: JupyterLab's layout restorer opens them again.
    main_tabs = page.locator("#jp-main-dock-panel .lm-TabBar-tab .lm-TabBar-tabLabel")
    expect(main_tabs.filter(has_text=short)).to_have_count(1)
    expect(main_tabs.filter(has_text=long)).to_have_count(1)
    # the workspace is saved shortly after a layout change: wait until it holds both tabs
    saved_workspace = """async names => {
            const s = window.jupyterapp.serviceManager.serverSettings;
            const r = await fetch(s.baseUrl + 'lab/api/workspaces/default', {credentials: 'same-origin'});
            const text = await r.text();
            return names.every(n => text.includes('cleverthis-job:local/' + n));
        }"""
    wait_until(page, saved_workspace, [short, long], what="JupyterLab saved a workspace with both job tabs",
               state="""async () => { const s = window.jupyterapp.serviceManager.serverSettings;
                   const r = await fetch(s.baseUrl + 'lab/api/workspaces/default', {credentials: 'same-origin'});
                   return (await r.text()).match(/cleverthis-job:[^"]*/g); }""")
    page.reload()
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=90_000)
    page.evaluate("() => window.jupyterapp.started.then(() => window.jupyterapp.restored).then(() => true)")
    expect(main_tabs.filter(has_text=short)).to_have_count(1)
    expect(main_tabs.filter(has_text=long)).to_have_count(1)
    expect(tab_badge(job_tab(page, long))).to_have_text("cancelled")
    shots("tabs-restored")
    panel = open_training_panel(page)

    # A quick look in the dark theme: the panel and the loss curve follow it.
    job_row(panel, short).click()  # back to the short job's tab
    tab = job_tab(page, short)
    expect(tab).to_be_visible()
    plot = tab.locator(".jp-CleverThis-LossCurve-plot")
    expect(plot.locator(".scatterlayer .trace")).to_have_count(1)
    light_font = plot.locator(".xtick text").first.evaluate("el => getComputedStyle(el).fill")
    try:
        set_theme(page, "JupyterLab Dark")
        wait_until(page, "([el, before]) => { const t = el.querySelector('.xtick text');"
                   " return t && getComputedStyle(t).fill !== before; }",
                   [plot.element_handle(), light_font], what="the loss curve's text changed colour with the theme",
                   state="([el]) => { const t = el.querySelector('.xtick text');"
                   " return {fill: t && getComputedStyle(t).fill, shown: el.getClientRects().length > 0,"
                   " font: getComputedStyle(document.body).getPropertyValue('--jp-ui-font-color1')}; }")
        bg = panel.evaluate("el => getComputedStyle(el).backgroundColor")
        assert _luminance(bg) < 0.3, f"panel background {bg} is not dark"
        dark_font = plot.locator(".xtick text").first.evaluate("el => getComputedStyle(el).fill")
        assert _luminance(dark_font) > 0.6, f"loss curve text {dark_font} is not light on the dark theme"
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)  # the theme's splash
        shots("dark-theme")
    finally:
        set_theme(page, "JupyterLab Light")
    # The one expected error: the 422 answer to the spec with the missing dataset.
    assert_no_console_errors(console_errors, r"status of 422 \(Unprocessable")


def _luminance(css_color: str) -> float:
    r, g, b = (float(x) for x in re.findall(r"\d+(?:\.\d+)?", css_color)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def test_a_5000_step_job_draws_its_whole_curve(page: Page, shots, console_errors, long_curve_job) -> None:
    """A 5,000-step job's curve in its tab, whole from its first step: the server downsamples it to at
    most 2,000 points (MinMaxLTTB keeps the first and the last), the tab draws every one of them."""
    open_training_panel(page)
    run_command(page, "cleverthis:open-job", {"cluster": "local", "name": long_curve_job})
    tab = job_tab(page, long_curve_job)
    expect(tab_badge(tab)).to_have_text("succeeded", timeout=60_000)
    expect(tab.locator('.jp-CleverThis-JobDetail-progress tr[data-key="Step"] td')).to_have_text(re.compile("^5,?000$"))
    plot = tab.locator(".jp-CleverThis-LossCurve-plot")
    wait_until(page, "el => el.data && el.data[0].x.length > 0 && el.data[0].x.at(-1) === 5000",
               plot.element_handle(), what="the curve reaches step 5,000",
               state="el => el.data && el.data[0].x.slice(-3)")
    xs = plot.evaluate("el => el.data[0].x")
    assert xs[0] == 1 and 1000 <= len(xs) <= 2000 and xs == sorted(xs), (xs[:3], len(xs))
    assert plot.locator(".scatterlayer .trace path.js-line").get_attribute("d").count("L") >= 500  # drawn, not just held
    tab.scroll_into_view_if_needed()
    shots("curve-5000-steps")
    assert_no_console_errors(console_errors)
