"""Bad input, generated: every case ends in a clear error naming the field or the line, never a crash."""

from __future__ import annotations

import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cleverthis_runtime.data import DatasetError, load_dataset
from jupyter_cleverthis.cli import HelpShown as _HelpShown
from jupyter_cleverthis.cli import UsageError, parse
from jupyter_cleverthis.errors import CleverThisError, InvalidSpec
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import NAME_PATTERN, TrainingConfig

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@FAST
@given(st.text(max_size=80))
def test_any_name_is_valid_or_rejected_on_the_name_field(name):
    try:
        spec = JobService.validate({"name": name})
    except InvalidSpec as e:
        assert e.details["errors"][0]["field"] == "name"
        return
    assert re.match(NAME_PATTERN, spec.name) and ".." not in spec.name and "/" not in spec.name


@FAST
@given(st.dictionaries(st.sampled_from(["name", "epochs", "batch_size", "workers", "job_type", "framework",
                                         "base_model", "dataset_path", "cluster", "bogus", "training_config"]),
                       json_values, max_size=6))
def test_any_spec_payload_is_valid_or_names_a_field(body):
    try:
        JobService.validate(body)
    except InvalidSpec as e:
        fields = [x["field"] for x in e.details["errors"]]
        assert fields and all(isinstance(f, str) for f in fields)
        assert "Traceback" not in e.message


@FAST
@given(st.dictionaries(st.sampled_from(list(TrainingConfig.model_fields) + ["lora_rank", "lr", "quant"]),
                       json_values, max_size=5))
def test_any_training_config_is_valid_or_names_a_key(cfg):
    try:
        TrainingConfig.model_validate(cfg)
    except ValidationError as e:
        text = str(e)
        assert any(k in text for k in cfg) or "qlora" in text or "quantization" in text


@FAST
@given(st.lists(st.binary(max_size=60) | st.sampled_from([
    b'{"instruction": "a", "output": "b"}', b'{"messages": [{"role": "assistant", "content": "x"}]}',
    b"\xef\xbb\xbf{}", b"{broken", b"[]", b'{"text": 1}', b"\r", b"\x00\x01"]), max_size=6))
def test_any_jsonl_loads_or_names_file_and_line(tmp_path_factory, lines):
    f = tmp_path_factory.mktemp("j") / "d.jsonl"
    f.write_bytes(b"\n".join(lines))
    try:
        ds = load_dataset(str(f))
    except DatasetError as e:
        msg = str(e)
        assert str(f) in msg
        assert re.search(r"line \d+", msg) or "empty file" in msg
        return
    assert ds.records()


@FAST
@given(st.lists(st.sampled_from(["--name", "x", "--epochs", "-1", "zz", "--batch-size", "list", "show", "cluster",
                                 "up", "--cluster", "--json", "--wait", "resume", "--config", "{", "logs",
                                 "--workers", "3.5", "--type", "pretrain", "--bogus", "cancel"]), max_size=7))
def test_any_magic_arguments_parse_or_fail_in_one_line(argv):
    try:
        parse(argv)
    except _HelpShown:
        pass
    except UsageError as e:
        assert "\n" not in e.message and e.message


def test_oversized_line_is_named(tmp_path):
    f = tmp_path / "big.jsonl"
    f.write_text(json.dumps({"instruction": "x" * 10_000_000, "output": "y"}) + "\n" + "{bad\n")
    try:
        load_dataset(str(f))
    except DatasetError as e:
        assert "line 2" in str(e)


def test_errors_are_one_hierarchy():
    assert issubclass(InvalidSpec, CleverThisError) and issubclass(UsageError, CleverThisError)
