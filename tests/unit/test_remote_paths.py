"""s3:// dataset paths through fsspec (s3fs) against moto's S3 server on loopback; gs:// shares the code path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from cleverthis_runtime import data
from cleverthis_runtime.data import CHATML, INSTRUCTION, DatasetError, load_dataset
from cleverthis_runtime.preflight import preflight
from cleverthis_runtime.spec import JobSpec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "data"
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3():
    """A real S3 API (moto server mode) on a free loopback port; an s3fs filesystem pointed at it."""
    from moto.server import ThreadedMotoServer

    srv = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    srv.start()
    host, port = srv.get_host_and_port()
    saved = {k: os.environ.get(k) for k in [*S3_ENV, "AWS_ENDPOINT_URL"]}
    os.environ.update(S3_ENV, AWS_ENDPOINT_URL=f"http://{host}:{port}")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    fs.mkdir("bkt")
    fs.put(str(EXAMPLE / "train.jsonl"), "bkt/training/train.jsonl")
    fs.put(str(EXAMPLE / "training_config.json"), "bkt/training/training_config.json")
    try:
        yield fs
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        srv.stop()


def test_remote_is_recognised():
    assert data.is_remote("s3://b/k") and data.is_remote("gs://b/k") and data.is_remote("gcs://b/k")
    assert not data.is_remote("/datasets/training") and not data.is_remote("file:///x") and not data.is_remote("a:b")


def test_folder_of_jsonl_and_training_config(s3):
    ds = load_dataset("s3://bkt/training")
    local = load_dataset(str(EXAMPLE))
    assert ds.format == INSTRUCTION and ds.records() == local.records()
    assert ds.files == ["s3://bkt/training/train.jsonl"]
    cfg, where = data.read_training_config("s3://bkt/training")
    assert where == "s3://bkt/training/training_config.json"
    assert cfg == json.loads((EXAMPLE / "training_config.json").read_text())


def test_single_file_and_validation_beside_it(s3):
    s3.pipe("bkt/chat/train.jsonl", (ROOT / "examples/data-chatml/train.jsonl").read_bytes())
    s3.pipe("bkt/chat/validation.jsonl", (ROOT / "examples/data-chatml/train.jsonl").read_bytes())
    ds = load_dataset("s3://bkt/chat/train.jsonl")
    assert ds.format == CHATML and ds.validation and len(ds.validation) == len(ds.records())
    assert data.read_training_config("s3://bkt/chat/train.jsonl") == (None, None)


def test_defects_name_the_url_and_line(s3):
    s3.pipe("bkt/broken/train.jsonl", b'{"instruction": "a", "output": "b"}\n{"instruction": \n')
    with pytest.raises(DatasetError, match=r"s3://bkt/broken/train.jsonl line 2: broken JSON"):
        load_dataset("s3://bkt/broken")
    s3.pipe("bkt/broken-cfg/train.jsonl", b'{"instruction": "a", "output": "b"}\n')
    s3.pipe("bkt/broken-cfg/training_config.json", b"{nope")
    with pytest.raises(DatasetError, match=r"s3://bkt/broken-cfg/training_config.json: not valid JSON"):
        data.read_training_config("s3://bkt/broken-cfg")


def test_missing_key_and_missing_bucket_are_clear(s3):
    with pytest.raises(DatasetError, match=r"^dataset path s3://bkt/nope does not exist \(no such object"):
        load_dataset("s3://bkt/nope")
    with pytest.raises(DatasetError, match=r"^dataset path s3://no-such-bucket/training does not exist: "
                                           r"no bucket 'no-such-bucket'"):
        load_dataset("s3://no-such-bucket/training")
    s3.mkdir("bkt/empty")
    s3.pipe("bkt/empty/README.md", b"x")
    with pytest.raises(DatasetError, match=r"s3://bkt/empty: no data files"):
        load_dataset("s3://bkt/empty")


def test_unreachable_endpoint_names_the_path(s3, monkeypatch):
    import s3fs

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        with pytest.raises(DatasetError, match=r"^dataset path s3://bkt/training: cannot read .*credentials"):
            load_dataset("s3://bkt/training")
    finally:
        s3fs.S3FileSystem.clear_instance_cache()


def test_arrow_folder_through_load_from_disk(s3, tmp_path):
    import datasets

    local = tmp_path / "arrow"
    datasets.Dataset.from_list(load_dataset(str(EXAMPLE)).records()).save_to_disk(str(local))
    s3.put(str(local), "bkt/arrow", recursive=True)
    ds = load_dataset("s3://bkt/arrow")
    assert ds.format == INSTRUCTION and len(ds.records()) == len(load_dataset(str(EXAMPLE)).records())
    assert data.data_root("s3://bkt/arrow") == "s3://bkt"


def test_checkpoints_of_a_remote_dataset_are_local(monkeypatch, tmp_path):
    monkeypatch.setenv("CLEVERTHIS_HOME", str(tmp_path))
    assert data.default_checkpoint_dir("s3://bkt/datasets/training") == str(tmp_path / "checkpoints/s3/bkt/datasets/training")
    assert data.default_checkpoint_dir("gs://b/x/") == str(tmp_path / "checkpoints/gs/b/x")
    with pytest.raises(ValidationError, match="(?s)output_dir.*not a URL"):
        JobSpec(name="x", output_dir="s3://bkt/ckpt")


def test_preflight_reads_the_bucket(s3, monkeypatch, tmp_path):
    monkeypatch.setenv("CLEVERTHIS_HOME", str(tmp_path))
    out = preflight(JobSpec(name="pf", dataset_path="s3://bkt/training", workers=1), quick=True)
    assert out["errors"] == []
    assert out["dataset"]["format"] == INSTRUCTION and out["training_config_file"].startswith("s3://")
    assert out["training_config"]["method"] == "lora"
    assert out["checkpoint_dir"] == str(tmp_path / "checkpoints/s3/bkt/training")
    bad = preflight(JobSpec(name="pf", dataset_path="s3://bkt/missing", workers=1), quick=True)
    assert bad["errors"] == [{"field": "dataset_path",
                              "message": "dataset path s3://bkt/missing does not exist (no such object or prefix)"}]
