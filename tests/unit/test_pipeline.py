"""Pipeline stages (runtime/cleverthis_runtime/pipeline.py): each family's stages, run one after the other, compute the
whole model's logits; what cannot be split is refused with the field named. (Training on 2 workers against DDP:
tests/integration/test_parallelism.py.)"""

from __future__ import annotations

import copy

import pytest

from cleverthis_runtime import pipeline
from cleverthis_runtime.spec import TrainingConfig

PP2 = TrainingConfig(pipeline_parallel_size=2, method="full")


@pytest.mark.parametrize("layers,pp,expected", [
    (2, 2, [(0, 1), (1, 2)]), (5, 2, [(0, 3), (3, 5)]), (7, 3, [(0, 3), (3, 5), (5, 7)]), (4, 4, [(0, 1), (1, 2), (2, 3), (3, 4)]),
])
def test_layers_are_split_evenly_the_first_stages_taking_the_rest(layers, pp, expected):
    assert pipeline.stage_layers(layers, pp) == expected


@pytest.mark.parametrize("arch", pipeline.FAMILIES)
def test_the_stages_in_a_row_compute_the_whole_models_logits(tiny_arch, arch):
    import torch
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(tiny_arch(arch), dtype=torch.float32).eval()
    assert pipeline.refusal(PP2, lm.config) is None
    ids = torch.randint(4, lm.config.vocab_size, (3, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        whole = lm(input_ids=ids).logits
        first, last = (pipeline.split(copy.deepcopy(lm), r, 2).eval() for r in (0, 1))
        assert first.first and not first.last and last.last
        hidden = first(ids)
        assert hidden.shape == (3, 17, lm.config.hidden_size)
        staged = last(hidden)
    assert torch.allclose(staged, whole, atol=1e-5), float((staged - whole).abs().max())
    # each stage holds its own part: together, every weight once
    names = [set(s.local_state()) for s in (first, last)]
    assert not names[0] & names[1] and names[0] | names[1] == set(lm.state_dict())


@pytest.mark.parametrize("arch,words", [
    ("falcon", "falcon cannot be split into pipeline stages"),
    ("gpt2", "gpt2 cannot be split into pipeline stages"),
])
def test_families_it_cannot_split_are_refused(tiny_arch, arch, words):
    from transformers import AutoConfig

    field, why = pipeline.refusal(PP2, AutoConfig.from_pretrained(tiny_arch(arch)))
    assert field == "training_config.pipeline_parallel_size" and words in why


def test_tied_embeddings_and_too_few_layers_are_refused(tiny_model):
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(tiny_model)
    cfg.tie_word_embeddings = True
    assert "ties its input and output embeddings" in pipeline.refusal(PP2, cfg)[1]
    cfg.tie_word_embeddings = False
    deep = TrainingConfig(pipeline_parallel_size=cfg.num_hidden_layers + 1, method="full")
    assert "more than the model's" in pipeline.refusal(deep, cfg)[1]


def test_microbatches_default_to_two_per_stage_and_never_exceed_the_batch():
    assert pipeline.microbatches(PP2, 8) == 4
    assert pipeline.microbatches(PP2, 3) == 3
    assert pipeline.microbatches(PP2.model_copy(update={"pipeline_microbatches": 8}), 8) == 8
