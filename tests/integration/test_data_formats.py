"""The formats users bring, trained on the real local Ray cluster: one LoRA job over a Hub dataset (from a
Hugging Face cache built here) holding a file in every conversational format and file type, and raw-text
pre-training from scratch and continued from the base model's weights."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from format_samples import make_cached_dataset, write_corpus, write_formats

from .training_helpers import run_job

pytestmark = pytest.mark.integration


def _event(evs: list[dict], kind: str) -> dict:
    return next(e for e in evs if e["type"] == kind)


def test_every_format_trains_from_a_hub_dataset(ray_cluster, tiny_model, job_name, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # travels with the job (HF_HUB_OFFLINE=1)
    src = tmp_path / "src"
    counts = write_formats(src, n=12)
    (src / "training_config.json").write_text(json.dumps({"chat_template": "chatml", "learning_rate": 0.01}))
    repo = f"cleverthis-test/formats-{uuid.uuid4().hex[:8]}"
    make_cached_dataset(tmp_path / "hf", repo, src)
    out = tmp_path / "checkpoints"
    final, evs = run_job(tiny_model, repo, job_name, {"method": "lora", "max_seq_length": 768, "report_to": ["none"]},
                         workers=2, output_dir=str(out))
    ds = _event(evs, "dataset")
    assert ds["formats"] == counts and ds["examples"] == sum(counts.values()) and ds["tokenized"] == "lazily"
    config = _event(evs, "config")
    assert config["training_config"]["chat_template"] == "chatml"  # the repository's training_config.json
    assert _event(evs, "plan")["start"] == "pretrained"
    assert [e for e in evs if e["type"] == "step"]
    AutoModelForCausalLM.from_pretrained(str(out / "epoch-final"))


def test_pretraining_from_scratch_and_continued(ray_cluster, tiny_model, job_name, tmp_path):
    import torch
    from safetensors.torch import load_file

    from jupyter_cleverthis.service.jobs import JobService
    from jupyter_cleverthis.spec import JobSpec, JobStatus

    corpus = write_corpus(tmp_path / "corpus", docs=160)
    svc = JobService()
    runs = {}
    for start in ("scratch", "pretrained"):
        name = f"{job_name}-{start}"
        out = tmp_path / f"ck-{start}"
        svc.create(JobSpec(name=name, base_model=tiny_model, dataset_path=str(corpus), job_type="train", start=start,
                           epochs=1, batch_size=8, workers=1, output_dir=str(out),
                           training_config={"method": "full", "max_seq_length": 64, "learning_rate": 1e-4,
                                            "report_to": ["none"]}), owner="tester")
        runs[start] = (name, out)
    moved = {}
    base = load_file(str(Path(tiny_model) / "model.safetensors"))
    for start, (name, out) in runs.items():
        final = svc.wait("local", name, poll=1.0, timeout=900)
        evs = svc.events("local", name)
        assert final.status == JobStatus.SUCCEEDED, (final.error, [e for e in evs if e["type"] == "error"])
        plan, ds = _event(evs, "plan"), _event(evs, "dataset")
        assert plan["start"] == start and plan["batching"] == "packed", plan
        assert ds["format"] == "text" and ds["tokenized"] == "blocks" and ds["examples"] > 0
        assert any(e["type"] == "step" for e in evs)
        from transformers import AutoModelForCausalLM

        AutoModelForCausalLM.from_pretrained(str(out / "epoch-final"))  # loads as the page shows
        weights = load_file(str(out / "epoch-final" / "model.safetensors"))
        key = "model.layers.0.self_attn.q_proj.weight"
        moved[start] = float(torch.linalg.norm(weights[key] - base[key]))
    # continued pre-training starts from the base model's weights (an epoch at 1e-4 moves them a little), from
    # scratch from fresh ones (another draw: as far from the base as two random inits are)
    assert moved["pretrained"] < 0.25 * moved["scratch"], moved
