"""Checkpoints with their numbers: epoch, step, losses and size from the checkpoint events, the links
`best`, `latest` and `epoch-final` marked on the checkpoint they point at, and the code that loads each; the same
in `%train show`. (In a real job: test_finetune's LoRA job, the sidebar's browser test.)"""

from __future__ import annotations

from types import SimpleNamespace

from jupyter_cleverthis.service.detail import detail_of
from jupyter_cleverthis.service.runtime_env import spec_json
from jupyter_cleverthis.spec import JobSpec
from jupyter_cleverthis.text import checkpoint_line, detail_text


def _info(spec: JobSpec, status: str = "SUCCEEDED") -> SimpleNamespace:
    return SimpleNamespace(status=status, metadata={"owner": "ann"}, runtime_env={"env_vars": {"CLEVERTHIS_SPEC":
                           spec_json(spec)}}, start_time=1000, end_time=9000, submission_id=spec.name, job_id=None,
                           message=None)


def _ckpt(name, epoch, step, train, val, size, adapter=True):
    return {"type": "checkpoint", "name": name, "path": f"/c/{name}", "epoch": epoch, "step": step,
            "train_loss": train, "eval_loss": val, "size_bytes": size,
            "adapter_path": f"/c/{name}/adapter_model" if adapter else None}


def _events():
    evs = [{"type": "config", "checkpoint_dir": "/c", "original_base_model": "org/base"},
           _ckpt("epoch-1", 1, 10, 2.5, 2.0, 4_100_000),
           {"type": "checkpoint", "name": "best", "path": "/c/best", "target": "/c/epoch-1", "eval_loss": 2.0},
           _ckpt("epoch-2", 2, 20, 2.1, 2.2, 4_200_000),
           {"type": "checkpoint", "name": "epoch-final", "path": "/c/epoch-final", "target": "/c/epoch-2", "epoch": 2}]
    return [{"src": "rank0", "seq": n, "t": 1.0, **e} for n, e in enumerate(evs, 1)]


def test_each_checkpoint_has_its_numbers_links_and_load_code():
    d = detail_of("local", _info(JobSpec(name="j", base_model="org/base", dataset_path="/d")), _events(), log_url="")
    one, two = d.checkpoints
    assert (one.epoch, one.step, one.train_loss, one.eval_loss, one.size_bytes) == (1, 10, 2.5, 2.0, 4_100_000)
    assert one.marks == ["best"] and two.marks == ["latest", "epoch-final"]  # latest moved on to epoch-2
    assert two.snippet.splitlines() == [
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "model = AutoModelForCausalLM.from_pretrained('/c/epoch-2')",
        "tokenizer = AutoTokenizer.from_pretrained('/c/epoch-2')",
        "# or the base model with the LoRA adapter on top:",
        "from peft import PeftModel",
        "base = AutoModelForCausalLM.from_pretrained('org/base')",
        "model = PeftModel.from_pretrained(base, '/c/epoch-2/adapter_model')"]
    assert checkpoint_line(one) == ("epoch-1 [best]: /c/epoch-1 (epoch 1, step 10, train loss 2.5000, "
                                    "validation loss 2.0000, 4.1 MB)")
    assert "    epoch-2 [latest, epoch-final]: /c/epoch-2 (epoch 2, step 20" in detail_text(d)


def test_a_full_checkpoint_loads_without_peft_and_a_better_best_moves_the_mark():
    evs = _events()[:3] + [
        {"src": "rank0", "seq": 9, "type": "checkpoint", **_ckpt("epoch-2", 2, 20, 2.1, 1.5, 999, adapter=False)},
        {"src": "rank0", "seq": 10, "type": "checkpoint", "name": "best", "path": "/c/best", "target": "/c/epoch-2"}]
    d = detail_of("local", _info(JobSpec(name="j", dataset_path="/d"), status="RUNNING"), evs, log_url="")
    assert [c.marks for c in d.checkpoints] == [[], ["latest", "best"]]
    assert "PeftModel" not in d.checkpoints[1].snippet
    assert checkpoint_line(d.checkpoints[1]).endswith("validation loss 1.5000, 999 B)")
