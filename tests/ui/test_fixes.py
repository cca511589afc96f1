"""A failed job's fixes in the browser: the page's "Retry with ..." buttons, each opening the create form
with its change. The job is real: the training runtime on the test run's head, with torch's out-of-memory error
raised in its second step (as tests/integration/test_faults.py does: a CPU has no CUDA allocator to exhaust)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api", reason="playwright is missing (pip install -e '.[dev]')")

from playwright.sync_api import Page, expect  # noqa: E402

from .helpers import (  # noqa: E402
    assert_no_console_errors,
    field,
    job_tab,
    open_training_panel,
    run_command,
    tab_badge,
    unique,
)

pytestmark = pytest.mark.integration
FIXES = ["Retry with QLoRA", "Retry with half the batch size", "Retry with gradient checkpointing",
         "Retry with ZeRO-3"]


def _out_of_memory_job(tiny_model: str, dataset: Path) -> str:
    from jupyter_cleverthis.service.jobs import JobService
    from jupyter_cleverthis.spec import JobSpec, JobStatus

    name = unique("ui-oom")
    orig = JobService._runtime_env

    def env(self, spec):
        out = orig(self, spec)
        out["env_vars"]["CLEVERTHIS_TEST_OOM_AT_STEP"] = "2"
        return out

    svc = JobService()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(JobService, "_runtime_env", env)
        svc.create(JobSpec(name=name, base_model=tiny_model, dataset_path=str(dataset), epochs=1, batch_size=8,
                           workers=1, training_config={"method": "lora", "report_to": ["none"]}), check=False)
    d = svc.wait("local", name, poll=1.0, timeout=300)
    assert d.status == JobStatus.FAILED and d.error_kind == "out_of_memory", (d.status, d.error_kind, d.error)
    return name


def test_out_of_memory_job_offers_retry_buttons_that_fill_the_form(page: Page, shots, console_errors, tiny_model,
                                                                   dataset) -> None:
    name = _out_of_memory_job(tiny_model, dataset)
    open_training_panel(page)
    run_command(page, "cleverthis:open-job", {"cluster": "local", "name": name})
    tab = job_tab(page, name)
    expect(tab_badge(tab)).to_have_text("failed", timeout=30_000)
    expect(tab.locator(".jp-CleverThis-JobDetail-advice")).to_contain_text("QLoRA")
    buttons = tab.locator(".jp-CleverThis-JobDetail-fix")
    expect(buttons).to_have_text(FIXES)
    assert "4-bit" in (buttons.first.get_attribute("title") or "")  # the why, on hover
    shots("fixes")

    # Half the batch size: the form holds the job's spec with batch_size 4, under a new name.
    buttons.nth(1).click()
    dialog = page.locator(".jp-CleverThis-CreateJobDialog")
    expect(field(dialog, "batch_size").locator("input")).to_have_value("4")
    expect(field(dialog, "base_model").locator("input")).to_have_value(tiny_model)
    expect(field(dialog, "dataset_path").locator("input")).to_have_value(str(dataset))
    expect(field(dialog, "name").locator("input")).not_to_have_value(name)
    shots("retry-half-batch")
    dialog.locator(".jp-Dialog-footer").get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()

    # QLoRA: the advanced form shows method qlora and its quantization, batch size unchanged.
    buttons.nth(0).click()
    expect(field(dialog, "batch_size").locator("input")).to_have_value("8")
    dialog.locator("summary", has_text="Advanced (training_config.json)").click()
    advanced = dialog.locator(".jp-CleverThis-TrainingConfigForm")
    expect(field(advanced, "method").locator("select option:checked")).to_have_text("qlora")
    expect(field(advanced, "quantization").locator("select option:checked")).to_have_text("4bit")
    field(advanced, "quantization").scroll_into_view_if_needed()
    shots("retry-qlora")
    dialog.locator(".jp-Dialog-footer").get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert_no_console_errors(console_errors)
