from __future__ import annotations

import pytest

from cleverthis_runtime.triage import classify
from jupyter_cleverthis.service.jobs import downsample


@pytest.mark.parametrize(
    "text,kind,advice",
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "out_of_memory", "QLoRA"),
        ("OSError: [Errno 28] No space left on device", "disk_full", "disk"),
        ("huggingface_hub.errors.GatedRepoError: 401 Client Error", "gated_model", "HF_TOKEN"),
        ("LocalEntryNotFoundError: offline mode is enabled", "model_not_cached", "%train download"),
        ("DatasetError: /d/a.jsonl line 3: broken JSON", "dataset", "line number"),
        ("ray.exceptions.ActorDiedError: The actor died unexpectedly", "worker_lost", "resume"),
        ("ZeroDivisionError: division by zero", "training", "traceback"),
    ],
)
def test_classify_pairs_kind_with_page_advice(text, kind, advice):
    k, a = classify(text)
    assert k == kind and advice in a


def test_downsample_keeps_extremes_and_bounds_size():
    import math

    n = 100_000
    x = [float(i) for i in range(n)]
    y = [math.exp(-i / 20000) + (5.0 if i == 54321 else 0.0) for i in range(n)]
    idx = downsample(x, y, 1000)
    assert len(idx) <= 1000 and idx[0] == 0 and idx[-1] == n - 1
    assert 54321 in idx  # a spike survives
    assert downsample(x[:10], y[:10], 1000) == list(range(10))
