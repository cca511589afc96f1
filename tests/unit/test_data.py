from __future__ import annotations

import json
from pathlib import Path

import pytest

from cleverthis_runtime.data import (
    CHATML,
    INSTRUCTION,
    DatasetError,
    data_root,
    default_checkpoint_dir,
    load_dataset,
    tokenize_example,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "data"


def write(p: Path, lines: list[str]) -> Path:
    p.write_text("\n".join(lines) + "\n")
    return p


def test_detects_instruction_and_chatml():
    assert load_dataset(str(ROOT / "examples/data")).format == INSTRUCTION
    assert load_dataset(str(ROOT / "examples/data-chatml/train.jsonl")).format == CHATML


@pytest.mark.parametrize(
    "lines,needle",
    [
        (['{"instruction": "a", "output": "b"}', "{broken"], "line 2: broken JSON"),
        (['{"instruction": "a", "output": "b"}', '{"text": "raw"}'], "line 2: a text record (text) among conversation"),
        (['{"question": "hello"}'], "line 1: unknown record shape"),
        (['{"instruction": "a", "answer": "b"}'], "line 1: instruction format needs a string 'output'"),
        (["[1, 2]"], "line 1: expected a JSON object"),
        (['{"messages": [{"role": "user", "content": "hi"}]}'], "line 1: a conversation needs"),
        ([""], "empty file"),
    ],
)
def test_defects_name_file_and_line(tmp_path, lines, needle):
    f = write(tmp_path / "d.jsonl", lines)
    with pytest.raises(DatasetError) as e:
        load_dataset(str(f))
    assert needle in str(e.value) and str(f) in str(e.value)
    # where, as data (the error event and the pre-flight carry it; the front-ends open the file there)
    line = int(needle.split(":")[0].split()[1]) if needle.startswith("line") else None
    if line is None:
        assert e.value.location() == {}
    else:
        assert e.value.location() == {"path": str(f), "line": line, "text": lines[line - 1]}


def test_a_bad_lines_location_survives_pickling_and_is_cut(tmp_path):
    """A worker's DatasetError reaches the driver pickled (through Ray): the location goes with it."""
    import pickle

    f = write(tmp_path / "d.jsonl", ['{"instruction": "a", "output": "b"}'] * 2 + ["{" + "x" * 500])
    with pytest.raises(DatasetError) as e:
        load_dataset(str(f))
    back = pickle.loads(pickle.dumps(e.value))
    assert str(back) == str(e.value) and back.line == 3 and back.path == str(f)
    assert back.text == ("{" + "x" * 500)[: DatasetError.TEXT_CHARS]


def test_missing_path_is_named(tmp_path):
    with pytest.raises(DatasetError, match=str(tmp_path / "nope")):
        load_dataset(str(tmp_path / "nope"))


def test_checkpoint_dir_rule(tmp_path):
    folder = tmp_path / "training"
    folder.mkdir()
    f = write(folder / "a.jsonl", [json.dumps({"instruction": "a", "output": "b"})])
    assert default_checkpoint_dir(str(folder)) == str(folder / "checkpoints")
    assert default_checkpoint_dir(str(f)) == str(folder / "checkpoints")
    arrow = folder / "my-dataset"
    arrow.mkdir()
    (arrow / "dataset_info.json").write_text("{}")
    (arrow / "state.json").write_text("{}")
    assert data_root(str(arrow)) == str(folder)


class _Tok:
    """A tiny stand-in tokenizer: one id per character of the rendered chat."""

    eos_token = "|"

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False):
        s = "".join(f"<{m['role'][0]}>{m['content']}|" for m in messages)
        if add_generation_prompt:
            s += "<a>"
        return [ord(c) for c in s]


def test_loss_only_on_assistant_tokens():
    rec = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    ex = tokenize_example(_Tok(), rec, CHATML, 100)
    text = "".join(chr(i) for i in ex["input_ids"])
    assert text == "<u>hi|<a>yo|"
    learned = "".join(chr(i) for i, lab in zip(ex["input_ids"], ex["labels"], strict=True) if lab != -100)
    assert learned == "yo|"


def test_truncation_is_counted():
    rec = {"instruction": "x" * 50, "output": "y"}
    ex = tokenize_example(_Tok(), rec, INSTRUCTION, 10)
    assert len(ex["input_ids"]) == 10 and ex["truncated"] == 1


def test_batched_tokenization_equals_the_per_message_path(tiny_model):
    from transformers import AutoTokenizer

    from cleverthis_runtime.data import tokenize_all

    tok = AutoTokenizer.from_pretrained(tiny_model)
    total_truncated = 0
    for path in (ROOT / "examples/data", ROOT / "examples/data-chatml"):
        ds = load_dataset(str(path))
        fast, truncated = tokenize_all(tok, ds.records(), None, 40)
        slow_all = [tokenize_example(tok, r, ds.format, 40) for r in ds.records()]
        slow = [s for s in slow_all if any(x != -100 for x in s["labels"])]
        assert [f["input_ids"] for f in fast] == [s["input_ids"] for s in slow]
        assert [f["labels"] for f in fast] == [s["labels"] for s in slow]
        assert truncated == sum(s["truncated"] for s in slow_all)
        total_truncated += truncated
    assert total_truncated > 0


def test_pretokenized_arrow_honours_labels_and_attention_mask(tmp_path):
    import datasets

    from cleverthis_runtime.data import DatasetError, load_dataset, tokenize_all

    rows = [
        {"input_ids": [5, 6, 7, 8, 0, 0], "attention_mask": [1, 1, 1, 1, 0, 0], "labels": [-100, -100, 7, 8, -100, -100]},
        {"input_ids": [9, 10, 11], "attention_mask": [1, 1, 1], "labels": [-100, 10, 11]},
        {"input_ids": [12, 13], "attention_mask": [1, 1], "labels": [-100, -100]},  # nothing trained: skipped
    ]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "tok"))
    ds = load_dataset(str(tmp_path / "tok"))
    assert ds.format == "arrow"
    dropped: list[int] = []
    out, truncated = tokenize_all(None, ds.records(), None, 3, dropped)
    assert out[0] == {"input_ids": [5, 6, 7], "labels": [-100, -100, 7]}  # padding dropped, -100 kept, truncated
    assert out[1] == {"input_ids": [9, 10, 11], "labels": [-100, 10, 11]}
    assert truncated == 1 and dropped == [2]
    # no labels: every token trains
    datasets.Dataset.from_list([{"input_ids": [1, 2, 3]}]).save_to_disk(str(tmp_path / "plain"))
    plain = load_dataset(str(tmp_path / "plain"))
    assert tokenize_all(None, plain.records(), plain.format, 8)[0] == [{"input_ids": [1, 2, 3], "labels": [1, 2, 3]}]
    datasets.Dataset.from_list([{"input_ids": [1, 2], "labels": [1]}]).save_to_disk(str(tmp_path / "bad"))
    bad = load_dataset(str(tmp_path / "bad"))
    with pytest.raises(DatasetError, match="row 0: .*2 input_ids but 1 labels"):
        tokenize_all(None, bad.records(), bad.format, 8)


def test_tokenized_once_per_node_and_reused(tmp_path, monkeypatch, capsys):
    """Packing tokenizes up front: the first worker writes Arrow under the node's cache; a second worker (and a
    later job) with the same data, template, tokenizer and max_seq_length opens it; a change to any of them
    tokenizes again."""
    from transformers import AutoTokenizer

    import cleverthis_runtime.rows as data
    from cleverthis_runtime.data import load_dataset
    from cleverthis_runtime.tiny import build_tiny_model

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    tok = AutoTokenizer.from_pretrained(build_tiny_model(str(tmp_path / "m"), [str(EXAMPLES)]))
    ds = load_dataset(str(EXAMPLES))
    calls = []
    real = data.tokenize_all
    monkeypatch.setattr(data, "tokenize_all", lambda *a, **k: calls.append(1) or real(*a, **k))
    cache = str(tmp_path / "cache")
    first = data.tokenized(tok, ds.train, 128, rank=0, cache_root=cache)
    made = len(calls)
    assert made >= 1 and first.cache_files and first.cache_files[0]["filename"].startswith(cache)
    again = data.tokenized(tok, ds.train, 128, rank=1, cache_root=cache)
    assert again.to_list() == first.to_list() and len(calls) == made  # read, not tokenized
    expected, _ = real(tok, ds.records(), None, 128)
    assert first.to_list() == expected
    out = capsys.readouterr().out
    assert "worker 0: tokenized" in out and "worker 1: read" in out
    data.tokenized(tok, ds.train, 64, rank=0, cache_root=cache)  # another max_seq_length
    assert len(calls) == 2 * made
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    data.tokenized(tok, ds.train, 128, rank=0, cache_root=cache)  # another template
    assert len(calls) == 3 * made
    other = tmp_path / "other.jsonl"
    other.write_text((EXAMPLES / "train.jsonl").read_text().replace('"output": "', '"output": "changed ', 1))
    data.tokenized(tok, load_dataset(str(other)).train, 128, rank=0, cache_root=cache)  # other data
    assert len(calls) > 3 * made
