"""The loss-curve diagnosis on real tiny jobs, where a pattern can be provoked: a learning rate of almost
nothing leaves the loss flat, one far too high makes it oscillate or spike. Both jobs run side by side on the real
local Ray cluster; the service reads their step losses and says what the page says, and `%train show` prints it."""

from __future__ import annotations

import pytest

from jupyter_cleverthis.service.diagnosis import PATTERNS, advice
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import JobSpec, JobStatus
from jupyter_cleverthis.text import detail_text

# serial: its two jobs run in the serial stage, which runs beside the browser tests with time to spare, instead of
# in the CPU-bound parallel stage that sets the length of `make test`
pytestmark = [pytest.mark.integration, pytest.mark.serial]

#: tag -> (training_config, the patterns the page predicts for it)
RUNS = {
    "tiny-lr": ({"method": "lora", "learning_rate": 1e-9}, {"flat"}),
    "huge-lr": ({"method": "full", "learning_rate": 0.9}, {"oscillating", "spiking"}),
}


def test_a_learning_rate_near_zero_is_flat_and_one_far_too_high_oscillates(ray_cluster, tiny_model, dataset,
                                                                           job_name):
    svc = JobService()
    for tag, (config, _) in RUNS.items():
        svc.create(JobSpec(name=f"{job_name}-{tag}", base_model=tiny_model, dataset_path=str(dataset), epochs=1,
                           batch_size=8, workers=1, training_config=config,
                           output_dir=str(dataset.parent / f"checkpoints-{tag}")), owner="tester")
    for tag, (_, expected) in RUNS.items():
        final = svc.wait("local", f"{job_name}-{tag}", poll=1.0, timeout=900)
        assert final.status == JobStatus.SUCCEEDED, (tag, final.error)
        losses = [e["loss"] for e in svc.events("local", final.name) if e["type"] == "step" and e.get("loss") is not None]
        assert final.curve is not None and final.curve.points == len(losses) >= 8, (tag, final.curve)
        assert final.curve.pattern in expected, (tag, final.curve.pattern, losses)
        assert final.curve.advice == advice(final.curve.pattern)
        seen, what = PATTERNS[final.curve.pattern]
        assert seen in detail_text(final) and what in detail_text(final)  # what `%train show` prints
