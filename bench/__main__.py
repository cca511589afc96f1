"""`make bench`: the product measured against honest baselines, side by side, in one run.

Each figure is a ratio of ours to a baseline measured in the same run, alternating ours/baseline, medians
over repeats. Results: bench/results/latest.md (a table) and bench/results/latest.json.
Run a subset with `python -m bench P1 P4`. Bounded to ~15 minutes on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results"

GOALS = {
    "P1": ("runtime steady-state tokens/s vs plain Trainer (1 worker, 2 CPUs)", ">= 0.93", lambda r: r >= 0.93),
    "P2": ("real tokens/s of the default batching (the plan's pick) vs padding (vs length-grouped)",
           ">= 1.5 (>= 1.0)", lambda r: r >= 1.5),
    "P3": ("submit -> first step vs minimal TorchTrainer job (time ratio)", "<= 1.3", lambda r: r <= 1.3),
    "P4": ("tokenize (+pack) throughput vs one batched tokenizer call", ">= 0.8", lambda r: r >= 0.8),
    "P5": ("log line -> websocket client p95 vs Ray's own tail", "<= 1.2 s and <= Ray's", None),
    "P6": ("loss-curve update bytes vs full resend (100k points)", "<= 1 %; <= 20 ms", None),
    "P7": ("REST job list with 1,000 jobs, p95", "<= 100 ms", None),
    "P8": ("atomic checkpoint save vs raw safetensors save (time ratio)", "<= 1.1", lambda r: r <= 1.1),
    "P9": ("submit -> first step and peak worker memory, 1,000,000 vs 10,000 examples (time ratio)",
           "<= 1.5 and <= 2 GiB", None),
    "P10": ("pre-training tokens/s on packed raw text vs plain Trainer on the same blocks", ">= 0.93",
            lambda r: r >= 0.93),
}


def main(argv: list[str]) -> int:
    import signal

    from . import cases

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the private Ray cluster is stopped (finally)
    wanted = [a.upper() for a in argv] or list(GOALS)
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="cleverthis-bench-") as tmp:
        ctx = cases.Context(Path(tmp))
        try:
            for pid in wanted:
                fn = getattr(cases, pid.lower(), None)
                if fn is None:
                    results[pid] = {"status": "not measured", "note": "no benchmark for this id"}
                    continue
                print(f"== {pid}: {GOALS[pid][0]}", flush=True)
                t0 = time.time()
                try:
                    res = fn(ctx)
                except cases.NotMeasured as e:
                    res = {"status": "not measured", "note": str(e)}
                res["seconds"] = round(time.time() - t0, 1)
                results[pid] = res
                print(f"   {json.dumps(res)[:400]}", flush=True)
        finally:
            ctx.close()
    meta = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": f"{os.cpu_count()} CPUs, {platform.machine()}",
            "python": platform.python_version(), "total_s": round(time.time() - started, 1), "ran": wanted}
    for res in results.values():
        res.setdefault("when", meta["when"])
    if argv:  # a subset: the other ids keep their last results, each with the date it was measured
        results = {**_previous(), **results}
    (OUT / "latest.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    (OUT / "latest.md").write_text(render(meta, results))
    print((OUT / "latest.md").read_text())
    return 0


def _previous() -> dict[str, Any]:
    try:
        old = json.loads((OUT / "latest.json").read_text())
    except (OSError, ValueError):
        return {}
    when = old.get("meta", {}).get("when", "")
    return {pid: {"when": when, **r} for pid, r in old.get("results", {}).items()}


def render(meta: dict[str, Any], results: dict[str, Any]) -> str:
    lines = [f"# Benchmarks ({meta['when']}, {meta['machine']}, {meta['total_s']} s; ran: "
             f"{', '.join(meta.get('ran') or results)})", "",
             "| id | what | ours | baseline | ratio | goal | met | measured |", "|---|---|---|---|---|---|---|---|"]
    for pid, (what, goal, check) in GOALS.items():
        r = results.get(pid)
        if r is None:
            continue
        if r.get("status") == "not measured":
            lines.append(f"| {pid} | {what} | - | - | - | {goal} | not measured: {r['note']} | {r.get('when', '')} |")
            continue
        ratio = r.get("ratio")
        met = r.get("met")
        if met is None and check is not None and ratio is not None:
            met = check(ratio)
        lines.append(f"| {pid} | {what} | {r.get('ours', '')} | {r.get('baseline', '')} | "
                     f"{'' if ratio is None else f'{ratio:.3f}'} | {goal} | {'yes' if met else 'NO'} | "
                     f"{r.get('when', '')} |")
    lines.append("")
    for pid, r in results.items():
        if r.get("detail"):
            lines.append(f"- **{pid}**: {r['detail']}")
    return "\n".join(lines) + "\n"


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
