"""An s3:// dataset on a real S3 API (moto's server mode on loopback) trains a real job on the Ray cluster.

The S3 endpoint and credentials reach the job the way users' do: the server passes the non-secret AWS_*
settings of its own environment (endpoint, region, the shared credentials file's path) to the job's env_vars
(runtime_env.py `passthrough_env`), never the keys themselves; the driver and the worker read the bucket
through fsspec (s3fs). gs:// goes through the same code path (gcsfs), without an emulator here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .training_helpers import run_job

pytestmark = pytest.mark.integration
EXAMPLE_DATA = Path(__file__).resolve().parents[2] / "examples" / "data"


@pytest.fixture
def s3_training(monkeypatch, tmp_path):
    from moto.server import ThreadedMotoServer

    srv = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    srv.start()
    host, port = srv.get_host_and_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
    # Keys in a shared credentials file: the job gets the file's path, never the keys themselves.
    creds = tmp_path / "aws-credentials"
    creds.write_text("[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    bucket = f"cleverthis-{os.getpid()}"
    fs.mkdir(bucket)
    for f in EXAMPLE_DATA.iterdir():
        if f.is_file():
            fs.put(str(f), f"{bucket}/training/{f.name}")
    try:
        yield f"s3://{bucket}/training"
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        srv.stop()


def test_s3_dataset_trains_with_local_checkpoints(ray_cluster, tiny_model, job_name, s3_training, cleverthis_home):
    # No training_config in the spec: the job reads the bucket's training_config.json beside the data.
    final, evs = run_job(tiny_model, s3_training, job_name, None, workers=1, batch_size=8, timeout=900)
    config = [e for e in evs if e["type"] == "config"][0]
    assert config["training_config_file"] == f"{s3_training}/training_config.json"
    expected_cfg = json.loads((EXAMPLE_DATA / "training_config.json").read_text())
    assert {k: config["training_config"][k] for k in expected_cfg} == expected_cfg
    ds = [e for e in evs if e["type"] == "dataset"][0]
    assert ds["format"] == "instruction" and ds["examples"] > 0
    steps = [e for e in evs if e["type"] == "step"]
    assert len(steps) >= 5 and steps[-1]["loss"] < steps[0]["loss"]
    expected = cleverthis_home / "checkpoints" / "s3" / s3_training.removeprefix("s3://")
    assert final.checkpoint_dir == str(expected)
    ckpt = expected / "epoch-1"
    assert (ckpt / "model.safetensors").exists() and (ckpt / "adapter_model").is_dir()
    assert [c.name for c in final.checkpoints] == ["epoch-1"]
