"""`python -m bench.scale` (part of `make bench`): how cost grows with work.

- training: tokens/s and peak RSS per worker at 1 and 2 workers (real jobs on a private local Ray cluster);
- the REST job list at 100, 1,000 and 10,000 jobs (a real Jupyter server; Ray played by a fake dashboard);
- event store ingest, per 100k events, as the store grows to 300k;
- pre-flight at 10k and 100k examples (the full pre-flight, and the quick one create runs).

Writes bench/results/scale.md (tables), scale.json and scale.png (one panel per table, matplotlib).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .cases import Context, med

OUT = Path(__file__).resolve().parent / "results"


def training(ctx: Context) -> list[dict[str, Any]]:
    rows = []
    for workers in (1, 2):
        _, evs, _ = ctx.run_job(f"scale-w{workers}-{int(time.time())}", base_model=ctx.model(),
                                dataset_path=str(ctx.data()), epochs=1, batch_size=8, workers=workers,
                                output_dir=str(ctx.tmp / f"scale-ckpt-w{workers}"),
                                cpus_per_worker=1, training_config={"method": "full", "report_to": ["none"]})
        rates = [e["tokens_per_s"] for e in evs if e["type"] == "step" and e.get("tokens_per_s")][5:]
        rss = [e["rss_bytes"] for e in evs if e["type"] == "utilisation" and e.get("rss_bytes")]
        rows.append({"workers": workers, "tokens_per_s": round(med(rates)) if rates else None,
                     "peak_rss_mb_per_worker": round(max(rss) / 1e6) if rss else None})
    return rows


def job_list(ctx: Context) -> list[dict[str, Any]]:
    import requests

    sizes = (100, 1000, 10000)
    fakes = {f"fake{n}": {"address": ctx.fake_ray(n)} for n in sizes}
    server = ctx.jupyter(clusters=fakes)
    headers = {"Authorization": f"token {server['token']}"}
    rows = []
    for n in sizes:
        url = f"http://127.0.0.1:{server['port']}/cleverthis/api/clusters/fake{n}/jobs"
        first = requests.get(url, headers=headers, timeout=120)
        first.raise_for_status()
        assert first.json()["total"] == n
        times = []
        for _ in range(15):
            t = time.perf_counter()
            requests.get(url, headers=headers, timeout=120).raise_for_status()
            times.append((time.perf_counter() - t) * 1000)
        rows.append({"jobs": n, "median_ms": round(med(times), 1),
                     "p95_ms": round(sorted(times)[int(len(times) * 0.95) - 1], 1)})
    return rows


def event_store(ctx: Context) -> list[dict[str, Any]]:
    from cleverthis_runtime.events import to_line
    from jupyter_cleverthis.service.store import EventStore

    store = EventStore(ctx.tmp / "scale-events.sqlite")
    rows, seq, log = [], 0, ""
    for block in range(3):  # 3 x 100k step events; each read hands the store the job's whole log, 1,000 lines more
        dt = 0.0
        for _ in range(100):
            lines = []
            for _ in range(1000):
                seq += 1
                lines.append(to_line({"src": "rank0", "seq": seq, "t": 1.0, "type": "step", "step": seq,
                                      "loss": 1.0 / seq, "learning_rate": 1e-4, "tokens_per_s": 1000.0}))
            log += "\n".join(lines) + "\n"
            t = time.perf_counter()  # the store's time only (not building the text)
            store.ingest("local", "job", log, final=False)
            dt += time.perf_counter() - t
        rows.append({"events_in_store": (block + 1) * 100_000, "seconds_per_100k": round(dt, 2),
                     "events_per_s": round(100_000 / dt)})
    t = time.perf_counter()
    n = len(store.events("local", "job", types=("step",)))
    rows.append({"events_in_store": n, "read_all_s": round(time.perf_counter() - t, 2)})
    return rows


def preflight(ctx: Context) -> list[dict[str, Any]]:
    from cleverthis_runtime.preflight import preflight as run
    from jupyter_cleverthis.spec import JobSpec

    model = ctx.model()
    rows = []
    for n in (10_000, 100_000):
        data = ctx.data(n=n, words=40)
        spec = JobSpec(name="scale-preflight", base_model=model, dataset_path=str(data), workers=1)
        out: dict[str, Any] = {"examples": n}
        for quick in (True, False):
            times = []
            for _ in range(2):
                t = time.perf_counter()
                res = run(spec, quick=quick)
                times.append(time.perf_counter() - t)
                assert not res["errors"], res["errors"]
            out["quick_s" if quick else "full_s"] = round(min(times), 2)
        rows.append(out)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(k) is None else f"{r[k]:,}" if isinstance(r[k], int)
                                        else str(r[k]) for k in keys) + " |")
    return "\n".join(lines)


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(10, 7))
    tr = results["training"]
    ax[0][0].bar([str(r["workers"]) for r in tr], [r["tokens_per_s"] or 0 for r in tr])
    ax[0][0].set(title="training tokens/s", xlabel="workers")
    jl = results["job_list"]
    ax[0][1].plot([r["jobs"] for r in jl], [r["p95_ms"] for r in jl], marker="o")
    ax[0][1].set(title="REST job list p95 (ms)", xlabel="jobs", xscale="log", yscale="log")
    es = [r for r in results["event_store"] if "seconds_per_100k" in r]
    ax[1][0].plot([r["events_in_store"] for r in es], [r["seconds_per_100k"] for r in es], marker="o")
    ax[1][0].set(title="event store: seconds per 100k events", xlabel="events in the store", ylim=(0, None))
    pf = results["preflight"]
    for key in ("quick_s", "full_s"):
        ax[1][1].plot([r["examples"] for r in pf], [r[key] for r in pf], marker="o", label=key[:-2])
    ax[1][1].set(title="pre-flight (s)", xlabel="examples", xscale="log", yscale="log")
    ax[1][1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    results: dict[str, Any] = {}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="cleverthis-scale-") as tmp:
        ctx = Context(Path(tmp))
        try:
            for name, fn in (("job_list", job_list), ("event_store", event_store), ("preflight", preflight),
                             ("training", training)):
                print(f"== {name}", flush=True)
                results[name] = fn(ctx)
                print(f"   {json.dumps(results[name])}", flush=True)
        finally:
            ctx.close()
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    md = [f"# Scale ({when}, {round(time.time() - started)} s)", ""]
    titles = {"training": "Training: tokens/s (steady-state median) and peak RSS per worker",
              "job_list": "REST job list (`GET /clusters/{c}/jobs`), 15 requests each",
              "event_store": "Event store ingest (chunks of 1,000 lines), then one read of every step event",
              "preflight": "Pre-flight (best of 2): quick = what create runs; full = the /plan pre-flight"}
    for name, rows in results.items():
        md += [f"## {titles[name]}", "", table(rows), ""]
    md.append("![scale](scale.png)")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "scale.json").write_text(json.dumps({"when": when, "results": results}, indent=2))
    (OUT / "scale.md").write_text("\n".join(md) + "\n")
    plot(results, OUT / "scale.png")
    print((OUT / "scale.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
