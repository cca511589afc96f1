"""`chat_template`: each named template renders an instruction example as a user turn and an assistant turn, and
only the assistant's tokens train; bad names and bad Jinja are field errors; `model` needs a template of its own."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cleverthis_runtime.templates import TEMPLATES

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data"
EXAMPLE = {"instruction": "Name a colour of the sky", "input": "", "output": "Blue on a clear day"}
MARKERS = {"chatml": "<|im_start|>assistant", "llama-3": "<|start_header_id|>assistant", "mistral": "[/INST]",
           "gemma": "<start_of_turn>model", "phi-3": "<|assistant|>", "default": "<|assistant|>"}


@pytest.fixture(scope="module")
def tiny(tiny_model):
    # the run's tiny models (tests/conftest.py: built once per run, shared with the integration tests)
    return tiny_model


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_each_template_trains_on_the_assistant_turn_only(tiny, name):
    from transformers import AutoTokenizer

    from cleverthis_runtime.data import tokenize_all, tokenize_example
    from cleverthis_runtime.templates import apply

    tok = AutoTokenizer.from_pretrained(tiny)
    assert apply(tok, name)[0] == name
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                                   tokenize=False)
    assert MARKERS[name] in text  # the family's own turn markers
    fast = tokenize_all(tok, [EXAMPLE], "instruction", 512)[0][0]  # one batched call over rendered text
    slow = tokenize_example(tok, EXAMPLE, "instruction", 512)  # prefix by prefix
    assert fast["labels"] == slow["labels"] and fast["input_ids"] == slow["input_ids"]
    for row in (fast, slow):
        trained = tok.decode([i for i, lab in zip(row["input_ids"], row["labels"], strict=True) if lab != -100])
        assert "Blue on a clear day" in trained
        assert "colour" not in trained and "sky" not in trained  # the user turn carries no loss
        assert "colour" in tok.decode(row["input_ids"])


def test_names_and_jinja_are_checked_in_the_spec():
    from pydantic import ValidationError

    from cleverthis_runtime.spec import TrainingConfig

    assert TrainingConfig(chat_template="llama-3").chat_template == "llama-3"
    custom = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    assert TrainingConfig(chat_template=custom).chat_template == custom
    for bad, words in (("chatm1", "unknown template"), ("{% for m in %}", "does not parse, line 1")):
        with pytest.raises(ValidationError) as e:
            TrainingConfig(chat_template=bad)
        assert e.value.errors()[0]["loc"][0] == "chat_template"
        assert words in str(e.value)


def test_unset_uses_the_models_own_else_the_default(tiny, tmp_path):
    from transformers import AutoTokenizer

    from cleverthis_runtime.templates import TemplateError, apply

    tok = AutoTokenizer.from_pretrained(tiny)
    tok.chat_template = TEMPLATES["chatml"]
    assert apply(tok, None)[0] == "model" and tok.chat_template == TEMPLATES["chatml"]
    tok.chat_template = None
    assert apply(tok, None)[0] == "default" and tok.chat_template == TEMPLATES["default"]
    tok.chat_template = None
    with pytest.raises(TemplateError, match="no chat template of its own"):
        apply(tok, "model")


def test_preflight_names_the_template_and_warns_when_system_is_dropped(tiny, tmp_path):
    from cleverthis_runtime.preflight import preflight
    from cleverthis_runtime.spec import JobSpec

    data = tmp_path / "data"
    shutil.copytree(DATA, data, ignore=shutil.ignore_patterns("checkpoints"))
    drop = "{% for m in messages %}{% if m['role'] != 'system' %}{{ m['content'] }}\n{% endif %}{% endfor %}"
    out = preflight(JobSpec(name="t", base_model=tiny, dataset_path=str(data),
                            training_config={"chat_template": drop}))
    assert out["errors"] == [] and out["plan"]["chat_template"] == "custom"
    assert any("drops the system turn" in w for w in out["warnings"])
    out = preflight(JobSpec(name="t", base_model=tiny, dataset_path=str(data),
                            training_config={"chat_template": "gemma"}))
    assert out["plan"]["reasons"]["chat_template"] == "gemma, as asked"
    assert not any("system turn" in w for w in out["warnings"])

    bare = tmp_path / "bare"  # a model whose tokenizer has no template
    shutil.copytree(tiny, bare)
    cfg = bare / "tokenizer_config.json"
    import json

    tc = json.loads(cfg.read_text())
    tc.pop("chat_template", None)
    cfg.write_text(json.dumps(tc))
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    out = preflight(JobSpec(name="t", base_model=str(bare), dataset_path=str(data),
                            training_config={"chat_template": "model"}))
    assert [e["field"] for e in out["errors"]] == ["training_config.chat_template"], out["errors"]


def test_preflight_previews_what_is_trained_and_names_skipped_examples(tiny, tmp_path):
    from cleverthis_runtime.preflight import preflight
    from cleverthis_runtime.spec import JobSpec

    data = tmp_path / "data"
    shutil.copytree(DATA, data, ignore=shutil.ignore_patterns("checkpoints"))
    out = preflight(JobSpec(name="t", base_model=tiny, dataset_path=str(data)))
    assert len(out["preview"]) == 5
    for runs in out["preview"]:
        assert runs[0]["trained"] is False and "<|user|>" in runs[0]["text"]  # the prompt carries no loss
        assert any(r["trained"] and r["text"].strip() for r in runs)
        assert not any(r["trained"] and "<|assistant|>" in r["text"] for r in runs)
    assert not any("skipped" in w for w in out["warnings"])
    # Truncated before any assistant token: those examples are named, not silently lost.
    out = preflight(JobSpec(name="t", base_model=tiny, dataset_path=str(data),
                            training_config={"max_seq_length": 8}))
    skipped = [w for w in out["warnings"] if "no trained token left after truncation" in w]
    assert skipped and "example 1" in skipped[0], out["warnings"]


CONVERSATIONS = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Colour of the sky?"},
     {"role": "assistant", "content": "Blue"}],
    [{"role": "user", "content": "Say yes"}, {"role": "assistant", "content": "yes"},
     {"role": "assistant", "content": "and again yes"}],  # two replies in a row: the exact path
    [{"role": "user", "content": "  padded  "}, {"role": "assistant", "content": " spaced reply \n"}],  # trimmed
    [{"role": "user", "content": "Say Blue"}, {"role": "assistant", "content": "Blue"},
     {"role": "user", "content": "Blue"}, {"role": "assistant", "content": "Blue Blue"}],  # repeated texts
]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_one_render_per_example_masks_exactly_as_prefix_by_prefix(tiny, name):
    """The fast path renders each conversation once; the exact path renders every prefix. Same tokens, same mask,
    for every named template, on multi-turn conversations with system turns, repeats and whitespace."""
    from transformers import AutoTokenizer

    from cleverthis_runtime.data import load_dataset, tokenize_all, tokenize_example
    from cleverthis_runtime.templates import apply

    tok = AutoTokenizer.from_pretrained(tiny)
    apply(tok, name)
    records = [{"messages": c} for c in CONVERSATIONS]
    records += load_dataset(str(ROOT / "examples" / "data-chatml")).head(20)
    fast, _ = tokenize_all(tok, records, "chatml", 4096)
    slow = [tokenize_example(tok, r, "chatml", 4096) for r in records]
    for f, s_ in zip(fast, [s for s in slow if any(x != -100 for x in s["labels"])], strict=True):
        assert f["input_ids"] == s_["input_ids"]
        assert f["labels"] == s_["labels"]


def test_a_generation_template_uses_the_assistant_mask(tiny):
    """A template with {% generation %} blocks: transformers' own assistant mask decides what trains."""
    from transformers import AutoTokenizer

    from cleverthis_runtime.data import tokenize_all

    tok = AutoTokenizer.from_pretrained(tiny)
    tok.chat_template = ("{% for m in messages %}{% if m['role'] == 'assistant' %}<|assistant|>\n"
                         "{% generation %}{{ m['content'] }}{{ eos_token }}{% endgeneration %}\n"
                         "{% else %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endif %}{% endfor %}")
    rows, _ = tokenize_all(tok, [EXAMPLE], "instruction", 512)
    trained = tok.decode([i for i, lab in zip(rows[0]["input_ids"], rows[0]["labels"], strict=True) if lab != -100])
    assert trained.strip() == "Blue on a clear day</s>"
