"""The server's loss curves (`GET .../metrics`): every step downsampled, and only what follows a step."""

from __future__ import annotations

from jupyter_cleverthis.service.detail import curves


def _events(n: int) -> list[dict]:
    evs: list[dict] = []
    for s in range(1, n + 1):
        evs.append({"i": len(evs) + 1, "type": "step", "step": s, "loss": 5.0 / (1 + s / 300), "epoch": s / 1000})
        if s % 1000 == 0:
            evs.append({"i": len(evs) + 1, "type": "validation", "step": s, "epoch": s / 1000, "eval_loss": 4.0})
            evs.append({"i": len(evs) + 1, "type": "epoch", "step": s, "epoch": s // 1000, "train_loss": 4.1})
    return evs


def test_a_5000_step_curve_is_whole_from_its_first_step_and_bounded():
    c = curves(_events(5_000), max_points=1000)
    assert c["count"] == 5_000 and c["last_step"] == 5_000 and c["after_step"] is None
    assert 900 <= len(c["step"]) <= 1000 and c["step"][0] == 1 and c["step"][-1] == 5_000
    assert [v["step"] for v in c["validation"]] == [1000, 2000, 3000, 4000, 5000]
    assert c["latest"]["step"] == 5_000


def test_after_step_answers_only_what_follows_it():
    evs = _events(5_010)
    c = curves(evs, max_points=1000, after_step=4_990)
    assert c["step"] == [float(s) for s in range(4_991, 5_011)]
    assert [v["step"] for v in c["validation"]] == [5_000] and [e["step"] for e in c["epochs"]] == [5_000]
    assert c["count"] == 5_010 and c["last_step"] == 5_010 and c["after_step"] == 4_990
    assert curves(evs, after_step=5_010)["step"] == []  # nothing new
