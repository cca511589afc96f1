"""Loss parity: one Ray worker of our runtime against a plain transformers Trainer in this process.

Same base model, same tokenized data, same seed, same hyper-parameters (the sample data's
training_config.json: LoRA, lr 0.01, linear schedule, no warmup, clipping 1.0), packing and length grouping off
(padded batches, the plain Trainer's default; tests/unit/test_batching.py covers the grouped order). The batch order
is the Trainer's own (its seeded random sampler, identical on both sides since both are the HF Trainer with
`seed` and `dataloader_num_workers=0`), and the RNG sequence before training is the same: `set_seed`, then
the fp32 base, then LoRA's initialisation. Per-step losses from the job's `step` events must equal the
plain run's logged losses within 1e-3.
"""

from __future__ import annotations

import json

import pytest

from .training_helpers import run_job

pytestmark = pytest.mark.integration

SEED = 1234
BATCH = 8


def plain_trainer_losses(tiny_model: str, dataset, out_dir) -> list[float]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForSeq2Seq,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    from cleverthis_runtime.data import load_dataset, tokenize_all

    cfg = json.loads((dataset / "training_config.json").read_text())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the worker's (cpus_per_worker 1)
    try:
        set_seed(SEED)
        tok = AutoTokenizer.from_pretrained(tiny_model)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        ds = load_dataset(str(dataset))
        rows, _ = tokenize_all(tok, ds.records(), None, cfg["max_seq_length"])
        model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        model = get_peft_model(model, LoraConfig(r=cfg["lora_r"], lora_alpha=cfg["lora_alpha"],
                                                 lora_dropout=cfg["lora_dropout"],
                                                 target_modules=cfg["target_modules"], task_type="CAUSAL_LM"))
        args = TrainingArguments(
            output_dir=str(out_dir), per_device_train_batch_size=BATCH, num_train_epochs=1,
            learning_rate=cfg["learning_rate"], lr_scheduler_type="linear", warmup_steps=0, weight_decay=0.0,
            max_grad_norm=1.0, logging_steps=1, save_strategy="no", report_to="none", seed=SEED,
            dataloader_num_workers=0, remove_unused_columns=False, use_cpu=True, disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                          data_collator=DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100))
        trainer.train()
        return [h["loss"] for h in trainer.state.log_history if "loss" in h]
    finally:
        torch.set_num_threads(threads)


def test_one_worker_losses_equal_a_plain_trainer(ray_cluster, tiny_model, dataset, job_name, tmp_path):
    _, evs = run_job(tiny_model, dataset, job_name, {"seed": SEED, "packing": False, "group_by_length": False}, workers=1, batch_size=BATCH)
    ours = [e["loss"] for e in sorted((e for e in evs if e["type"] == "step"), key=lambda e: e["step"])]
    plain = plain_trainer_losses(tiny_model, dataset, tmp_path / "plain")
    assert len(ours) == len(plain) >= 10, (len(ours), len(plain))
    diffs = [abs(a - b) for a, b in zip(ours, plain, strict=True)]
    print(f"max |loss delta| over {len(diffs)} steps: {max(diffs):.2e}")
    assert max(diffs) <= 1e-3, list(zip(ours, plain, strict=True))
    assert plain[-1] < plain[0]  # it trained
