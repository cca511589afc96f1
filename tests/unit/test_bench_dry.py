"""bench/gpu.sh's dry run: the GPU benchmark's whole path (LoRA padded and packed, QLoRA 4-bit, the plan beside the
peak, DDP-vs-one-process parity) on a tiny model on CPU, so the script a lent GPU runs cannot rot unseen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_bench_dry_run_takes_the_whole_path(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path)}
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu.sh"), "--dry-run"], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-5000:]
    res = json.loads((tmp_path / "gpu-dry.json").read_text())
    assert res["dry_run"] is True and res["params"] > 0
    for run in ("lora_bf16_padded", "lora_bf16_packed", "qlora_4bit_packed"):
        r = res[run]
        assert "error" not in r, r
        assert r["tokens_per_s"] > 0 and 0 < r["mfu"] < 1, r
        assert r["plan"]["total"] == r["planned_mem_gb"] and r["peak_mem_gb"] > 0, r
        assert 0.5 < r["planned_over_peak"] < 2, r  # the runtime's plan and the measured peak, side by side
    parity = res["ddp_parity"]
    assert len(parity["single"]) == len(parity["ddp_2"]) == 5
    assert parity["ok"] and parity["max_abs_diff"] < 1e-3, parity
