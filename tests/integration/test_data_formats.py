"""The formats users bring, trained on the real local Ray cluster: one LoRA job over a Hub dataset (from a
Hugging Face cache built here) holding a file in every conversational format and file type, and raw-text
pre-training from scratch."""

from __future__ import annotations

import json
import uuid

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
    counts = write_formats(src, n=8)
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


def test_pretraining_from_scratch_on_raw_text(ray_cluster, tiny_model, job_name, tmp_path):
    """A train job (the Training tab) on a folder of .txt and {"text": ...} files; continued pre-training and how
    far each start moves from the base: tests/unit/test_formats.py, with the same worker code in-process."""
    from transformers import AutoModelForCausalLM

    corpus = write_corpus(tmp_path / "corpus", docs=120)
    out = tmp_path / "checkpoints"
    _, evs = run_job(tiny_model, corpus, job_name, {"method": "full", "max_seq_length": 64, "report_to": ["none"]},
                     workers=1, job_type="train", start="scratch", output_dir=str(out))
    plan, ds = _event(evs, "plan"), _event(evs, "dataset")
    assert plan["start"] == "scratch" and plan["batching"] == "packed", plan
    assert ds["format"] == "text" and ds["tokenized"] == "blocks" and ds["examples"] == 120 and ds["rows"] > 0
    AutoModelForCausalLM.from_pretrained(str(out / "epoch-final"))  # loads as the page shows
