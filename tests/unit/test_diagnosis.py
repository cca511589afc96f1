"""The page's five loss-curve patterns, detected from synthetic step losses with the stated thresholds."""

from __future__ import annotations

import math

import pytest

from jupyter_cleverthis.service.diagnosis import curve_diagnosis, interpret


def _curves() -> dict[str, list[float]]:
    n = 40
    return {
        "smooth": [3.0 * math.exp(-k / 15) + 0.5 for k in range(n)],
        "oscillating": [2.5 + (0.6 if k % 2 else -0.6) for k in range(n)],
        "spiking": [3.0 - 0.05 * k for k in range(n - 2)] + [4.5, 4.8],
        "near_zero": [2.0 * math.exp(-k) for k in range(n)],
        "flat": [2.5 + 0.001 * math.sin(k) for k in range(n)],
    }


@pytest.mark.parametrize("pattern", list(_curves()))
def test_each_pattern_is_found_on_its_curve(pattern):
    found = interpret(_curves()[pattern], total_steps=400)
    assert found is not None and found[0] == pattern, found


def test_advice_is_the_pages_words():
    assert interpret(_curves()["oscillating"], 400)[1] == \
        "Loss oscillating without decrease: learning rate too high; reduce it by 10x."
    assert "max_grad_norm" in interpret(_curves()["spiking"], 400)[1]


def test_too_early_and_near_zero_late_in_the_run():
    assert interpret([2.0] * 7) is None  # fewer than 8 points
    # near zero at the end of the planned steps is a finished fit, not an early warning
    assert interpret(_curves()["near_zero"], total_steps=40)[0] == "smooth"


def test_curve_diagnosis_reads_step_events():
    steps = [{"type": "step", "step": k + 1, "loss": v, "total_steps": 400} for k, v in enumerate(_curves()["flat"])]
    assert curve_diagnosis(steps) == {"pattern": "flat", "advice": interpret(_curves()["flat"], 400)[1],
                                      "points": 40}
    assert curve_diagnosis(steps[:3]) is None


def test_the_job_detail_and_show_carry_the_diagnosis():
    """One source: the service puts it in the detail (REST, the sidebar and the widgets read it there) and
    `%train show` prints the same words."""
    from types import SimpleNamespace

    from jupyter_cleverthis.service.detail import detail_of
    from jupyter_cleverthis.service.runtime_env import spec_json
    from jupyter_cleverthis.spec import JobSpec
    from jupyter_cleverthis.text import detail_text

    spec = JobSpec(name="j", dataset_path="/d")
    info = SimpleNamespace(status="RUNNING", metadata={"owner": "ann"}, start_time=1000, end_time=None,
                           runtime_env={"env_vars": {"CLEVERTHIS_SPEC": spec_json(spec)}}, submission_id="j",
                           job_id=None, message=None)
    steps = [{"src": "rank0", "seq": k + 1, "t": 1.0, "type": "step", "step": k + 1, "loss": v, "total_steps": 400,
              "epoch": (k + 1) / 400}
             for k, v in enumerate(_curves()["oscillating"])]
    d = detail_of("local", info, steps, log_url="http://x")
    assert d.curve.pattern == "oscillating" and d.model_dump(mode="json")["curve"]["points"] == 40
    assert f"loss curve: {d.curve.advice}" in detail_text(d)
    assert detail_of("local", info, steps[:5], log_url="http://x").curve is None


def test_a_loss_that_jumped_above_its_start_is_not_smooth():
    """What a learning rate of 0.9 did to the tiny Llama on the real cluster: 6.3 at the first step, up to 60, and
    back down part of the way. The last third is below the first third, but not below where it started."""
    losses = [6.28, 21.1, 26.3, 59.5, 37.5, 38.5, 30.2, 24.8, 33.1, 19.7, 27.4, 16.9, 22.3, 14.2, 18.8, 12.5, 17.1,
              11.9, 15.6, 12.2]
    found = interpret(losses, total_steps=20)
    assert found is not None and found[0] == "oscillating", found
