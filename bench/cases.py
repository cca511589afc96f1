"""The benchmark cases (see bench/__main__.py). Each returns {ours, baseline, ratio, detail, ...}."""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

REPEATS = int(os.environ.get("BENCH_REPEATS", "2"))


class NotMeasured(Exception):
    pass


def med(xs: list[float]) -> float:
    return float(statistics.median(xs))


class Context:
    """Shared, lazily built: a private local Ray cluster, a small Llama, long-ish instruction data."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        os.environ["CLEVERTHIS_HOME"] = str(tmp / "home")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self._cluster: Any = None
        self._svc: Any = None

    # -- fixtures ----------------------------------------------------------------------------------------------
    def data(self, n: int = 240, words: int = 120) -> Path:
        d = self.tmp / f"data-{n}-{words}"
        if not d.exists():
            rng = random.Random(0)
            vocab = [w for w in "the a river mountain blue green quick slow data model train loss step epoch token "
                     "cluster node worker batch layer weight value north south light dark stone water".split()]
            d.mkdir(parents=True)
            with open(d / "train.jsonl", "w") as f:
                for _ in range(n):
                    k = rng.randint(words // 4, words * 2)  # long-tailed lengths
                    f.write(json.dumps({"instruction": "Continue the text",
                                        "input": " ".join(rng.choices(vocab, k=8)),
                                        "output": " ".join(rng.choices(vocab, k=k))}) + "\n")
            (d / "training_config.json").write_text(json.dumps({"method": "full", "learning_rate": 1e-4,
                                                                "max_seq_length": 256}))
        return d

    def model(self, hidden: int = 256, layers: int = 4) -> str:
        from cleverthis_runtime.tiny import build_tiny_model

        return build_tiny_model(str(self.tmp / f"model-{hidden}-{layers}"), [str(self.data())], hidden=hidden,
                                layers=layers)

    def service(self) -> Any:
        if self._svc is None:
            from jupyter_cleverthis.service.clusters import LocalCluster
            from jupyter_cleverthis.service.jobs import JobService

            self._cluster = LocalCluster("local", self.tmp / "home")
            self._cluster.up(num_cpus=2)
            self._svc = JobService()
        return self._svc

    def close(self) -> None:
        for proc in getattr(self, "_procs", []):
            proc.terminate()
            proc.wait(timeout=30)
        for srv in getattr(self, "_fakes", []):
            srv.shutdown()
        if self._cluster is not None:
            self._cluster.down()

    def jupyter(self, clusters: dict[str, Any] | None = None) -> dict[str, Any]:
        """A real jupyter_server with the extension, on a free loopback port; token auth."""
        import secrets

        import requests

        from jupyter_cleverthis.service.clusters import free_port

        port, token = free_port(), secrets.token_hex(16)
        cfg_dir = self.tmp / f"jupyter-{port}"
        cfg_dir.mkdir()
        (cfg_dir / "jupyter_server_config.json").write_text(json.dumps(
            {"CleverThisApp": {"clusters": clusters or {}},
             "ServerApp": {"jpserver_extensions": {"jupyter_cleverthis": True}}}))
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(cfg_dir))
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={self.tmp}", "--allow-root"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._procs = [*getattr(self, "_procs", []), proc]
        for _ in range(120):
            try:
                if requests.get(f"http://127.0.0.1:{port}/cleverthis/api/schema",
                                headers={"Authorization": f"token {token}"}, timeout=2).ok:
                    return {"port": port, "token": token}
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise NotMeasured("jupyter server did not start")

    def fake_ray(self, n_jobs: int) -> str:
        """A fake Ray dashboard serving a list of n finished jobs (our metadata, spec in runtime_env)."""
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        spec = json.dumps({"name": "x", "cluster": "fake", "base_model": "m", "dataset_path": "/d",
                           "job_type": "finetune", "framework": "torch", "epochs": 3, "batch_size": 32,
                           "workers": 2})
        jobs = json.dumps([{
            "type": "SUBMISSION", "job_id": f"{i:08x}", "submission_id": f"job-{i:04d}", "driver_info": None,
            "status": ["SUCCEEDED", "FAILED", "STOPPED"][i % 3], "entrypoint": "python -m cleverthis_runtime",
            "message": "done", "error_type": None, "start_time": 1_700_000_000_000 + i * 1000,
            "end_time": 1_700_000_060_000 + i * 1000, "metadata": {"cleverthis": "1", "owner": "bench"},
            "runtime_env": {"env_vars": {"CLEVERTHIS_SPEC": spec}}, "driver_agent_http_address": None,
            "driver_node_id": None, "driver_exit_code": 0,
        } for i in range(n_jobs)]).encode()
        version = json.dumps({"version": "4", "ray_version": "2.60.0", "ray_commit": "x",
                              "session_name": "fake"}).encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                body = version if self.path.startswith("/api/version") else jobs
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self._fakes = [*getattr(self, "_fakes", []), srv]
        return f"http://127.0.0.1:{srv.server_address[1]}"

    def run_job(self, name: str, **spec: Any) -> tuple[Any, list[dict[str, Any]], float]:
        from jupyter_cleverthis.spec import JobSpec

        svc = self.service()
        t_submit = time.time()
        svc.create(JobSpec(name=name, **spec), check=False)
        d = svc.wait("local", name, poll=0.5, timeout=900)
        if d.status.value != "succeeded":
            raise NotMeasured(f"job {name} ended {d.status.value}: {d.error}")
        return d, svc.events("local", name), t_submit


# -- P1 ------------------------------------------------------------------------------------------------------------
def _plain_trainer_tokens_per_s(model_path: str, data: Path, threads: int, batch: int,
                                mode: str = "padded", losses: list[float] | None = None) -> list[float]:
    """transformers Trainer in this process: the P1 baseline (mode "padded"), and P2's three data layouts."""
    import torch
    from datasets import Dataset
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForSeq2Seq,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    from cleverthis_runtime.data import load_dataset, tokenize_all

    torch.set_num_threads(threads)
    set_seed(42)
    tok = AutoTokenizer.from_pretrained(model_path)
    ds = load_dataset(str(data))
    rows, _ = tokenize_all(tok, ds.records(), None, 256)
    collator: Any = DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100)
    trainer_class: Any = Trainer
    if mode == "ours-grouped":  # the runtime's length-grouped order (methods.grouped_sampler, seeded per epoch)
        from cleverthis_runtime import compat, methods

        trainer_class = compat.trainer_class(None, methods.grouped_sampler([len(r["input_ids"]) for r in rows],
                                                                           batch, 42))
    if mode == "packed":
        from trl import pack_dataset

        from cleverthis_runtime.data import PackedCollator

        rows = pack_dataset(Dataset.from_list(rows), 512, strategy="bfd").to_list()  # as rows.packed packs
        collator = PackedCollator(tok.pad_token_id)
        batch = max(1, batch // 2)  # rows of 512 hold about twice the tokens of a padded row here
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.config.use_cache = False
    rates: list[float] = []
    args = TrainingArguments(output_dir=str(data / "plain-out"), per_device_train_batch_size=batch,
                             num_train_epochs=1, learning_rate=1e-4, logging_steps=1, save_strategy="no",
                             report_to="none", use_cpu=True, disable_tqdm=True, seed=42,
                             dataloader_num_workers=0, remove_unused_columns=False,
                             include_num_input_tokens_seen="non_padding",
                             train_sampling_strategy="group_by_length" if mode == "grouped" else "random")
    trainer_class(model=model, args=args, train_dataset=Dataset.from_list(rows), data_collator=collator,
                  callbacks=[_rate_callback(rates, losses)]).train()
    return rates


def _rate_callback(rates: list[float], losses: list[float] | None = None) -> Any:
    """A Trainer callback appending each logged step's non-padding tokens/s to `rates` (and its loss to `losses`)."""
    from transformers import TrainerCallback

    class Rate(TrainerCallback):
        last_t, last_n = 0.0, 0

        def on_train_begin(self, args, state, control, **kw):
            self.last_t = time.time()

        def on_log(self, args, state, control, logs=None, **kw):
            now, n = time.time(), int(state.num_input_tokens_seen or 0)
            rates.append((n - self.last_n) / max(now - self.last_t, 1e-9))
            self.last_t, self.last_n = now, n
            if losses is not None and logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    return Rate()


def _steady(rates: list[float], skip: int = 5) -> float:
    xs = [r for r in rates[skip:] if r]
    return med(xs) if xs else 0.0


def _plain_rates(model: str, data: Path) -> list[float]:
    """The plain Trainer in a fresh process (2 threads, batch 8): its per-step tokens/s."""
    root = [str(Path(__file__).parents[1])]
    code = (f"import sys, json; sys.path[:0] = {root!r}; from bench.cases import _plain_trainer_tokens_per_s as f; "
            f"print('RATES', json.dumps(f({model!r}, __import__('pathlib').Path({str(data)!r}), 2, 8)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return list(json.loads([ln for ln in out.splitlines() if ln.startswith("RATES")][-1][6:]))


def p1(ctx: Context) -> dict[str, Any]:
    """Ours (a Ray Train job of our runtime) against the plain Trainer alone, and three arms that split the gap
    (bench/p1_arms.py): the plain Trainer in a Ray task and as a TorchTrainer loop, and our loop outside Ray."""
    from bench.p1_arms import ours_local, plain_in_ray_task, plain_in_ray_train

    model, data = ctx.model(), ctx.data()
    arms: dict[str, list[float]] = {"ours": [], "baseline": [], "in_ray_worker": [], "in_ray_train": [],
                                    "ours_local": []}
    for k in range(REPEATS):
        _, evs, _ = ctx.run_job(f"bench-p1-{int(time.time())}-{k}", base_model=model, dataset_path=str(data),
                                epochs=1, batch_size=8, workers=1, cpus_per_worker=2,
                                output_dir=str(ctx.tmp / f"ck-p1-{k}"),
                                training_config={"group_by_length": False})  # the baseline's padded batches
        arms["ours"].append(_steady([e.get("tokens_per_s") or 0 for e in evs if e["type"] == "step"]))
        arms["baseline"].append(_steady(_plain_rates(model, data)))
        arms["in_ray_worker"].append(_steady(plain_in_ray_task(ctx, model, data, k)))
        arms["in_ray_train"].append(_steady(plain_in_ray_train(ctx, model, data, k)))
        arms["ours_local"].append(_steady(ours_local(ctx, model, data, k)))
    m = {name: med(xs) for name, xs in arms.items()}
    o, b, w, t, loc = m["ours"], m["baseline"], m["in_ray_worker"], m["in_ray_train"], m["ours_local"]
    return {"ours": f"{o:,.0f} tok/s", "baseline": f"{b:,.0f} tok/s", "ratio": o / b,
            "in_ray_worker": w, "in_ray_train": t, "ours_local": loc, "ray_train_share": t / b,
            "our_code_share": loc / b, "vs_in_ray_train": o / t, "samples": arms,
            "detail": f"P1: median steady-state (steps 6+) non-padding tokens/s over {REPEATS} alternating runs; "
                      "small Llama (hidden 256, 4 layers), batch 8, full fine-tune, 2 threads each. Where the gap "
                      f"goes: the same plain Trainer run by a Ray task (a Ray worker holding 2 CPUs): {w:,.0f} "
                      f"tok/s ({w / b:.2f} of alone); as the train loop of a TorchTrainer (1 worker, 2 CPUs, none of "
                      f"our code): {t:,.0f} tok/s ({t / b:.2f}); our runtime's loop outside Ray: {loc:,.0f} tok/s "
                      f"({loc / b:.2f}). Ours is {o / t:.2f} of the plain Trainer in Ray Train; the two shares "
                      f"multiplied predict {t / b * loc / b:.2f}, measured {o / b:.2f}."}


# -- P3 ------------------------------------------------------------------------------------------------------------
MINIMAL_JOB = textwrap.dedent("""
    import time
    import ray.train
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    def loop(cfg):
        import torch
        model = torch.nn.Linear(4, 1)
        model(torch.zeros(1, 4)).sum().backward()
        print("FIRST_STEP", time.time(), flush=True)

    TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 2})).fit()
""")


def p3(ctx: Context) -> dict[str, Any]:
    model, data = ctx.model(hidden=64, layers=2), ctx.data(n=64, words=20)
    svc = ctx.service()
    script = ctx.tmp / "minimal_job.py"
    script.write_text(MINIMAL_JOB)
    ours, base, phases = [], [], []
    for k in range(REPEATS):
        _, evs, t0 = ctx.run_job(f"bench-p3-{int(time.time())}-{k}", base_model=model, dataset_path=str(data),
                                 epochs=1, batch_size=8, workers=1, cpus_per_worker=2,
                                 output_dir=str(ctx.tmp / f"ck-p3-{k}"))
        first = next(e["t"] for e in evs if e["type"] == "step")
        ours.append(first - t0)
        marks = {e["phase"]: e["t"] for e in evs if e["type"] == "phase"}
        phases.append({p: round(marks[p] - t0, 1) for p in ("initializing", "starting_workers", "loading_data",
                                                           "loading_model", "running") if p in marks}
                      | {"first_step": round(first - t0, 1)})
        client = svc.client("local")
        t1 = time.time()
        sid = client.submit_job(entrypoint=f"python {script}")
        while not str(client.get_job_status(sid)).endswith(("SUCCEEDED", "FAILED", "STOPPED")):
            time.sleep(0.3)
        logs = client.get_job_logs(sid)
        line = [ln for ln in logs.splitlines() if "FIRST_STEP" in ln]
        if not line:
            raise NotMeasured(f"the minimal job printed no first step: {logs[-500:]}")
        base.append(float(line[-1].split("FIRST_STEP")[1].split()[0]) - t1)
    o, b = med(ours), med(base)
    return {"ours": f"{o:.1f} s", "baseline": f"{b:.1f} s", "ratio": o / b, "breakdown": phases,
            "detail": "P3: submit to first training step; ours breakdown (seconds after submit): "
                      + json.dumps(phases[-1])}


# -- P4 ------------------------------------------------------------------------------------------------------------
def p4(ctx: Context) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from cleverthis_runtime.data import (
        ensure_chat_template,
        instruction_to_messages,
        load_dataset,
        tokenize_all,
    )

    tok = AutoTokenizer.from_pretrained(ctx.model())
    ensure_chat_template(tok)
    recs = load_dataset(str(ctx.data(n=2000))).records()
    texts = [tok.apply_chat_template(instruction_to_messages(r), tokenize=False) for r in recs]
    ntok = sum(len(x) for x in tok(texts, add_special_tokens=False)["input_ids"])
    ours, base = [], []
    for _ in range(3):
        t = time.perf_counter()
        tokenize_all(tok, recs, "instruction", 100_000)
        ours.append(len(recs) / (time.perf_counter() - t))
        t = time.perf_counter()
        tok(texts, add_special_tokens=False)
        base.append(len(recs) / (time.perf_counter() - t))
    o, b = med(ours), med(base)
    return {"ours": f"{o:,.0f} ex/s", "baseline": f"{b:,.0f} ex/s", "ratio": o / b,
            "detail": f"P4: 2,000 instruction examples ({ntok:,} tokens); ours renders the chat template and masks "
                      "the prompt tokens; the baseline tokenizes pre-rendered texts in one batched call."}


# -- P6 ------------------------------------------------------------------------------------------------------------
def p6(ctx: Context) -> dict[str, Any]:
    import math

    from jupyter_cleverthis.service.jobs import downsample
    from jupyter_cleverthis.widgets.curve import LossCurve  # noqa: F401 - the consumer of these series

    n, points = 100_000, 800
    rng = random.Random(1)
    x = [float(i) for i in range(n)]
    y = [2.5 * math.exp(-i / 30000) + 0.3 + rng.gauss(0, 0.05) for i in range(n)]
    times = []
    for _ in range(11):
        t = time.perf_counter()
        idx = downsample(x, y, points)
        times.append((time.perf_counter() - t) * 1000)
    update = len(json.dumps({"step": [x[i] for i in idx], "loss": [y[i] for i in idx]}))
    full = len(json.dumps({"step": x, "loss": y}))
    ratio = update / full
    ms = med(times)
    return {"ours": f"{update:,} B, {ms:.1f} ms", "baseline": f"{full:,} B", "ratio": ratio,
            "met": ratio <= 0.01 and ms <= 20,
            "detail": f"P6: a 100k-step loss history downsampled to {points} points (MinMaxLTTB) per update: "
                      f"{ratio:.2%} of a full resend; downsampling median {ms:.1f} ms."}


# -- P8 ------------------------------------------------------------------------------------------------------------
def p8(ctx: Context) -> dict[str, Any]:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from cleverthis_runtime import checkpoints

    model = AutoModelForCausalLM.from_pretrained(ctx.model(hidden=512, layers=8), dtype=torch.float32)
    root = ctx.tmp / "p8"
    ours, base = [], []
    for k in range(9):
        t = time.perf_counter()
        checkpoints.write_checkpoint(str(root), f"epoch-{k}", lambda d: model.save_pretrained(d), {"epoch": k})
        ours.append(time.perf_counter() - t)
        raw = root / f"raw-{k}"
        raw.mkdir(parents=True)
        t = time.perf_counter()
        save_file({k2: v.contiguous() for k2, v in model.state_dict().items()}, str(raw / "model.safetensors"))
        checkpoints.fsync_path(raw / "model.safetensors")  # a durable save: the file, then its folder's entry
        checkpoints.fsync_path(raw)
        base.append(time.perf_counter() - t)
    shutil.rmtree(root, ignore_errors=True)
    o, b = med(ours), med(base)
    size = sum(p.numel() for p in model.parameters()) * 4 / 1e6
    return {"ours": f"{o * 1000:.0f} ms", "baseline": f"{b * 1000:.0f} ms", "ratio": o / b,
            "detail": f"P8: {size:.0f} MB of fp32 weights; ours = save_pretrained into a temp folder + "
                      "checkpoint.json + fsync + rename; baseline = one safetensors save_file, fsync of the file "
                      "and of its folder (a durable save)."}


def _default_batching(model_path: str) -> tuple[str, str]:
    """What the plan picks on this machine for a job of the P2 model with training_config left unset."""
    import psutil
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from cleverthis_runtime import methods
    from cleverthis_runtime.plan import Device, make_plan
    from cleverthis_runtime.spec import TrainingConfig

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
    devices = [Device("cpu", float(psutil.virtual_memory().available))]
    plan = make_plan(params=1e6, devices=devices, workers=1, config=TrainingConfig(),
                     attention=methods.attention(model, devices), packing_refusal=methods.packing_refusal(model))
    return plan.batching, plan.reasons["batching"]


def _padding_share(lengths: list[int], order: list[int], batch: int) -> float:
    """The share of the padded batches' tokens that are padding."""
    total = real = 0
    for k in range(0, len(order), batch):
        b = [lengths[i] for i in order[k:k + batch]]
        total, real = total + len(b) * max(b), real + sum(b)
    return 1 - real / total


def p2(ctx: Context) -> dict[str, Any]:
    """Real (non-padding) tokens/s of what the plan picks by default on this device, against padding in a random
    order and transformers' own length grouping (and packing, for the record)."""
    import torch
    from transformers import AutoTokenizer

    from cleverthis_runtime.data import load_dataset, tokenize_all
    from cleverthis_runtime.methods import grouped_order

    model, data = ctx.model(), ctx.data()
    pick, why = _default_batching(model)
    mode = {"grouped": "ours-grouped", "packed": "packed", "padded": "padded"}[pick]
    results: dict[str, list[float]] = {"ours": [], "padded": [], "grouped": [], "packed": []}
    for _ in range(REPEATS):
        for k in results:
            results[k].append(_steady(_plain_trainer_tokens_per_s(model, data, 2, 8, mode if k == "ours" else k),
                                      skip=3))
    o, d, g, p = (med(results[k]) for k in ("ours", "padded", "grouped", "packed"))
    tok = AutoTokenizer.from_pretrained(model)
    ds = load_dataset(str(data))
    lengths = [len(r["input_ids"]) for r in tokenize_all(tok, ds.records(), None, 256)[0]]
    shuffled = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(0)).tolist()
    waste_padded = _padding_share(lengths, shuffled, 8)
    waste_ours = _padding_share(lengths, grouped_order(lengths, 8, 42, 0, 1, torch), 8)
    return {"ours": f"{o:,.0f} tok/s ({pick})", "baseline": f"{d:,.0f} tok/s (grouped {g:,.0f})", "ratio": o / d,
            "vs_grouped": o / g, "met": o / d >= 1.5 and o / g >= 1.0, "picked": pick,
            "samples": results,
            "detail": f"P2: the plan's default here is {pick} ({why}). Ours/padded {o / d:.2f}, ours/grouped "
                      f"(transformers' group_by_length) {o / g:.2f}, packed/padded {p / d:.2f}. Padding is "
                      f"{waste_padded:.0%} of the padded batches' tokens in a random order and {waste_ours:.0%} in "
                      f"ours, so removing all of it could make padded batches at most {1 / (1 - waste_padded):.2f}x "
                      "faster in real tokens/s at the same cost per token."}


TICKER = "import time\nfor i in range(120):\n    print('TICK', repr(time.time()), flush=True)\n    time.sleep(0.1)\n"


def p5(ctx: Context) -> dict[str, Any]:
    """Log line printed in a job -> received over our server's websocket vs over Ray's own tail websocket."""
    import asyncio

    from tornado import httpclient, websocket

    from jupyter_cleverthis.service.log_stream import STREAM_INTERVAL_S

    svc = ctx.service()
    cfg = svc.cluster("local")
    server = ctx.jupyter()
    script = ctx.tmp / "ticker.py"
    script.write_text(TICKER)
    client = svc.client("local")
    sid = client.submit_job(entrypoint=f"python {script}", metadata={"cleverthis": "1"})

    async def collect(url: str, headers: dict[str, str], out: list[float]) -> None:
        conn = await websocket.websocket_connect(httpclient.HTTPRequest(url, headers=headers))
        buf = ""
        while True:
            msg = await conn.read_message()
            if msg is None:
                return
            now = time.time()
            buf += msg
            *lines, buf = buf.split("\n")
            out.extend(now - float(ln.split("TICK", 1)[1].split()[0]) for ln in lines if "TICK" in ln)

    ray_lat: list[float] = []
    ours_lat: list[float] = []
    ray_url = cfg.address.replace("http://", "ws://") + f"/api/jobs/{sid}/logs/tail"
    ours_url = f"ws://127.0.0.1:{server['port']}/cleverthis/api/clusters/local/jobs/{sid}/logs/tail"

    async def both() -> None:
        await asyncio.wait_for(asyncio.gather(
            collect(ray_url, cfg.headers(), ray_lat),
            collect(ours_url, {"Authorization": f"token {server['token']}"}, ours_lat),
        ), timeout=120)

    asyncio.run(both())
    if len(ray_lat) < 50 or len(ours_lat) < 50:
        raise NotMeasured(f"too few lines received (ray {len(ray_lat)}, ours {len(ours_lat)})")

    def p95(xs: list[float]) -> float:
        return sorted(xs)[int(len(xs) * 0.95) - 1]

    o, r = p95(ours_lat), p95(ray_lat)
    return {"ours": f"p95 {o:.2f} s", "baseline": f"p95 {r:.2f} s", "ratio": o / r,
            "met": o <= 1.2 and o <= r * 1.05 + 0.05,
            "detail": f"P5: {len(ours_lat)} lines, 10/s, printed in a Ray job; both clients connected at once; "
                      "ours follows Ray's state API log stream (the head's log agent, read every "
                      f"{STREAM_INTERVAL_S} s) through the Jupyter server (median {med(ours_lat):.2f} s vs "
                      f"{med(ray_lat):.2f} s for Ray's job tail)."}


def p7(ctx: Context) -> dict[str, Any]:
    """GET /clusters/{c}/jobs with 1,000 jobs through a real Jupyter server (Ray played by a fake dashboard:
    1,000 real jobs would take an hour to run on this machine)."""
    import requests

    fake = ctx.fake_ray(1000)
    server = ctx.jupyter(clusters={"fake": {"address": fake}})
    url = f"http://127.0.0.1:{server['port']}/cleverthis/api/clusters/fake/jobs"
    headers = {"Authorization": f"token {server['token']}"}
    r = requests.get(url, headers=headers, timeout=30)
    r.raise_for_status()
    assert r.json()["total"] == 1000, r.json().get("total")
    times = []
    for _ in range(30):
        t = time.perf_counter()
        requests.get(url, headers=headers, timeout=30).raise_for_status()
        times.append((time.perf_counter() - t) * 1000)
    p95 = sorted(times)[int(len(times) * 0.95) - 1]
    return {"ours": f"p95 {p95:.0f} ms", "baseline": "-", "ratio": None, "met": p95 <= 100,
            "detail": f"P7: 30 requests listing 1,000 jobs (median {med(times):.0f} ms); the sidebar's render of "
                      "1,000 rows is measured by the browser test (tests/ui)."}


# -- P9 ------------------------------------------------------------------------------------------------------------
def _instructions(ctx: Context, n: int) -> Path:
    """n instruction examples (~136 bytes a line, as the page's instruction sets), written once per run."""
    d = ctx.tmp / f"instructions-{n}"
    if not d.exists():
        rng = random.Random(n)
        words = "the a river mountain blue green quick slow data model train loss step epoch token node".split()
        d.mkdir(parents=True)
        with open(d / "train.jsonl", "w") as f:
            for _ in range(n):
                f.write(json.dumps({"instruction": "Continue the text", "input": " ".join(rng.choices(words, k=6)),
                                    "output": " ".join(rng.choices(words, k=rng.randint(4, 14)))}) + "\n")
    return d


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in bytes; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _first_step_and_peak(ctx: Context, name: str, **spec: Any) -> tuple[float, int]:
    """Submit a job, wait for its first step, then cancel it: (seconds from submit, the larger worker's peak RSS
    so far, read from /proc while the job runs)."""
    from jupyter_cleverthis.spec import JobSpec

    svc = ctx.service()
    t0 = time.time()
    svc.create(JobSpec(name=name, **spec), check=False)
    peaks: dict[int, int] = {}
    first = None
    while first is None and time.time() - t0 < 900:
        evs = svc.events("local", name)
        for e in evs:
            if e["type"] == "worker" and e.get("pid"):
                peaks[e["pid"]] = max(peaks.get(e["pid"], 0), _peak_rss(e["pid"]))
        first = next((e["t"] for e in evs if e["type"] == "step"), None)
        if any(e["type"] == "error" for e in evs):
            raise NotMeasured(f"job {name} failed: {[e.get('message') for e in evs if e['type'] == 'error']}")
        time.sleep(0.5)
    for pid in peaks:
        peaks[pid] = max(peaks[pid], _peak_rss(pid))
    svc.cancel("local", name)
    svc.wait("local", name, poll=1.0, timeout=300)
    if first is None:
        raise NotMeasured(f"job {name} reached no step in 900 s")
    return first - t0, max(peaks.values(), default=0)


def p9(ctx: Context) -> dict[str, Any]:
    model = ctx.model(hidden=64, layers=2)
    runs: dict[int, dict[str, float]] = {}
    for n in (10_000, 1_000_000):
        data = _instructions(ctx, n)
        seconds, peak = _first_step_and_peak(
            ctx, f"bench-p9-{n}-{int(time.time())}", base_model=model, dataset_path=str(data), epochs=1,
            batch_size=8, workers=2, output_dir=str(ctx.tmp / f"ck-p9-{n}"),
            training_config={"method": "lora", "max_seq_length": 128, "report_to": ["none"]})
        runs[n] = {"first_step_s": round(seconds, 1), "peak_worker_gib": round(peak / 2**30, 2),
                   "mb": round((data / "train.jsonl").stat().st_size / 2**20)}
    small, big = runs[10_000], runs[1_000_000]
    ratio = big["first_step_s"] / small["first_step_s"]
    return {"ours": f"{big['first_step_s']} s, {big['peak_worker_gib']} GiB at 1M",
            "baseline": f"{small['first_step_s']} s, {small['peak_worker_gib']} GiB at 10k", "ratio": ratio,
            "runs": runs, "met": ratio <= 1.5 and big["peak_worker_gib"] <= 2.0,
            "detail": f"P9: a 2-worker LoRA job (small Llama) over instruction JSONL, submit to first step and the "
                      f"larger worker's peak RSS (VmHWM, read from /proc while it runs), at 10,000 examples "
                      f"({small['mb']} MB) and 1,000,000 ({big['mb']} MB); the first read checks every record into "
                      "the node's Arrow copy, workers tokenize lazily"}


# -- P10 -----------------------------------------------------------------------------------------------------------
def _corpus(ctx: Context, docs: int = 600) -> Path:
    d = ctx.tmp / f"corpus-{docs}"
    if not d.exists():
        rng = random.Random(7)
        words = "the a river mountain blue green quick slow data model train loss step epoch token node".split()
        d.mkdir(parents=True)
        (d / "corpus.txt").write_text("".join(" ".join(rng.choices(words, k=rng.randint(20, 120))) + "\n"
                                              for _ in range(docs)))
    return d


def _plain_blocks_rates(model: str, corpus: Path, blocks_file: str) -> list[float]:
    """The plain Trainer in a fresh process on the runtime's own blocks (the same Arrow file), packed collator."""
    root = [str(Path(__file__).parents[1])]
    code = (f"import sys, json; sys.path[:0] = {root!r}; from bench.cases import _plain_blocks_in_process as f; "
            f"print('RATES', json.dumps(f({model!r}, {blocks_file!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return list(json.loads([ln for ln in out.splitlines() if ln.startswith("RATES")][-1][6:]))


def _plain_blocks_in_process(model_path: str, blocks_file: str) -> list[float]:
    import datasets
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    from cleverthis_runtime.data import PackedCollator

    torch.set_num_threads(2)
    set_seed(42)
    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.config.use_cache = False
    rates: list[float] = []
    args = TrainingArguments(output_dir=str(Path(blocks_file).parent / "plain-out"), per_device_train_batch_size=8,
                             num_train_epochs=1, learning_rate=1e-4, logging_steps=1, save_strategy="no",
                             report_to="none", use_cpu=True, disable_tqdm=True, seed=42, dataloader_num_workers=0,
                             remove_unused_columns=False, include_num_input_tokens_seen="non_padding")
    Trainer(model=model, args=args, train_dataset=datasets.Dataset.from_file(blocks_file),
            data_collator=PackedCollator(tok.pad_token_id), callbacks=[_rate_callback(rates)]).train()
    return rates


def p10(ctx: Context) -> dict[str, Any]:
    """Pre-training on packed raw text (job type train): our runtime's job against the plain Trainer on the same
    blocks (the Arrow file the job wrote to the node's cache)."""
    model, corpus = ctx.model(), _corpus(ctx)
    ours, base = [], []
    for k in range(REPEATS):
        _, evs, _ = ctx.run_job(f"bench-p10-{int(time.time())}-{k}", base_model=model, dataset_path=str(corpus),
                                job_type="train", start="pretrained", epochs=1, batch_size=8, workers=1,
                                cpus_per_worker=2, output_dir=str(ctx.tmp / f"ck-p10-{k}"),
                                training_config={"method": "full", "max_seq_length": 256, "report_to": ["none"]})
        ours.append(_steady([e.get("tokens_per_s") or 0 for e in evs if e["type"] == "step"]))
        hf_home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
        blocks = max((hf_home / "cleverthis-tokenized").glob("*.arrow"), key=lambda p: p.stat().st_mtime)
        base.append(_steady(_plain_blocks_rates(model, corpus, str(blocks))))
    o, b = med(ours), med(base)
    return {"ours": f"{o:,.0f} tok/s", "baseline": f"{b:,.0f} tok/s", "ratio": o / b, "samples": [ours, base],
            "detail": f"P10: continued pre-training on {corpus.name} (600 documents of 20-120 words) cut into packed "
                      f"blocks of 256 tokens; median steady-state tokens/s over {REPEATS} alternating runs, small "
                      "Llama (hidden 256, 4 layers), batch 8, 2 threads; the baseline trains the plain Trainer on "
                      "the job's own blocks with the same collator"}
