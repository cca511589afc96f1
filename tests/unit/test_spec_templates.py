"""Saved specs ("Save as template"): YAML files under $CLEVERTHIS_HOME/templates, checked as specs when saved."""

from __future__ import annotations

import pytest
import yaml

from jupyter_cleverthis.errors import BadRequest, InvalidSpec, TemplateNotFound
from jupyter_cleverthis.service.templates import TemplateStore


def test_save_list_replace_and_delete(tmp_path):
    store = TemplateStore(tmp_path)
    assert store.list() == []
    saved = store.save("lora-small", {"name": "job-1", "base_model": "/m", "dataset_path": "/d", "epochs": 2,
                                      "output_dir": None, "training_config": {"lora_r": 8}})
    # the job's own name and what was unset are not kept; the rest is, as YAML %%train reads
    assert saved == {"name": "lora-small",
                     "spec": {"base_model": "/m", "dataset_path": "/d", "epochs": 2, "training_config": {"lora_r": 8}}}
    assert yaml.safe_load((tmp_path / "templates" / "lora-small.yaml").read_text()) == saved["spec"]
    store.save("a-first", {"base_model": "/x"})
    store.save("lora-small", {"base_model": "/m2"})  # replaced
    assert [(t["name"], t["spec"]["base_model"]) for t in store.list()] == [("a-first", "/x"), ("lora-small", "/m2")]
    assert not list((tmp_path / "templates").glob(".*.tmp"))  # written through a temporary file, renamed
    store.delete("a-first")
    assert [t["name"] for t in store.list()] == ["lora-small"]
    with pytest.raises(TemplateNotFound):
        store.delete("a-first")


def test_bad_names_and_specs_say_what_is_wrong_and_write_nothing(tmp_path):
    store = TemplateStore(tmp_path)
    with pytest.raises(BadRequest) as bad:
        store.save("../escape", {"base_model": "/m"})
    assert "letters, digits" in bad.value.message
    with pytest.raises(InvalidSpec) as invalid:
        store.save("t", {"epochs": 0, "training_config": {"method": "sideways"}})
    fields = {e["field"] for e in invalid.value.details["errors"]}
    assert {"epochs", "training_config.method"} <= fields
    assert store.list() == [] and not (tmp_path / "templates" / "t.yaml").exists()
    (tmp_path / "templates").mkdir(exist_ok=True)
    (tmp_path / "templates" / "broken.yaml").write_text("[1, 2")  # a hand-edited file that does not parse
    assert store.list() == []
