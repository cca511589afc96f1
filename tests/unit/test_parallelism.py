"""Tensor / pipeline parallelism options: validated in the spec, the pre-flight, the plan and the workers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from cleverthis_runtime.plan import GB, Device, PlanError, make_plan
from cleverthis_runtime.preflight import preflight
from cleverthis_runtime.spec import JobSpec, TrainingConfig, parallelism_error

EXAMPLE_DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
A100 = Device("cuda", 80 * GB, 8.0)
CPU = Device("cpu", 64 * GB)


def test_defaults_are_one_and_in_the_schema():
    tc = TrainingConfig()
    assert (tc.tensor_parallel_size, tc.pipeline_parallel_size, tc.model_parallel_size) == (1, 1, 1)
    props = TrainingConfig.model_json_schema()["properties"]
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        assert props[key]["type"] == "integer" and props[key]["minimum"] == 1 and props[key]["default"] == 1
        assert "needs GPUs" in props[key]["description"]


@pytest.mark.parametrize("key", ["tensor_parallel_size", "pipeline_parallel_size"])
@pytest.mark.parametrize("bad", [0, -2, 1.5, "two"])
def test_range_and_type_errors_name_the_key(key, bad):
    with pytest.raises(ValidationError) as e:
        TrainingConfig.model_validate({key: bad})
    assert key in str(e.value)


def test_unknown_key_suggests_it():
    with pytest.raises(ValidationError, match="did you mean 'tensor_parallel_size'"):
        TrainingConfig.model_validate({"tensor_parallel": 2})


def test_product_must_divide_workers():
    with pytest.raises(ValidationError, match=r"2 x 2 = 4 must divide workers \(6\)"):
        JobSpec(name="x", workers=6, gpus_per_worker=1,
                training_config={"tensor_parallel_size": 2, "pipeline_parallel_size": 2})


def test_cpu_job_fails_with_needs_gpus():
    with pytest.raises(ValidationError, match=r"tensor_parallel_size > 1 needs GPUs \(gpus_per_worker is 0\)"):
        JobSpec(name="x", workers=2, training_config={"tensor_parallel_size": 2})
    with pytest.raises(ValidationError, match=r"pipeline_parallel_size > 1 needs GPUs"):
        JobSpec(name="x", workers=2, training_config={"pipeline_parallel_size": 2})


def test_gpu_job_is_refused_as_not_supported_yet():
    with pytest.raises(ValidationError, match="not supported yet"):
        JobSpec(name="x", workers=4, gpus_per_worker=1, training_config={"tensor_parallel_size": 2})


def test_tensorflow_rejects_them():
    with pytest.raises(ValidationError, match="tensorflow does not support tensor or pipeline parallelism"):
        JobSpec(name="x", framework="tensorflow", workers=2, training_config={"pipeline_parallel_size": 2})


def test_deepspeed_excludes_them():
    with pytest.raises(ValidationError, match="deepspeed exclude each other"):
        TrainingConfig.model_validate({"tensor_parallel_size": 2, "deepspeed": {"zero_stage": 2}})


def test_ones_are_always_fine():
    JobSpec(name="x", workers=3, framework="tensorflow",
            training_config={"tensor_parallel_size": 1, "pipeline_parallel_size": 1})
    assert parallelism_error(TrainingConfig(), framework="torch", workers=1, gpus_per_worker=0) is None


def test_workers_without_cuda_say_so():
    tc = TrainingConfig(tensor_parallel_size=2)
    msg = parallelism_error(tc, framework="torch", workers=2, gpus_per_worker=1, cuda_available=False)
    assert "needs GPUs (this node has no CUDA device)" in msg


def test_plan_refuses_on_cpu_and_gpu():
    tc = TrainingConfig(tensor_parallel_size=2)
    with pytest.raises(PlanError, match="tensor_parallel_size > 1 needs GPUs"):
        make_plan(params=1e9, devices=[CPU], workers=2, config=tc)
    with pytest.raises(PlanError, match="not supported yet"):
        make_plan(params=1e9, devices=[A100], workers=2, config=tc)
    with pytest.raises(PlanError, match="must divide workers"):
        make_plan(params=1e9, devices=[A100], workers=3, config=tc)
    assert make_plan(params=1e9, devices=[CPU], workers=2, config=TrainingConfig()).strategy == "ddp"


def test_preflight_reports_training_config_json_values(tmp_path):
    data = tmp_path / "training"
    shutil.copytree(EXAMPLE_DATA, data, ignore=shutil.ignore_patterns("checkpoints"))
    (data / "training_config.json").write_text('{"method": "lora", "pipeline_parallel_size": 2}')
    out = preflight(JobSpec(name="pp", dataset_path=str(data), workers=2), quick=True)
    fields = {e["field"]: e["message"] for e in out["errors"]}
    assert "pipeline_parallel_size > 1 needs GPUs" in fields["training_config.pipeline_parallel_size"]
