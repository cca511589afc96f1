"""The walking skeleton on a real local Ray cluster: LoRA fine-tune, lifecycle, checkpoints, monitoring, failure."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import pytest
import requests

from jupyter_cleverthis.errors import BadRequest, Forbidden
from jupyter_cleverthis.service.clusters import LocalCluster
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import JobSpec, JobStatus
from jupyter_cleverthis.text import detail_text

from .training_helpers import delay_steps

pytestmark = pytest.mark.integration
ORDER = ["queued", "initializing", "running", "succeeded"]
FIGURES = ("loss", "learning_rate", "tokens_per_s", "step", "epoch")  # the runtime's Ray metrics


def metrics_port(home) -> int:
    """The head's metrics export port (`ray start --metrics-export-port`, chosen free by LocalCluster)."""
    pid = LocalCluster("local", home).state()["pid"]
    args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    return int(next(a for a in args if a.startswith(b"--metrics-export-port=")).split(b"=")[1])


def scrape(port: int, job: str) -> dict[str, float]:
    """The job's figures in the node's Prometheus export, as the Ray dashboard reads them."""
    try:
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except requests.RequestException:
        return {}
    found = {}
    for line in text.splitlines():
        for fig in FIGURES:
            if line.startswith(f"ray_cleverthis_train_{fig}{{") and f'job="{job}"' in line:
                found[fig] = float(line.rsplit(" ", 1)[1])
    return found


def test_lora_finetune_two_epochs(ray_cluster, tiny_model, dataset, job_name, cleverthis_home, monkeypatch):
    """One 2-worker job checked every way: lifecycle, curve, checkpoints, loading, resume, and its monitoring
    (the Ray metrics export and the per-worker `utilisation` events)."""
    from ray.job_submission import JobSubmissionClient

    delay_steps(monkeypatch, 1.0)  # ~20 s of training: a few Ray metrics reports (every ~10 s)
    port = metrics_port(cleverthis_home)
    svc = JobService()
    spec = JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(dataset), epochs=2, batch_size=8,
                   workers=2)
    seen: list[str] = []
    figures: dict[str, float] = {}
    scraped = [0.0]

    def on_change(d) -> None:  # each new status or step: the status order, and the Ray metrics every ~2 s
        if d.status.value not in seen:
            seen.append(d.status.value)
        if time.time() - scraped[0] > 2:
            figures.update(scrape(port, job_name))
            scraped[0] = time.time()

    svc.create(spec, owner="tester")
    final = svc.wait("local", job_name, poll=1.0, timeout=900, on_change=on_change)
    assert final.status == JobStatus.SUCCEEDED, final.error
    assert seen == sorted(seen, key=ORDER.index), seen  # never goes backwards
    assert seen[-1] == "succeeded" and len(seen) >= 2
    for _ in range(15):  # the last metrics report may come after the job ended
        if set(figures) == set(FIGURES):
            break
        figures.update(scrape(port, job_name))
        time.sleep(2)
    assert set(figures) == set(FIGURES), figures
    assert figures["loss"] > 0 and figures["step"] >= 1
    # utilisation: every worker reports at each epoch end, and the detail keeps each worker's latest
    util = [e for e in svc.events("local", job_name) if e["type"] == "utilisation"]
    for rank in (0, 1):
        mine = [u for u in util if u["rank"] == rank]
        assert len([u for u in mine if u.get("epoch") is not None]) == 2, (rank, mine)
        assert all(u["rss_bytes"] > 50_000_000 and u["cpu_percent"] >= 0 for u in mine)
    assert {u["rank"] for u in util} == {0, 1}
    # where a step's time goes (the slow-throughput hint reads it): batch fetch and compute, timed per step
    timed = [e for e in svc.events("local", job_name) if e["type"] == "step"]
    assert all(e["compute_s"] > 0 and e["data_s"] >= 0 for e in timed[1:]), timed[:3]
    data, compute = (statistics.median(e[k] for e in timed[1:]) for k in ("data_s", "compute_s"))
    assert data < compute, (data, compute)  # local data: compute-bound (no data-loading hint)
    from jupyter_cleverthis.service.slowness import throughput_hints

    assert throughput_hints(final, timed) == []  # 2 workers, no GPUs, compute-bound: nothing to say
    # the speed the plan expects, measured on the worker: LoRA's FLOPs per token over the tiny Llama's weights
    from transformers import AutoModelForCausalLM

    weights = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_model).parameters())
    speed = [e for e in svc.events("local", job_name) if e["type"] == "strategy"][-1]
    assert 4 * weights < speed["flops_per_token"] < 6 * weights, (speed, weights)  # frozen base: under full 6N
    assert speed["activation_checkpointing"] is False  # not asked for, not planned for a tiny model
    assert speed["device_flops"] > 1e8
    assert speed["expected_tokens_per_s"] == round(2 * 0.4 * speed["device_flops"] / speed["flops_per_token"], 1)
    assert [u.rank for u in final.utilisation] == [0, 1]
    for u in final.utilisation:
        assert u.seq == max(e["seq"] for e in util if e["rank"] == u.rank)
    # the service's loss-curve diagnosis of the real run: one of the page's patterns, with its advice
    from jupyter_cleverthis.service.diagnosis import advice

    assert final.curve is not None and final.curve.points >= 8, final.curve
    assert final.curve.advice == advice(final.curve.pattern)

    # The managed cluster runs no preemption watcher (no cloud drains a node of this machine); Ray Train's
    # controller is there, so the state API did list the job's actors.
    r = requests.get(f"{ray_cluster.address}/api/v0/actors", params={"limit": 10000}, headers=ray_cluster.headers(),
                     timeout=30)
    actors = r.json()["data"]["result"]["result"]
    assert "PreemptionWatcher" not in {a["class_name"] for a in actors}, actors
    # This job's own actors (other tests' jobs and sweeps share the cluster): no Ray Datasets, no DatasetManager;
    # a job's own run starts no PlacementGroupCleaner either (compat.lean_trainer; a sweep's trials keep theirs),
    # and its control state is keys in the GCS (control_state.py), not an actor: Ray Train's three kinds only.
    # Ray's own client sees the job we submitted, under the same name.
    ray_job = JobSubmissionClient(ray_cluster.address, headers=ray_cluster.headers()).get_job_info(job_name)
    assert ray_job.metadata["owner"] == "tester"
    mine = {a["class_name"] for a in actors if a.get("job_id") == ray_job.job_id}
    assert "TrainController" in mine and "RayTrainWorker" in mine, (ray_job.job_id, mine)
    assert not mine & {"DatasetManager", "PlacementGroupCleaner"}, (ray_job.job_id, mine)
    # (Ray Train's TrainStateActor and Ray's detached AutoscalingCoordinator are the cluster's one each, owned by
    # whichever job started Ray Train first: this one when the test runs alone.)
    assert mine <= {"TrainController", "RayTrainWorker", "SynchronizationActor", "TrainStateActor",
                    "_AutoscalingCoordinatorActor"}, mine
    # The job log holds each Trainer log line once (Ray Train's print patch, which printed each twice, is off).
    text = svc.logs("local", job_name)["text"]
    logged = [line for line in text.splitlines() if "{'loss'" in line]
    assert len(logged) >= 10 and len(set(logged)) == len(logged), logged
    # ... and no FutureWarning from peft's read of a name transformers 5 deprecated (compat.py).
    assert "is_gradient_checkpointing" not in text, [ln for ln in text.splitlines() if "checkpointing" in ln]

    root = dataset / "checkpoints"
    assert final.checkpoint_dir == str(root)
    assert (root / "epoch-1").is_dir() and (root / "epoch-2").is_dir()
    assert os.readlink(root / "epoch-final") == "epoch-2"
    assert [c.name for c in final.checkpoints] == ["epoch-1", "epoch-2"]
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp")]

    # Loadable exactly as the product page shows.
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(root / "epoch-final"))
    AutoTokenizer.from_pretrained(str(root / "epoch-final"))
    assert (root / "epoch-final" / "model.safetensors").exists()
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    peft_model = PeftModel.from_pretrained(base, str(root / "epoch-final" / "adapter_model"))
    merged = peft_model.merge_and_unload()
    import torch

    for (k, v), (k2, v2) in zip(model.state_dict().items(), merged.state_dict().items(), strict=True):
        assert k == k2 and torch.allclose(v, v2, atol=1e-5), k
    # Each checkpoint with its numbers and links, and the load code the views offer, run as a user pastes it.
    one, two = final.checkpoints
    assert (one.epoch, two.epoch) == (1, 2) and 0 < one.step < two.step and two.train_loss > 0
    size = sum(f.stat().st_size for f in (root / "epoch-2").rglob("*") if f.is_file() and not f.is_symlink())
    assert two.size_bytes == size and "latest" in two.marks and "epoch-final" in two.marks and not one.marks
    pasted: dict = {}
    exec(two.snippet, pasted)  # noqa: S102 - the text the sidebar's "Copy load code" copies
    assert type(pasted["model"]).__name__ == "PeftModelForCausalLM" and pasted["tokenizer"] is not None
    # Export merged: a standalone bf16 folder written on the cluster, without the adapter and the training state.
    with pytest.raises(Forbidden):
        svc.export("local", job_name, "epoch-2", "bf16", user="someone-else")
    with pytest.raises(BadRequest, match="has no checkpoint 'epoch-9' \\(it has: epoch-1, epoch-2\\)"):
        svc.export("local", job_name, "epoch-9", "bf16", user="tester")
    exported = svc.export("local", job_name, "epoch-2", "bf16", user="tester")
    assert exported.path == str(root / "exports" / "epoch-2-merged-bf16") and exported.size_bytes > 0
    assert not (root / "exports" / "epoch-2-merged-bf16" / "adapter_model").exists()
    assert not (root / "exports" / "epoch-2-merged-bf16" / "training_state").exists()
    bf16 = AutoModelForCausalLM.from_pretrained(exported.path)
    assert bf16.dtype == torch.bfloat16
    for (k, v), (k2, v2) in zip(bf16.state_dict().items(), merged.state_dict().items(), strict=True):
        assert k == k2 and torch.allclose(v.float(), v2, atol=1e-2, rtol=1e-2), k

    # Chat with a checkpoint: epoch-1 and epoch-final side by side in the widget, generated on the cluster, each
    # answer exactly what that checkpoint generates here; then epoch-final served as base plus adapter.
    from jupyter_cleverthis import Job
    from jupyter_cleverthis.widgets import ChatWithCheckpoint

    prompt = "Add the numbers\n\n2 + 3"
    tok = AutoTokenizer.from_pretrained(str(root / "epoch-final"))
    ids = tok(tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                      tokenize=False), return_tensors="pt", add_special_tokens=False)

    def here(lm) -> str:  # noqa: ANN001 - greedy, as the chat's default temperature 0
        out = lm.eval().generate(**ids, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
        return tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)

    chat = ChatWithCheckpoint(Job(job_name, service=svc), checkpoints=["epoch-1", "epoch-final"], max_new_tokens=8)
    answers = chat.ask(prompt)
    # epoch-1 is neither best nor final: its adapter alone, served on its base
    assert [(a["label"], a["served_as"]) for a in answers] == [("epoch-1", f"base {tiny_model} plus the LoRA adapter"),
                                                               ("epoch-final", "merged weights")]
    assert [a["text"] for a in answers] == [here(AutoModelForCausalLM.from_pretrained(str(root / c)))
                                            for c in ("epoch-1", "epoch-final")]
    assert [o.value for o in chat.outputs] == [a["text"] for a in answers] and "merged weights" in chat.titles[1].value
    (adapter,) = svc.chat("local", job=job_name, sources=["epoch-final"], prompt=prompt, max_new_tokens=8,
                          serve="adapter")
    assert adapter["served_as"].startswith(f"base {tiny_model} plus the LoRA adapter")
    assert adapter["text"] == here(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model),
                                                             str(root / "epoch-final" / "adapter_model")))

    # Resume: a new job from the latest checkpoint continues the numbering (epoch-3 follows epoch-2).
    resumed = svc.resume("local", job_name, epochs=1, owner="tester")  # its owner resumes it
    assert resumed.name == f"{job_name}-resume-1"
    done = svc.wait("local", resumed.name, poll=1.0, timeout=600)
    assert done.status == JobStatus.SUCCEEDED, done.error
    assert [c.name for c in done.checkpoints] == ["epoch-3"]
    assert os.readlink(root / "epoch-final") == "epoch-3"
    assert done.serving.lora_adapter_path.endswith("epoch-final/adapter_model")

    steps = [e for e in svc.events("local", job_name) if e["type"] == "step"]
    assert len(steps) >= 10
    first, last = steps[0]["loss"], steps[-1]["loss"]
    assert last < first, (first, last)
    assert all(e.get("tokens_per_s") is None or e["tokens_per_s"] > 0 for e in steps)


def test_missing_dataset_fails_naming_the_path(ray_cluster, tiny_model, tmp_path, job_name):
    svc = JobService()
    missing = tmp_path / "no-such-data"
    # check=False skips the pre-flight (which would refuse it at create) to prove the runtime's own error.
    svc.create(JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(missing), epochs=1, workers=1),
               check=False)
    final = svc.wait("local", job_name, poll=1.0, timeout=300)
    assert final.status == JobStatus.FAILED
    assert str(missing) in (final.error or "")
    assert final.error_kind == "dataset" and "check the path" in (final.advice or "")
    summary = [j for j in svc.list("local") if j.name == job_name][0]
    assert summary.status == JobStatus.FAILED
    # A dataset that breaks on one line: the job's error names that line, as data too (the front-ends offer it).
    data = tmp_path / "broken"
    data.mkdir()
    lines = [json.dumps({"instruction": f"q{i}", "output": f"a{i}"}) for i in range(4)]
    (data / "train.jsonl").write_text("\n".join(lines[:2] + ['{"instruction": "q", "output": 3}'] + lines[2:]) + "\n")
    second = f"{job_name}-line"
    svc.create(JobSpec(name=second, base_model=tiny_model, dataset_path=str(data), epochs=1, workers=1), check=False)
    broken = svc.wait("local", second, poll=1.0, timeout=300)
    assert broken.status == JobStatus.FAILED and broken.error_kind == "dataset"
    assert broken.error_line is not None and broken.error_line.model_dump() == {
        "path": str(data / "train.jsonl"), "line": 3, "text": '{"instruction": "q", "output": 3}'}
    assert f"dataset line: {data / 'train.jsonl'}:3" in detail_text(broken)


def test_duplicate_name_and_stopped_cluster_are_clear(ray_cluster, tiny_model, tmp_path, job_name):
    from jupyter_cleverthis.errors import ClusterNotRunning, JobExists

    svc = JobService()
    spec = JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(tmp_path / "x"), epochs=1, workers=1)
    svc.create(spec, check=False)
    with pytest.raises(JobExists, match=job_name):
        svc.create(spec, check=False)
    with pytest.raises(ClusterNotRunning, match="not running"):
        svc.create(spec.model_copy(update={"cluster": "http://127.0.0.1:9"}))
    svc.wait("local", job_name, timeout=300)


def test_cli_wait_and_json(ray_cluster, tiny_model, dataset, job_name, capsys):
    import json

    from jupyter_cleverthis.cli import main

    # bf16 on CPU: the frozen LoRA base loads in bf16 (the plan's weights_dtype is read from the job's weights)
    rc = main(["--name", job_name, "--model", tiny_model, "--dataset", str(dataset), "--epochs", "1",
               "--batch-size", "16", "--workers", "1", "--config", '{"mixed_precision": "bf16"}', "--wait"])
    assert rc == 0
    capsys.readouterr()
    assert main(["show", job_name, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "succeeded" and shown["checkpoints"][0]["name"] == "epoch-1"
    assert shown["plan"]["weights_dtype"] == "bf16" and shown["plan"]["precision"] == "bf16"
    assert shown["checkpoints"][0]["merged"] is True  # the last epoch: epoch-final, merged in bf16
    assert main(["cluster", "list", "--json"]) == 0
    clusters = json.loads(capsys.readouterr().out)
    local = [c for c in clusters if c["name"] == "local"][0]
    assert local["status"] == "running" and local["dashboard_url"].startswith("http://127.0.0.1:")
    assert main(["list"]) == 0
    assert job_name in capsys.readouterr().out
    assert Path(shown["checkpoint_dir"], "epoch-final").exists()
    # the job has ended: --follow prints the whole log once and returns
    assert main(["logs", job_name, "--follow"]) == 0
    assert "@@cleverthis-event" in capsys.readouterr().out
    # exit codes: 3 when the service refuses (no such job), 2 for what was typed wrong
    assert main(["resume", f"{job_name}-missing", "--wait"]) == 3
    assert "no job" in capsys.readouterr().err.lower()
    assert main(["resume", job_name, "--epochs", "zero"]) == 2


def test_queued_job_says_why(ray_cluster, tiny_model, dataset, job_name):
    from jupyter_cleverthis.service.probes import cluster_resources

    svc = JobService()
    # One worker more than the cluster's CPUs (1 CPU each): the driver starts, the workers can never be placed.
    n = int(cluster_resources(ray_cluster)["CPU"]["total"]) + 1
    svc.create(JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(dataset), epochs=1, workers=n))
    seen = set()
    try:
        for _ in range(120):
            d = svc.get("local", job_name)
            seen.add(d.status.value)
            if d.phase == "starting_workers":
                break
            time.sleep(0.5)
        assert d.status == JobStatus.QUEUED and d.phase == "starting_workers"
        reason = d.queued_reason
        assert reason.requested.total == {"CPU": float(n)} and reason.requested.strategy == "PACK"
        assert reason.message.startswith(f"needs {n} workers \u00d7 1 CPU with PACK; node 127.0.0.1 (head) has ")
        assert reason.nodes and reason.nodes[0].head and reason.fits_ever == n - 1
        assert reason.suggestions[0] == (f"this cluster can never hold it ({n - 1} such workers at most, even with "
                                         "nothing else running): add nodes, or ask for less")
        assert "why queued: needs" in detail_text(d)  # %train show
        time.sleep(3)
        assert svc.get("local", job_name).status == JobStatus.QUEUED  # still waiting, not failed
    finally:
        svc.cancel("local", job_name)
    assert svc.wait("local", job_name, timeout=120).status == JobStatus.CANCELLED
    assert "running" not in seen
