"""Packing keeps examples isolated: the loss of a packed batch equals the loss of the same examples unpacked."""

from __future__ import annotations

from pathlib import Path

import pytest

from cleverthis_runtime.tiny import ARCHITECTURES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tiny_arch):
    # the run's tiny models (tests/conftest.py: built once per run, shared with the integration tests)
    return tiny_arch


def _pack(rows: list[dict], max_len: int) -> list[dict]:
    """Packed as the runtime packs (rows.packed): TRL's best-fit-decreasing pack_dataset."""
    import datasets
    from trl import pack_dataset

    return pack_dataset(datasets.Dataset.from_list(rows), max_len, strategy="bfd").to_list()


def test_best_fit_packing_fills_rows_and_the_collator_restarts_positions():
    from cleverthis_runtime.data import PackedCollator

    rows = [{"input_ids": [1] * n, "labels": [2] * n} for n in (60, 50, 40, 30, 20, 10)]
    packed = _pack(rows, 100)
    assert sorted(len(p["input_ids"]) for p in packed) == [10, 100, 100]  # 60+40, 50+30+20, 10
    batch = PackedCollator(0)(packed)
    for p, pos, labels in zip(packed, batch["position_ids"].tolist(), batch["labels"].tolist(), strict=True):
        starts = [i for i, x in enumerate(pos[:len(p["input_ids"])]) if x == 0]
        assert len(starts) == len(p["seq_lengths"])  # one restart per example
        assert all(labels[s] == -100 for s in starts)  # nothing predicted across a boundary
        assert sum(lab != -100 for lab in labels) == len(p["input_ids"]) - len(starts)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_packed_loss_equals_unpacked_loss(tiny, arch):
    """For every family the product page lists (each a tiny model built from its transformers config)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq

    from cleverthis_runtime.data import PackedCollator, load_dataset, tokenize_all
    from cleverthis_runtime.methods import packing_refusal

    tok = AutoTokenizer.from_pretrained(tiny(arch))
    model = AutoModelForCausalLM.from_pretrained(tiny(arch), dtype=torch.float32).eval()
    assert packing_refusal(model) is None  # allowed for this family ...
    ds = load_dataset(str(ROOT / "examples/data"))
    rows, _ = tokenize_all(tok, ds.head(24), ds.format, 128)
    for r in rows:  # the packed form masks each example's first label; do the same for the reference
        r["labels"] = [-100, *r["labels"][1:]]

    def summed_loss(batch):
        out = model(**batch, use_cache=False)  # a cache disables the position_ids block mask
        n = (batch["labels"][:, 1:] != -100).sum()
        return out.loss * n, n

    with torch.no_grad():
        pad = DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100)
        ref_sum, ref_n = 0.0, 0
        for r in rows:  # one example at a time: no padding, no neighbours
            s, n = summed_loss(pad([dict(r)]))
            ref_sum, ref_n = ref_sum + s, ref_n + n
        packed = _pack(rows, 256)
        assert len(packed) < len(rows)
        batch = PackedCollator(tok.pad_token_id)(packed)
        assert "attention_mask" not in batch
        got_sum, got_n = summed_loss(batch)
    assert int(got_n) == int(ref_n)
    assert abs(float(got_sum / got_n) - float(ref_sum / ref_n)) < 1e-4  # ... because it isolates the examples
