"""The plan's per-worker memory against the measured peak of the same training code, for a full fine-tune, LoRA and
QLoRA (4-bit) of a ~21M-parameter Llama on CPU (memory_peaks.py: one forked process per method, ~10 s each).
tests/integration/test_methods.py checks the same through real Ray jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def test_planned_memory_is_within_a_quarter_of_the_measured_peak(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "runtime"), str(ROOT)]),
           "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(HERE / "memory_peaks.py"), str(tmp_path), "full,lora,qlora"],
                          capture_output=True, text=True, env=env, timeout=600)
    lines = [json.loads(ln.split(" ", 1)[1]) for ln in proc.stdout.splitlines() if ln.startswith("MEMORY ")]
    assert proc.returncode == 0 and len(lines) == 3, (proc.stdout[-3000:], proc.stderr[-5000:])
    by_method = {r["method"]: r for r in lines}
    for method, r in by_method.items():
        planned, peak = r["plan"]["total"], r["peak"]["peak_bytes"] / 1e9
        assert r["peak"]["planned_gb"] == planned  # the event carries the plan's figure
        assert abs(planned - peak) <= 0.25 * peak, (method, r)
        assert 20e6 <= r["parameters"] <= 25e6, r  # a 4-bit weight counts once, not as its packed bytes
    # what the methods keep differs as the plan says: full trains every weight (gradients, AdamW's moments)
    assert by_method["full"]["plan"]["optimizer"] > 20 * by_method["lora"]["plan"]["optimizer"]
    assert by_method["qlora"]["plan"]["weights"] < by_method["lora"]["plan"]["weights"] / 2
