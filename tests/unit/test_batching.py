"""How examples form batches: the plan's choice per device (packed, grouped, padded), the length-grouped order
seeded per epoch, and a resume in the middle of an epoch that sees the batches the straight run saw."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cleverthis_runtime.plan import GB, Device, make_plan
from cleverthis_runtime.spec import TrainingConfig

ROOT = Path(__file__).resolve().parents[2]
CPU = [Device("cpu", 64 * GB)]
A100 = [Device("cuda", 80 * GB, 8.0)]


def plan(devices=CPU, attention="sdpa", refusal=None, **cfg):
    return make_plan(params=1e6, devices=devices, workers=1, config=TrainingConfig(**cfg), attention=attention,
                     packing_refusal=refusal)


def test_the_plan_packs_where_attention_is_varlen_and_groups_elsewhere():
    cpu = plan()
    assert cpu.batching == "grouped" and cpu.reasons["batching"].startswith("grouped (automatic)")
    assert "sdpa attention needs a block-diagonal mask" in cpu.reasons["batching"]
    gpu = plan(A100, attention="flash_attention_2")
    assert gpu.batching == "packed" and "flash_attention_2 runs packed rows" in gpu.reasons["batching"]
    # a GPU without flash-attention groups, as the CPU does
    assert plan(A100, attention="sdpa").batching == "grouped"
    # a model that cannot keep packed examples apart, or a pipeline, is grouped even with flash-attention
    why = plan(A100, attention="flash_attention_2", refusal="packing needs position_ids: set packing to false")
    assert why.batching == "grouped" and "not packed: packing needs position_ids" in why.reasons["batching"]
    pipe = make_plan(params=1e6, devices=A100 * 2, workers=2, attention="flash_attention_2",
                     config=TrainingConfig(method="full", pipeline_parallel_size=2))
    assert pipe.batching == "grouped" and "pipeline" in pipe.reasons["batching"]


def test_what_training_config_sets_wins_and_says_so():
    assert plan(packing=True).batching == "packed"
    off = plan(A100, attention="flash_attention_2", packing=False)
    assert off.batching == "grouped" and "packing set to false" in off.reasons["batching"]
    padded = plan(group_by_length=False)
    assert padded.batching == "padded" and "group_by_length false" in padded.reasons["batching"]
    assert plan(group_by_length=True).reasons["batching"].startswith("grouped (set in training_config.json)")
    with pytest.raises(ValidationError, match="packing and group_by_length exclude each other"):
        TrainingConfig(packing=True, group_by_length=True)


def _batches(order, size):
    return [order[k:k + size] for k in range(0, len(order), size)]


def test_grouped_order_is_seeded_per_epoch_pads_less_and_keeps_batches_aligned():
    import random

    import torch

    from cleverthis_runtime.methods import grouped_order

    rnd = random.Random(0)
    lengths = [rnd.randint(5, 300) for _ in range(1003)]
    e0 = grouped_order(lengths, 8, 42, 0, 1, torch)
    assert sorted(e0) == list(range(1003))  # every example once
    assert e0 == grouped_order(lengths, 8, 42, 0, 1, torch)  # (seed, epoch) decide it
    assert e0 != grouped_order(lengths, 8, 42, 1, 1, torch) and e0 != grouped_order(lengths, 8, 7, 0, 1, torch)

    def padding(order):
        return sum(len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b) for b in _batches(order, 8))

    shuffled = torch.randperm(1003, generator=torch.Generator().manual_seed(1)).tolist()
    assert padding(e0) < 0.2 * padding(shuffled)
    # the one short batch (1003 = 125 x 8 + 3) is the last: every other batch is a group of similar lengths
    assert len(_batches(e0, 8)[-1]) == 3
    # no saw-tooth: the batches' lengths do not fall steadily within a mega-batch (they are shuffled)
    tops = [max(lengths[i] for i in b) for b in _batches(e0, 8)[:50]]
    assert sum(a > b for a, b in zip(tops, tops[1:], strict=False)) < 40
    # two workers: each step's pair of batches comes from one group of similar lengths
    two = _batches(grouped_order(lengths, 4, 42, 0, 2, torch), 4)
    spreads = [max(lengths[i] for i in a + b) - min(lengths[i] for i in a + b) for a, b in zip(two[::2], two[1::2],
                                                                                                strict=False)]
    assert sorted(spreads)[len(spreads) // 2] < 30


def test_a_resume_mid_epoch_sees_the_batches_the_straight_run_saw(tmp_path, tiny_model):
    """The real Trainer and accelerate: its resume skips the batches already seen and calls set_epoch through
    accelerate's wrappers, so the order after a checkpoint at step 5 (of 8 per epoch) is the straight run's."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, DataCollatorForSeq2Seq, TrainingArguments

    from cleverthis_runtime import compat, methods
    model_dir = tiny_model
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = [{"input_ids": list(range(3, 3 + n)), "labels": list(range(3, 3 + n)), "n": k}
            for k, n in enumerate([4, 9, 15, 6, 12, 3, 8, 14, 5, 11, 7, 13, 10, 16, 2, 6] * 2)]
    seen: list[list[int]] = []
    base = DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100)

    def collate(features):
        seen.append([f.pop("n") for f in features])
        return base(features)

    def train(out, resume=None):
        sampler = methods.grouped_sampler([len(r["input_ids"]) for r in rows], 4, 42)
        args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=4, num_train_epochs=2,
                                 save_strategy="steps", save_steps=5, report_to="none",
                                 use_cpu=True, disable_tqdm=True, seed=42, remove_unused_columns=False,
                                 logging_steps=100)
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        compat.trainer_class(None, sampler)(model=model, args=args, train_dataset=Dataset.from_list(rows),
                                             data_collator=collate).train(resume_from_checkpoint=resume)

    train(tmp_path / "straight")  # its checkpoint-5 holds the Trainer's state (RNG included) after step 5
    straight, seen[:] = list(seen), []
    assert len(straight) == 16 and straight[:8] != straight[8:]  # two epochs, each its own order
    train(tmp_path / "resumed", resume=str(tmp_path / "straight" / "checkpoint-5"))
    assert seen == straight[5:]


def test_tensorflow_pads_and_says_so():
    from cleverthis_runtime import tf_backend

    assert tf_backend.plan(1e6)["batching"] == "padded"
    assert "longest example" in tf_backend.plan(1e6)["reasons"]["batching"]
    said = tf_backend.warnings(TrainingConfig(group_by_length=True))
    assert any(w.startswith("group_by_length is not implemented for framework tensorflow") for w in said)
    assert not any("group_by_length" in w for w in tf_backend.warnings(TrainingConfig()))
