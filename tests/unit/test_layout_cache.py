"""Create's quick pre-flight keeps its architecture answer per model config (cleverthis_runtime.layout_cache): the
second create of a model answers the same without building it, and whatever the answer depends on changes it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_model_cache import hf_home, make_cached_model  # noqa: F401 - the fixture, and a Hub cache entry by hand

from cleverthis_runtime import layout_cache, lora_targets
from cleverthis_runtime.preflight import preflight
from cleverthis_runtime.spec import JobSpec

EXAMPLE_DATA = Path(__file__).resolve().parents[2] / "examples" / "data"


@pytest.fixture
def builds(monkeypatch, tmp_path):
    """Each meta-device build, counted; the cache in a home of the test's own."""
    monkeypatch.setenv("CLEVERTHIS_HOME", str(tmp_path / "home"))
    made: list[str] = []
    real = lora_targets.meta_model

    def counted(base_model, *a, **k):  # noqa: ANN001, ANN002, ANN003
        made.append(base_model)
        return real(base_model, *a, **k)

    monkeypatch.setattr(lora_targets, "meta_model", counted)
    return made


def _quick(model, tc):
    spec = JobSpec(name="cached", base_model=str(model), dataset_path=str(EXAMPLE_DATA), training_config=tc)
    out = preflight(spec, quick=True)
    return out["errors"], out.get("lora_target_modules")


def test_the_second_create_answers_the_same_without_building_the_model(tiny_model, tmp_path, builds):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    bad = {"target_modules": ["q_proj", "nope"]}
    first = _quick(model, bad)
    assert first[0][0]["field"] == "training_config.target_modules" and "'nope'" in first[0][0]["message"]
    assert _quick(model, bad) == first and len(builds) == 1  # kept
    good = _quick(model, {"target_modules": ["q_proj"]})
    assert good == ([], {"modules": ["q_proj"], "reason": "as asked in training_config"}) and len(builds) == 2
    assert _quick(model, {"target_modules": ["q_proj"], "learning_rate": 0.5}) == good and len(builds) == 2
    # another config.json is another answer
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": cfg["num_hidden_layers"] + 1}))
    assert _quick(model, bad) == first and len(builds) == 3
    entries = list((tmp_path / "home" / "cache" / "layout-checks").iterdir())
    assert len(entries) == 3 and not [p for p in entries if p.name.startswith(".tmp")]


def test_a_model_whose_config_is_not_on_this_node_is_checked_every_time(tmp_path, builds):
    assert layout_cache.key("nobody/not-in-the-cache", {}) is None
    for _ in range(2):
        errors, _ = _quick("nobody/not-in-the-cache", {"target_modules": ["q_proj"]})
        assert errors == []  # offline, no config: the full pre-flight and the job say why (a warning here)
    assert builds == ["nobody/not-in-the-cache"] * 2
    assert not (tmp_path / "home" / "cache").exists()



def test_a_hub_id_in_the_model_cache_is_kept_like_a_folder(tiny_model, hf_home, tmp_path, monkeypatch):  # noqa: F811
    """A Hub id resolves through the node's model cache (HF_HOME, offline), as the job loads it: create's quick
    check, run as create runs it (a process with the job's environment), keeps the answer and reads it back."""
    from jupyter_cleverthis.service.helper_jobs import run_helper_here

    monkeypatch.setenv("CLEVERTHIS_HOME", str(tmp_path / "home"))
    snap = make_cached_model(hf_home, "acme/tiny-llama", Path(tiny_model))
    assert layout_cache.config_file("acme/tiny-llama") == str(snap / "config.json")
    spec = JobSpec(name="hub", base_model="acme/tiny-llama", dataset_path=str(EXAMPLE_DATA),
                   training_config={"target_modules": ["q_proj", "nope"]})

    def quick():
        return run_helper_here(entrypoint="python -m cleverthis_runtime.preflight --quick",
                               runtime_env={"env_vars": {"CLEVERTHIS_SPEC": spec.model_dump_json()}},
                               answer="preflight", timeout=300, what="the pre-flight check")

    first = quick()
    assert [e["field"] for e in first["errors"]] == ["training_config.target_modules"], first
    (entry,) = (tmp_path / "home" / "cache" / "layout-checks").iterdir()
    kept = entry.stat().st_ino
    assert quick()["errors"] == first["errors"] and entry.stat().st_ino == kept  # read back, not built again
