"""The formats users bring, read the way the runtime reads them: detected per record, errors naming the file and
line (or the row), the node's Arrow copy, lazily tokenized rows equal to eager ones, raw text cut into blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from format_samples import (
    INSTRUCTIONS,
    make_cached_dataset,
    openai_lines,
    sharegpt_array,
    write_corpus,
    write_formats,
)

from cleverthis_runtime import records
from cleverthis_runtime.data import DatasetError, load_dataset


@pytest.fixture(autouse=True)
def _own_hf_home(tmp_path, monkeypatch):
    """The node's copies (HF_HOME/cleverthis-data) of this test's data stay in its own folder."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))


@pytest.fixture
def tok(tiny_model):
    from transformers import AutoTokenizer

    from cleverthis_runtime.templates import apply

    t = AutoTokenizer.from_pretrained(tiny_model)
    apply(t, "chatml")
    return t


def test_a_folder_of_every_format_and_file_type(tmp_path):
    counts = write_formats(tmp_path / "d", n=12)
    ds = load_dataset(str(tmp_path / "d"))
    assert ds.formats == counts and len(ds) == sum(counts.values()) and ds.kind == "conversation"
    assert sorted(Path(f).suffix for f in ds.files) == [".csv", ".json", ".json", ".jsonl", ".jsonl", ".parquet"]
    # the Arrow copy is memory-mapped from the node's cache, not rows in Python lists
    assert ds.train.cache_files and ds.train.cache_files[0]["filename"].startswith(str(tmp_path / "hf"))
    again = load_dataset(str(tmp_path / "d"))
    assert again.train.cache_files == ds.train.cache_files  # read once per node


def test_alpaca_keeps_system_and_history():
    rec = {"instruction": "And now?", "input": "", "output": "B", "system": "Be brief.",
           "history": [["First?", "A"]]}
    assert records.detect(rec, "x") == "instruction"
    msgs, tools = records.conversation(rec, "instruction")
    assert msgs == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "First?"},
                    {"role": "assistant", "content": "A"}, {"role": "user", "content": "And now?"},
                    {"role": "assistant", "content": "B"}] and tools is None


def test_sharegpt_function_calls_and_observations():
    rec = sharegpt_array(1)[0]
    assert records.detect(rec, "x") == "sharegpt"
    msgs, tools = records.conversation(rec, "sharegpt")
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[1]["tool_calls"] == [{"type": "function", "function": {"name": "get_weather",
                                                                      "arguments": {"city": "Paris"}}}]
    assert tools[0]["name"] == "get_weather"  # the tools column's JSON text, parsed


def test_openai_content_parts_and_tool_calls():
    plain, called = openai_lines(2)[1], openai_lines(2)[0]
    msgs, _ = records.conversation(plain, records.detect(plain, "x"))
    assert msgs[1]["content"] == f"{INSTRUCTIONS[1]['instruction']}\n\n{INSTRUCTIONS[1]['input']}"
    msgs, tools = records.conversation(called, records.detect(called, "x"))
    assert msgs[1] == {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}, "id": "call_0"}]}
    assert msgs[2]["role"] == "tool" and tools[0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize("rec,needle", [
    ({"question": "q", "answer": "a"}, "unknown record shape (keys: answer, question); expected one of"),
    ({"instruction": "q", "answer": "a"}, "instruction format needs a string 'output'"),
    ({"prompt": "q"}, "the closest format is prompt_completion, which needs 'completion'"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                   {"role": "assistant", "content": "a"}]}, "messages[0].content[0] is a image_url part"),
    ({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f",
                                                                                      "arguments": "{oops"}}]}]},
     "messages[0].tool_calls[0].arguments is not valid JSON"),
    ({"conversations": [{"from": "narrator", "value": "x"}]}, "conversations[0].from is 'narrator'"),
])
def test_unknown_or_broken_records_name_the_key(rec, needle):
    with pytest.raises(DatasetError) as e:
        records.detect(rec, "f.jsonl line 3")
    assert str(e.value).startswith("f.jsonl line 3: ") and needle in str(e.value)


def test_column_mapping(tmp_path):
    f = tmp_path / "qa.jsonl"
    f.write_text("".join(json.dumps({"question": r["instruction"], "answer": r["output"]}) + "\n"
                         for r in INSTRUCTIONS[:5]))
    with pytest.raises(DatasetError, match="unknown record shape"):
        load_dataset(str(f))
    ds = load_dataset(str(f), {"instruction": "question", "output": "answer"})
    assert ds.formats == {"instruction": 5}
    assert ds.records()[0]["instruction"] == INSTRUCTIONS[0]["instruction"]


def test_json_array_errors_name_the_line(tmp_path):
    f = tmp_path / "alpaca.json"
    rows = [json.dumps(r, indent=2) for r in INSTRUCTIONS[:3]]
    rows[2] = rows[2].replace('"output"', '"outptu"')
    f.write_text("[\n" + ",\n".join(rows) + "\n]\n")
    with pytest.raises(DatasetError) as e:
        load_dataset(str(f))
    line = 2 + sum(r.count("\n") + 1 for r in rows[:2])
    assert f"{f} line {line}: " in str(e.value) and e.value.line == line


def test_parquet_and_csv_name_the_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"instruction": "a", "output": "b"}, {"instruction": "c", "output": None}]),
                   tmp_path / "t.parquet")
    with pytest.raises(DatasetError, match=r"t.parquet row 2: instruction format needs a string 'output'"):
        load_dataset(str(tmp_path / "t.parquet"))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "t.csv").write_text("instruction,output\na,b\nc,\"\"\nd\n")
    with pytest.raises(DatasetError) as e:
        load_dataset(str(tmp_path / "c"))
    assert "t.csv" in str(e.value)


def test_text_among_conversations_is_refused(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps(INSTRUCTIONS[0]) + "\n" + json.dumps({"text": "raw"}) + "\n")
    with pytest.raises(DatasetError, match=r"line 2: a text record \(text\) among conversation records"):
        load_dataset(str(f))


def test_a_bad_line_at_row_900000_is_named(tmp_path):
    """The whole file is checked in one streaming pass before training starts."""
    f = tmp_path / "big.jsonl"
    good = json.dumps(INSTRUCTIONS[0]) + "\n"
    with open(f, "w") as out:
        out.write(good * 899_999)
        out.write('{"instruction": "x", "output": 3}\n')
        out.write(good * 10)
    seen = []
    with pytest.raises(DatasetError) as e:
        load_dataset(str(f), progress=lambda rows, done, total: seen.append(rows))
    assert e.value.line == 900_000 and f"{f} line 900000: instruction format needs a string 'output'" in str(e.value)
    assert not list((tmp_path / "hf" / "cleverthis-data").glob("*/meta.json"))  # nothing half-written is kept


def test_hub_dataset_from_the_local_cache(tmp_path):
    counts = write_formats(tmp_path / "src", n=6)
    make_cached_dataset(tmp_path / "hf", "local-org/mixed", tmp_path / "src")
    ds = load_dataset("local-org/mixed")
    assert ds.formats == counts
    with pytest.raises(DatasetError, match="neither a path on this node nor a Hub dataset in its Hugging Face cache"):
        load_dataset("local-org/absent")


def test_lazy_rows_equal_eager_tokenization(tmp_path, tok):
    from cleverthis_runtime.data import lazy, tokenize_rows

    write_formats(tmp_path / "d", n=8)
    ds = load_dataset(str(tmp_path / "d"))
    rows = lazy(tok, ds.train, 1024)
    eager = tokenize_rows(tok, ds.records(), None, 1024)
    assert len(rows) == len(eager)
    for k in (0, 5, len(eager) - 1):
        assert rows[k]["input_ids"] == eager[k]["input_ids"] and rows[k]["labels"] == eager[k]["labels"]
    batch = rows[[1, 2, 3]]  # what the DataLoader asks for: one transform call
    assert batch["input_ids"] == [eager[i]["input_ids"] for i in (1, 2, 3)]


def test_tool_calls_train_and_tool_results_do_not(tmp_path, tok):
    from cleverthis_runtime.data import preview, tokenize_all

    rows, _ = tokenize_all(tok, [dict(openai_lines(1)[0], _format="chatml")], None, 4096)
    runs = preview(tok, rows)[0]
    trained = "".join(r["text"] for r in runs if r["trained"])
    untrained = "".join(r["text"] for r in runs if not r["trained"])
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in trained
    assert "Rain in Paris." in trained
    assert "<tool_response>\nParis: rain\n</tool_response>" in untrained and "<tools>" in untrained


def test_prompt_completion_trains_the_completion_only(tok):
    from cleverthis_runtime.data import tokenize_example

    row = tokenize_example(tok, {"prompt": "Q: 2 + 2?\nA:", "completion": " 4"}, "prompt_completion", 100)
    trained = tok.decode([i for i, lab in zip(row["input_ids"], row["labels"], strict=True) if lab != -100])
    assert trained == " 4" + tok.eos_token


def test_raw_text_blocks(tmp_path, tok):
    from cleverthis_runtime.data import text_blocks

    write_corpus(tmp_path / "corpus", docs=40)
    ds = load_dataset(str(tmp_path / "corpus"))
    assert ds.kind == "text" and ds.formats == {"text": 40}
    blocks = text_blocks(tok, ds.train, 32, cache_root=str(tmp_path / "tok"))
    docs = [tok(r["text"])["input_ids"] + [tok.eos_token_id] for r in ds.records()]
    ids = [i for b in blocks for i in b["input_ids"]]
    assert ids == [i for d in docs for i in d]  # every token, in order, documents joined with EOS
    assert all(len(b["input_ids"]) == 32 for b in blocks.select(range(len(blocks) - 1)))
    first = blocks[0]
    starts = [k for k, p in enumerate(first["position_ids"]) if p == 0]
    assert starts[0] == 0 and len(starts) > 1  # a second document starts inside the first block
    # nothing predicts a document's first token (nor a block's first, which the shifted loss never reads)
    for b in blocks:
        assert [lab == -100 for lab in b["labels"]] == [p == 0 for p in b["position_ids"]]


@pytest.mark.parametrize("arch,batching", [("llama", "packed"), ("llama", "padded")])
def test_pretraining_on_raw_text_in_this_process(tmp_path, tiny_arch, arch, batching, capsys, monkeypatch):
    """train.run (a worker's code, world size 1) on raw text from scratch: Llama keeps documents apart by
    position_ids (as every tested family does: test_packing); a model that cannot (an ALiBi model: here Llama told
    so) trains on plain padded blocks."""
    from cleverthis_runtime import checkpoints, methods

    if batching == "padded":
        monkeypatch.setattr(methods, "packing_refusal", lambda model: "packing needs position_ids; it uses ALiBi")
    from cleverthis_runtime.spec import JobSpec, TrainingConfig
    from cleverthis_runtime.train import run

    corpus = write_corpus(tmp_path / "corpus", docs=48)
    out = tmp_path / "ck"
    spec = JobSpec(name="pt", base_model=tiny_arch(arch), dataset_path=str(corpus), job_type="train", epochs=1,
                   batch_size=4, workers=1, output_dir=str(out))
    checkpoints.claim(str(out), "pt")
    tc = TrainingConfig.model_validate({"method": "full", "max_seq_length": 48, "report_to": ["none"],
                                        "validation_split": 0.1})
    r = run({"spec": spec.model_dump(mode="json"), "training_config": tc.model_dump(mode="json"),
             "checkpoint_dir": str(out), "job": "pt"})
    assert r["global_step"] > 0
    evs = [json.loads(ln.split(" ", 1)[1]) for ln in capsys.readouterr().out.splitlines()
           if ln.startswith("@@cleverthis-event ")]
    plan = next(e for e in evs if e["type"] == "plan")
    ds = next(e for e in evs if e["type"] == "dataset")
    assert plan["start"] == "scratch" and plan["batching"] == batching
    assert ds["examples"] == 44 and ds["validation_examples"] == 4 and ds["tokenized"] == "blocks"
    assert any(e["type"] == "validation" for e in evs)


def test_creates_quick_check_reads_the_first_records_only(tmp_path):
    """Create's check (limit) stops after the first records and writes no node copy: a bad line further on is the
    driver's to find (it checks every record before any worker starts), and the full pre-flight's."""
    f = tmp_path / "d.jsonl"
    good = json.dumps(INSTRUCTIONS[0]) + "\n"
    f.write_text(good * 50 + '{"instruction": "x"}\n')
    (tmp_path / "validation.jsonl").write_text(good * 3)
    quick = load_dataset(str(f), limit=20)
    assert len(quick) == 20 and quick.formats == {"instruction": 20} and len(quick.validation) == 3
    assert not (tmp_path / "hf" / "cleverthis-data").exists()
    with pytest.raises(DatasetError, match="line 51: instruction format needs a string 'output'"):
        load_dataset(str(f))


def test_continued_pretraining_starts_from_the_base_and_scratch_does_not(tmp_path, tiny_model, capsys):
    """The two starts of the Training tab, with the worker's code in-process: continued pre-training moves the
    base model's weights a little; from scratch the weights are another draw, as far from the base as two random
    initialisations are. Both checkpoints load as the page shows."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from cleverthis_runtime import checkpoints
    from cleverthis_runtime.spec import JobSpec, TrainingConfig
    from cleverthis_runtime.train import run

    corpus = write_corpus(tmp_path / "corpus", docs=64)
    base = load_file(str(Path(tiny_model) / "model.safetensors"))
    key = "model.layers.0.self_attn.q_proj.weight"
    moved, starts = {}, {}
    for start in ("scratch", "pretrained"):
        out = tmp_path / f"ck-{start}"
        spec = JobSpec(name=start, base_model=tiny_model, dataset_path=str(corpus), job_type="train", start=start,
                       epochs=1, batch_size=4, workers=1, output_dir=str(out))
        checkpoints.claim(str(out), start)
        tc = TrainingConfig(method="full", max_seq_length=48, learning_rate=1e-4, report_to=["none"])
        run({"spec": spec.model_dump(mode="json"), "training_config": tc.model_dump(mode="json"),
             "checkpoint_dir": str(out), "job": start})
        plan = next(json.loads(ln.split(" ", 1)[1]) for ln in capsys.readouterr().out.splitlines()
                    if ln.startswith("@@cleverthis-event ") and '"type":"plan"' in ln)
        starts[start] = plan["start"]
        AutoModelForCausalLM.from_pretrained(str(out / "epoch-final"))
        moved[start] = float(torch.linalg.norm(load_file(str(out / "epoch-final" / "model.safetensors"))[key]
                                               - base[key]))
    assert starts == {"scratch": "scratch", "pretrained": "pretrained"}
    assert moved["pretrained"] < 0.25 * moved["scratch"], moved
