"""Off the tiny-Llama road: LoRA fine-tunes of tiny Mistral, Gemma, GPT-2, Qwen2 and Phi-3 models (built from their
transformers configs) on the real local Ray cluster, submitted together, each with `{"method": "lora"}` and no
`target_modules`: the runtime picks each family's modules, the plan says which and why, and the adapter loads with
`PeftModel.from_pretrained`; each uses its own `chat_template`. (Falcon and Mixtral: QLoRA 4-bit in test_methods, full fine-tuning in test_strategies;
Llama: everywhere else.) A wrong `target_modules` is refused at create, naming the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jupyter_cleverthis.errors import InvalidSpec
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import JobSpec, JobStatus

EXAMPLE_DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]

FAMILIES = {"mistral": ["q_proj", "v_proj"], "gemma": ["q_proj", "v_proj"], "gpt2": ["c_attn"],
            "qwen2": ["q_proj", "v_proj"], "phi3": ["o_proj", "qkv_proj"]}
CUSTOM = "{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}{{ eos_token }}\n{% endfor %}" \
         "{% if add_generation_prompt %}### assistant: {% endif %}"
# each family with its own chat template (a name, or Jinja text), used in training and saved with the tokenizer
TEMPLATE = {"mistral": "mistral", "gemma": "gemma", "gpt2": "chatml", "qwen2": CUSTOM, "phi3": "phi-3"}


def family_data(dataset, tmp_path, arch):
    """A copy of the sample data whose training_config.json leaves target_modules to the runtime (the sample's
    own lists the Llama names)."""
    dst = tmp_path / arch
    shutil.copytree(dataset, dst)
    cfg = json.loads((dst / "training_config.json").read_text())
    cfg.pop("target_modules", None)
    (dst / "training_config.json").write_text(json.dumps(cfg))
    return dst


def pretokenized_data(tiny_model, tmp_path, template):
    """The sample data tokenized by the user (the phi-3 template), saved as Arrow with `input_ids`, `labels` (-100 on
    the prompt and the padding) and `attention_mask` (0 on the padding): the job trains from it as given."""
    import datasets
    from transformers import AutoTokenizer

    from cleverthis_runtime.data import load_dataset, tokenize_all
    from cleverthis_runtime.templates import apply

    tok = AutoTokenizer.from_pretrained(tiny_model)
    apply(tok, template)
    src = load_dataset(str(EXAMPLE_DATA))
    rows, _ = tokenize_all(tok, src.records(), None, 256)
    width = max(len(r["input_ids"]) for r in rows)
    table = [{"input_ids": r["input_ids"] + [tok.pad_token_id] * (width - len(r["input_ids"])),
              "labels": r["labels"] + [-100] * (width - len(r["labels"])),
              "attention_mask": [1] * len(r["input_ids"]) + [0] * (width - len(r["input_ids"]))} for r in rows]
    out = tmp_path / "phi3-tokenized"
    datasets.Dataset.from_list(table).save_to_disk(str(out))
    return out, len(table)


def test_lora_on_every_family(ray_cluster, tiny_arch, dataset, tmp_path, job_name):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cleverthis_runtime.templates import TEMPLATES

    svc = JobService()
    jobs = {}
    tokenized = None
    for arch in FAMILIES:
        if arch == "phi3":  # Phi-3 from pre-tokenized Arrow rows
            data, n = pretokenized_data(tiny_arch(arch), tmp_path, TEMPLATE[arch])
            tokenized = (data, n)
        else:
            data = family_data(dataset, tmp_path, arch)
        name = f"{job_name[:40]}-{arch}"
        svc.create(JobSpec(name=name, base_model=tiny_arch(arch), dataset_path=str(data), epochs=1, batch_size=8,
                           workers=1, training_config={"method": "lora", "learning_rate": 2e-3,
                                                       "chat_template": TEMPLATE[arch]}), owner="tester")
        jobs[arch] = (name, data)
    # Compare runs: the config diff beside their curves names what differs between two families' jobs, nothing else.
    diff = {r["key"]: r["values"] for r in svc.compare("local", [jobs["mistral"][0], jobs["gemma"][0]])}
    assert set(diff) == {"base_model", "dataset_path", "training_config.chat_template"}, diff
    assert diff["training_config.chat_template"] == {jobs["mistral"][0]: "mistral", jobs["gemma"][0]: "gemma"}
    for arch, (name, _data) in jobs.items():
        final = svc.wait("local", name, poll=1.0, timeout=1200)
        evs = svc.events("local", name)
        assert final.status == JobStatus.SUCCEEDED, (arch, final.error, [e for e in evs if e["type"] == "error"])
        plan = [e for e in evs if e["type"] == "plan"][0]
        assert plan["lora_target_modules"] == FAMILIES[arch], arch
        assert final.plan.lora_target_modules == FAMILIES[arch]
        reason = plan["reasons"]["lora_target_modules"]
        assert ("peft's default for " + arch in reason) if arch != "phi3" else ("attention blocks" in reason)
        assert plan["chat_template"] == ("custom" if arch == "qwen2" else TEMPLATE[arch])
        ds_event = [e for e in evs if e["type"] == "dataset"][0]
        if arch == "phi3":
            assert ds_event["format"] == "arrow" and ds_event["examples"] == tokenized[1]
        else:
            assert ds_event["format"] != "arrow"
        steps = [e["loss"] for e in evs if e["type"] == "step"]
        assert len(steps) >= 3 and steps[-1] < steps[0], (arch, steps)
        assert "fan_in_fan_out" not in svc.logs("local", name)["text"], arch  # GPT-2's Conv1D configured, not fixed
        ckpt = Path(final.checkpoint_dir) / "epoch-final"
        tok = AutoTokenizer.from_pretrained(str(ckpt))  # the template the job trained with travels with it
        assert tok.chat_template == (CUSTOM if arch == "qwen2" else TEMPLATES[TEMPLATE[arch]])
        base = AutoModelForCausalLM.from_pretrained(tiny_arch(arch), dtype=torch.float32)
        peft_model = PeftModel.from_pretrained(base, str(ckpt / "adapter_model"))
        assert set(peft_model.peft_config["default"].target_modules) == set(FAMILIES[arch])
        lora_b = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
        assert lora_b and any(p.abs().sum() > 0 for p in lora_b), arch  # B starts at zero: it trained


def test_create_refuses_target_modules_a_family_lacks(ray_cluster, tiny_arch, dataset, job_name):
    """The sample's training_config.json names Llama's modules; a GPT-2 model has none of them."""
    svc = JobService()
    spec = JobSpec(name=job_name, base_model=tiny_arch("gpt2"), dataset_path=str(dataset), epochs=1,
                   training_config={"method": "lora"})
    with pytest.raises(InvalidSpec) as e:
        svc.create(spec, owner="tester")
    fields = {d["field"]: d["message"] for d in e.value.details["errors"]}
    assert "training_config.target_modules" in fields, e.value.details
    assert "c_attn" in fields["training_config.target_modules"]
    assert job_name not in {j.name for j in svc.list("local")}  # nothing was submitted
