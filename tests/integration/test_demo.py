"""`make demo` end to end against the test run's cluster: the fine-tuned answers are non-empty and differ from the
base model's, and the loss curve is written beside the checkpoints. Marked `bench` (a 16-epoch job): `make bench`
runs it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.bench]
DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def test_demo_shows_what_fine_tuning_changed(ray_cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CLEVERTHIS_DEMO_DIR", str(tmp_path))
    spec = importlib.util.spec_from_file_location("demo", DEMO)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    assert demo.main() == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "fine-tuned:" in line]
    assert len(rows) == len(demo.ASKED)
    for q, line in zip(demo.ASKED, rows, strict=True):
        assert line.strip().startswith(q)
        before = line.split("base: ", 1)[1].split(" fine-tuned: ")[0].strip()
        after = line.split("fine-tuned: ", 1)[1].strip()
        assert after not in ("''", before), line
    assert "fine-tuned: 'Paris'" in out  # the tiny model learned the capitals it was taught
    curve = tmp_path / "datasets" / "capitals" / "checkpoints" / "loss.png"
    assert curve.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"loss curve: {curve}" in out and "CleverThis icon in the left sidebar" in out
