"""Tensor / pipeline parallelism options: validated in the spec, the pre-flight, the plan and the workers.
(Training with tensor and pipeline parallelism on the real cluster: tests/integration/test_parallelism.py.)"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cleverthis_runtime.plan import GB, Device, PlanError, make_plan
from cleverthis_runtime.preflight import preflight
from cleverthis_runtime.spec import JobSpec, TrainingConfig, parallelism_error

A100 = Device("cuda", 80 * GB, 8.0)
CPU = Device("cpu", 64 * GB)


def test_defaults_are_one_and_in_the_schema():
    tc = TrainingConfig()
    assert (tc.tensor_parallel_size, tc.pipeline_parallel_size, tc.model_parallel_size) == (1, 1, 1)
    props = TrainingConfig.model_json_schema()["properties"]
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        assert props[key]["type"] == "integer" and props[key]["minimum"] == 1 and props[key]["default"] == 1
    assert "CPU or GPU" in props["tensor_parallel_size"]["description"]
    assert "one per worker" in props["pipeline_parallel_size"]["description"]


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


def test_both_are_accepted_on_cpu_and_gpu_within_their_limits():
    for gpus in (0, 1):
        JobSpec(name="x", workers=2, gpus_per_worker=gpus, training_config={"tensor_parallel_size": 2})
        JobSpec(name="x", workers=4, gpus_per_worker=gpus,
                training_config={"tensor_parallel_size": 2, "method": "full"})
        JobSpec(name="x", workers=2, gpus_per_worker=gpus, training_config={"pipeline_parallel_size": 2})
    with pytest.raises(ValidationError, match=r"pipeline_parallel_size \(2\) must equal workers \(4\)"):
        JobSpec(name="x", workers=4, training_config={"pipeline_parallel_size": 2})
    with pytest.raises(ValidationError, match="cannot both be > 1 yet"):
        JobSpec(name="x", workers=4, training_config={"pipeline_parallel_size": 2, "tensor_parallel_size": 2})
    with pytest.raises(ValidationError, match="packing cannot be combined with pipeline_parallel_size"):
        JobSpec(name="x", workers=2, training_config={"pipeline_parallel_size": 2, "packing": True})


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_tensor_parallel_refuses_lora_naming_the_method(method):
    extra = {"quantization": "4bit"} if method == "qlora" else {}
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        with pytest.raises(ValidationError, match=rf"{key} > 1 needs method 'full' \(not '{method}'\)"):
            JobSpec(name="x", workers=2, training_config={key: 2, "method": method, **extra})


def test_tensor_parallel_needs_pretrained_weights():
    with pytest.raises(ValidationError, match="needs pretrained weights"):
        JobSpec(name="x", workers=2, job_type="train", training_config={"tensor_parallel_size": 2})


def test_tensorflow_rejects_them():
    with pytest.raises(ValidationError, match="tensorflow does not support tensor or pipeline parallelism"):
        JobSpec(name="x", framework="tensorflow", workers=2, training_config={"pipeline_parallel_size": 2})


def test_deepspeed_excludes_them():
    with pytest.raises(ValidationError, match="deepspeed exclude each other"):
        TrainingConfig.model_validate({"tensor_parallel_size": 2, "deepspeed": {"zero_stage": 2}})


def test_ones_are_always_fine():
    JobSpec(name="x", workers=3, framework="tensorflow",
            training_config={"tensor_parallel_size": 1, "pipeline_parallel_size": 1})
    assert parallelism_error(TrainingConfig(), framework="torch", workers=1) is None


def test_plan_picks_tensor_parallel_and_full_and_explains_the_mesh():
    tc = TrainingConfig(tensor_parallel_size=2)
    for dev in (CPU, A100):
        plan = make_plan(params=1e9, devices=[dev], workers=4, config=tc)
        assert (plan.strategy, plan.method) == ("tensor-parallel", "full")
        assert "LoRA adapters are not split" in plan.reasons["method"]
        assert "ranks 0-1; ranks 2-3" in plan.reasons["strategy"] and "2 data-parallel replicas" in plan.reasons["strategy"]
        assert plan.parallelism["mesh"] == {"dp": 2, "tp": 2}
        assert plan.parallelism["tensor_parallel_groups"] == [[0, 1], [2, 3]]
    with pytest.raises(PlanError, match="must divide workers"):
        make_plan(params=1e9, devices=[A100], workers=3, config=tc)
    assert make_plan(params=1e9, devices=[CPU], workers=2, config=TrainingConfig()).strategy == "ddp"
    assert make_plan(params=1e9, devices=[CPU], workers=2, config=TrainingConfig()).parallelism is None


@pytest.mark.parametrize("arch,field,words", [
    ("falcon", "tensor_parallel_size", "falcon has no tensor-parallel plan in transformers"),
    ("gpt2", "tensor_parallel_size", "gpt2 has no tensor-parallel plan in transformers"),
])
def test_preflight_refuses_a_family_without_a_tp_plan(tiny_arch, dataset, arch, field, words):
    data = dataset
    spec = JobSpec(name="tp", base_model=tiny_arch(arch), dataset_path=str(data), workers=2,
                   training_config={"tensor_parallel_size": 2, "method": "full"})
    fields = {e["field"]: e["message"] for e in preflight(spec, quick=True)["errors"]}
    assert words in fields[f"training_config.{field}"], fields


def test_preflight_refuses_heads_that_do_not_split(tiny_model, dataset):
    data = dataset
    ok = JobSpec(name="tp", base_model=tiny_model, dataset_path=str(data), workers=2,
                 training_config={"tensor_parallel_size": 2, "method": "full"})
    assert preflight(ok, quick=True)["errors"] == []
    bad = ok.model_copy(update={"workers": 3, "training_config": TrainingConfig(tensor_parallel_size=3, method="full")})
    fields = {e["field"]: e["message"] for e in preflight(bad, quick=True)["errors"]}
    assert "must divide the model's num_attention_heads (4)" in fields["training_config.tensor_parallel_size"]


def test_full_preflight_shows_the_mesh_of_this_model(tiny_model, dataset):
    data = dataset
    out = preflight(JobSpec(name="tp", base_model=tiny_model, dataset_path=str(data), workers=2,
                            training_config={"tensor_parallel_size": 2, "method": "full"}))
    assert out["errors"] == []
    assert out["plan"]["strategy"] == "tensor-parallel" and out["plan"]["method"] == "full"
    assert out["plan"]["parallelism"]["sharded_modules"]["layers.*.mlp.down_proj"] == "rowwise"


def test_preflight_reports_training_config_json_values(dataset):
    data = dataset
    (data / "training_config.json").write_text('{"method": "lora", "pipeline_parallel_size": 2}')
    out = preflight(JobSpec(name="pp", dataset_path=str(data), workers=3), quick=True)
    fields = {e["field"]: e["message"] for e in out["errors"]}
    assert "1 x 2 = 2 must divide workers (3)" in fields["training_config.pipeline_parallel_size"]
    out = preflight(JobSpec(name="pp", dataset_path=str(data), workers=2), quick=True)
    fields = {e["field"]: e["message"] for e in out["errors"]}
    assert "pipeline_parallel_size > 1 needs method 'full' (not 'lora')" in fields["training_config.method"]


def test_preflight_names_the_method_when_training_config_json_asks_lora_with_tp(dataset):
    data = dataset
    (data / "training_config.json").write_text('{"method": "lora", "tensor_parallel_size": 2}')
    out = preflight(JobSpec(name="tp", dataset_path=str(data), workers=2), quick=True)
    fields = {e["field"]: e["message"] for e in out["errors"]}
    assert "needs method 'full' (not 'lora')" in fields["training_config.method"]


def test_plan_picks_pipeline_parallel_and_names_the_schedule():
    tc = TrainingConfig(pipeline_parallel_size=2)
    plan = make_plan(params=1e9, devices=[CPU], workers=2, config=tc)
    assert (plan.strategy, plan.method) == ("pipeline-parallel", "full")
    assert "2 stages over ranks 0-1, gpipe schedule with 4 micro-batches" in plan.reasons["strategy"]
    assert plan.parallelism["mesh"] == {"pp": 2}


def test_preflight_refuses_pipeline_stages_for_falcon_and_shows_them_for_llama(tiny_arch, dataset):
    data = dataset
    pp = {"pipeline_parallel_size": 2, "method": "full"}
    falcon = JobSpec(name="pp", base_model=tiny_arch("falcon"), dataset_path=str(data), workers=2, training_config=pp)
    fields = {e["field"]: e["message"] for e in preflight(falcon, quick=True)["errors"]}
    assert "falcon cannot be split into pipeline stages" in fields["training_config.pipeline_parallel_size"]
    out = preflight(falcon.model_copy(update={"base_model": tiny_arch("llama")}))
    assert out["errors"] == [] and out["plan"]["strategy"] == "pipeline-parallel"
    assert [s["layers"] for s in out["plan"]["parallelism"]["stages"]] == [[0, 0], [1, 1]]
