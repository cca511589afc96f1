"""Failures that offer a fix: the exception type classifies first, then the text; an out-of-memory failure offers
the page's four changes (each only where the spec lacks it), and a fix applied gives a valid JobSpec."""

from __future__ import annotations

import errno

from cleverthis_runtime.triage import classify_exception
from jupyter_cleverthis.service.fixes import apply_fix, fixes_for
from jupyter_cleverthis.spec import JobSpec


class OutOfMemoryError(RuntimeError):  # the name torch gives its (CUDA) out-of-memory error
    pass


class DatasetError(ValueError):
    pass


def test_the_type_decides_before_the_text():
    assert classify_exception(OutOfMemoryError("whatever the message"))[0] == "out_of_memory"
    assert classify_exception(OSError(errno.ENOSPC, "write failed"))[0] == "disk_full"
    # a message that reads like another kind does not mislead a typed error
    assert classify_exception(DatasetError("line 3: permission denied in the text"))[0] == "dataset"
    try:
        try:
            raise MemoryError
        except MemoryError as inner:
            raise RuntimeError("the step failed") from inner
    except RuntimeError as outer:
        assert classify_exception(outer)[0] == "out_of_memory"  # a cause's type counts
    # a wrapper raised from a cause: the cause's kind when it ranks first (a full disk under a CheckpointError)
    class CheckpointError(RuntimeError):
        pass

    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as e:
            raise CheckpointError("cannot write checkpoint epoch-2") from e
    except CheckpointError as wrapped:
        assert classify_exception(wrapped)[0] == "disk_full"
    assert classify_exception(CheckpointError("the folder is taken"))[0] == "checkpoint"
    # an untyped error: its text, as before
    assert classify_exception(RuntimeError("CUDA error: out of memory"))[0] == "out_of_memory"
    assert classify_exception(RuntimeError("something else"))[0] == "training"


def test_out_of_memory_offers_the_pages_four_changes_that_apply():
    spec = JobSpec(name="j", dataset_path="/d", batch_size=8, training_config={"method": "lora"}).model_dump(mode="json")
    fixes = fixes_for("out_of_memory", spec)
    assert [f.label for f in fixes] == ["Retry with QLoRA", "Retry with half the batch size",
                                        "Retry with gradient checkpointing", "Retry with ZeRO-3"]
    for f in fixes:  # each applied is a spec the service accepts
        fixed = JobSpec.model_validate(apply_fix(spec, f.patch))
        assert fixed.name == "j"
    assert apply_fix(spec, fixes[1].patch)["batch_size"] == 4
    assert apply_fix(spec, fixes[0].patch)["training_config"]["quantization"] == "4bit"
    zero3 = apply_fix({**spec, "training_config": {"method": "lora", "strategy": "fsdp"}}, fixes[3].patch)
    assert zero3["training_config"] == {"method": "lora", "deepspeed": {"zero_stage": 3}}  # strategy removed
    done = {**spec, "batch_size": 1, "training_config": {"method": "qlora", "gradient_checkpointing": True,
                                                         "deepspeed": {"zero_stage": 3}}}
    assert fixes_for("out_of_memory", done) == []
    assert fixes_for("dataset", spec) == [] and fixes_for(None, spec) == []


def test_memory_that_runs_out_while_the_data_loads_is_the_datas():
    """Ray's words for a worker it killed for memory; while the job's phase is loading_data, the advice and the
    fixes are the data's (no QLoRA, no batch size); later, the model's."""
    from jupyter_cleverthis.service.detail import _explain_failure, working_phase
    from jupyter_cleverthis.service.models import JobDetail

    ray_words = ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
                 "Memory on the node (IP: 127.0.0.1) where the task was running was 22.40GB / 23.50GB (0.953)")
    spec = {"name": "big", "workers": 2, "batch_size": 8, "training_config": {"method": "lora"}}
    evs = [{"type": "phase", "phase": p} for p in ("starting_workers", "loading_data", "loading_model",
                                                   "loading_data", "failed")]
    assert working_phase(evs) == "loading_data"
    detail = JobDetail(name="big", cluster="local", status="failed", ray_status="FAILED", spec=spec)
    _explain_failure(detail, ray_words, working_phase(evs))
    assert detail.error_kind == "data_out_of_memory"
    assert "QLoRA" not in " ".join(f.label for f in detail.fixes) and "memory-mapped" in detail.advice
    assert [f.label for f in detail.fixes] == ["Retry without packing", "Retry with one worker"]
    JobSpec.model_validate(detail.fixes[0].spec)
    later = JobDetail(name="big", cluster="local", status="failed", ray_status="FAILED", spec=spec)
    _explain_failure(later, ray_words, "running")
    assert later.error_kind == "out_of_memory" and later.fixes[0].label == "Retry with QLoRA"
