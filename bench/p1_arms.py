"""P1's decomposition arms: where a Ray Train job's tokens/s go, split between Ray, Ray Train and our runtime.

- `plain_in_ray_task`: the plain Trainer run by a Ray task holding 2 CPUs: a Ray worker process, no Ray Train.
- `plain_in_ray_train`: the plain Trainer (bench.cases._plain_trainer_tokens_per_s) as the train loop of a
  TorchTrainer with one worker holding 2 CPUs: Ray Train's worker actor, its process group and its threads,
  none of our code. Against the plain Trainer alone it is the price of hosting in Ray Train.
- `ours_local`: our runtime's worker loop (`cleverthis_runtime.train.run`, world size 1, no control actor) in a
  plain process, outside Ray: against the plain Trainer alone it is the price of our code.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# The plain Trainer inside a Ray worker process: a task holding 2 CPUs, no Ray Train, none of our code.
TASK_HOSTED_JOB = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import ray

    @ray.remote(num_cpus=2)
    def plain(root, model, data):
        sys.path[:0] = [root, root + "/runtime"]
        from bench.cases import _plain_trainer_tokens_per_s
        return _plain_trainer_tokens_per_s(model, Path(data), 2, 8)

    ray.init()
    Path(sys.argv[4]).write_text(json.dumps(ray.get(plain.remote(*sys.argv[1:4]))))
""")

TRAIN_HOSTED_JOB = textwrap.dedent("""
    import json, sys
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    def loop(cfg):
        sys.path[:0] = [cfg["root"], cfg["root"] + "/runtime"]
        from pathlib import Path
        from bench.cases import _plain_trainer_tokens_per_s
        rates = _plain_trainer_tokens_per_s(cfg["model"], Path(cfg["data"]), 2, 8)
        Path(cfg["out"]).write_text(json.dumps(rates))

    cfg = dict(zip(("root", "model", "data", "out"), sys.argv[1:5]))
    TorchTrainer(loop, train_loop_config=cfg,
                 scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 2})).fit()
""")

OURS_LOCAL = textwrap.dedent("""
    import sys
    sys.path[:0] = sys.argv[1:3]
    from cleverthis_runtime import checkpoints
    from cleverthis_runtime.data import read_training_config
    from cleverthis_runtime.spec import JobSpec, TrainingConfig
    from cleverthis_runtime.train import run

    model, data, out, name = sys.argv[3:7]
    cfg, _ = read_training_config(data)
    tc = TrainingConfig.model_validate({**cfg, "group_by_length": False})  # the baseline's padded batches
    spec = JobSpec(name=name, base_model=model, dataset_path=data, epochs=1, batch_size=8, workers=1,
                   cpus_per_worker=2, output_dir=out)
    checkpoints.claim(out, name, resuming_from=None)
    run({"spec": spec.model_dump(mode="json"), "training_config": tc.model_dump(mode="json"),
         "checkpoint_dir": out, "job": name, "resume_from": None})
""")


def _hosted_rates(ctx: Any, job: str, name: str, model: str, data: Path, k: int) -> list[float]:
    """Submit `job` (TASK_HOSTED_JOB or TRAIN_HOSTED_JOB) to the bench's cluster: the plain Trainer's per-step
    tokens/s, which the job writes to a file."""
    from bench.cases import NotMeasured

    client = ctx.service().client("local")
    script, out = ctx.tmp / f"{name}.py", ctx.tmp / f"{name}-{k}.json"
    script.write_text(job)
    sid = client.submit_job(entrypoint=f"python {script} {ROOT} {model} {data} {out}")
    end = time.time() + 600
    while not str(client.get_job_status(sid)).endswith(("SUCCEEDED", "FAILED", "STOPPED")):
        if time.time() > end:
            raise NotMeasured(f"{name} did not finish in 10 minutes")
        time.sleep(0.5)
    if not out.exists():
        raise NotMeasured(f"{name} failed: {client.get_job_logs(sid)[-500:]}")
    return list(json.loads(out.read_text()))


def plain_in_ray_task(ctx: Any, model: str, data: Path, k: int) -> list[float]:
    """The plain Trainer run by a Ray task holding 2 CPUs (TASK_HOSTED_JOB)."""
    return _hosted_rates(ctx, TASK_HOSTED_JOB, "plain_in_ray_task", model, data, k)


def plain_in_ray_train(ctx: Any, model: str, data: Path, k: int) -> list[float]:
    """The plain Trainer as a TorchTrainer's train loop (TRAIN_HOSTED_JOB)."""
    return _hosted_rates(ctx, TRAIN_HOSTED_JOB, "plain_in_ray_train", model, data, k)


def ours_local(ctx: Any, model: str, data: Path, k: int) -> list[float]:
    """Our worker loop in a plain process (OURS_LOCAL): the tokens/s of its step events."""
    from bench.cases import NotMeasured
    from cleverthis_runtime.events import parse_line

    script, out = ctx.tmp / "ours_local.py", ctx.tmp / f"ck-p1-local-{k}"
    script.write_text(OURS_LOCAL)
    proc = subprocess.run([sys.executable, str(script), str(ROOT), str(ROOT / "runtime"), model, str(data),
                           str(out), f"bench-p1-local-{k}"], capture_output=True, text=True)
    events = [parse_line(line) for line in proc.stdout.splitlines()]
    rates = [e.get("tokens_per_s") or 0.0 for e in events if e and e["type"] == "step"]
    if not rates:
        raise NotMeasured(f"our runtime outside Ray failed: {proc.stderr[-500:]}")
    return rates
