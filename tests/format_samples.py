"""Sample data in the formats other tools write, from their documented schemas: LLaMA-Factory's alpaca and
ShareGPT `.json` arrays (dataset_info.json's columns and tags), OpenAI chat `messages` with content parts and
tool calls, TRL's prompt/completion, parquet and CSV tables, raw text, and a Hub dataset in a Hugging Face cache
built by hand (nothing can be downloaded here). The contents come from the project's sample instructions."""

from __future__ import annotations

import csv
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTRUCTIONS = [json.loads(line) for line in (ROOT / "examples/data/train.jsonl").read_text().splitlines() if line]
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CITIES = ["Paris", "Oslo", "Lima", "Cairo", "Kyoto", "Quito"]


def _user(rec: dict) -> str:
    return f"{rec['instruction']}\n\n{rec['input']}" if rec.get("input") else rec["instruction"]


def alpaca_array(n: int) -> list[dict]:
    """LLaMA-Factory's alpaca: instruction, input, output, with system and history on some records."""
    out = []
    for i, rec in enumerate(INSTRUCTIONS[:n]):
        row = dict(rec)
        if i % 3 == 0:
            row["system"] = "You are a careful assistant."
        if i % 4 == 1:
            prev = INSTRUCTIONS[(i + 7) % len(INSTRUCTIONS)]
            row["history"] = [[_user(prev), prev["output"]]]
        out.append(row)
    return out


def sharegpt_array(n: int) -> list[dict]:
    """LLaMA-Factory's ShareGPT with tools (glaive_toolcall's shape): human/gpt turns, function_call and
    observation turns, a `tools` column holding JSON text, and a `system` column."""
    out = []
    for i, rec in enumerate(INSTRUCTIONS[:n]):
        if i % 2:
            out.append({"conversations": [{"from": "human", "value": _user(rec)}, {"from": "gpt", "value": rec["output"]}],
                        "system": "Answer briefly."})
            continue
        city = CITIES[i % len(CITIES)]
        out.append({"conversations": [
            {"from": "human", "value": f"What is the weather in {city}?"},
            {"from": "function_call", "value": json.dumps({"name": "get_weather", "arguments": {"city": city}})},
            {"from": "observation", "value": json.dumps({"city": city, "sky": "clear", "celsius": 10 + i % 15})},
            {"from": "gpt", "value": f"It is clear in {city}, {10 + i % 15} degrees."}],
            "tools": json.dumps([WEATHER_TOOL["function"]])})
    return out


def openai_lines(n: int) -> list[dict]:
    """OpenAI chat fine-tuning records: content parts, assistant tool_calls (arguments as JSON text), `tool`
    results with tool_call_id, and a `tools` list."""
    out = []
    for i, rec in enumerate(INSTRUCTIONS[:n]):
        if i % 2:
            out.append({"messages": [
                {"role": "system", "content": "You are helpful."},
                {"role": "user", "content": [{"type": "text", "text": rec["instruction"]},
                                             {"type": "text", "text": "\n\n" + (rec.get("input") or "")}]},
                {"role": "assistant", "content": rec["output"]}]})
            continue
        city = CITIES[i % len(CITIES)]
        out.append({"messages": [
            {"role": "user", "content": f"Weather in {city}, please."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {
                "name": "get_weather", "arguments": json.dumps({"city": city})}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"{city}: rain"},
            {"role": "assistant", "content": f"Rain in {city}."}], "tools": [WEATHER_TOOL]})
    return out


def prompt_completion_lines(n: int) -> list[dict]:
    """TRL's standard prompt/completion: plain text, trained on the completion."""
    return [{"prompt": f"Q: {_user(rec)}\nA:", "completion": " " + rec["output"]} for rec in INSTRUCTIONS[:n]]


def write_formats(folder: Path, n: int = 24) -> dict[str, int]:
    """One folder with a file in every conversational format and file type; returns the records of each format."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "alpaca.json").write_text(json.dumps(alpaca_array(n), indent=2))
    (folder / "sharegpt.json").write_text(json.dumps(sharegpt_array(n), indent=2))
    (folder / "openai.jsonl").write_text("".join(json.dumps(r) + "\n" for r in openai_lines(n)))
    (folder / "prompt_completion.jsonl").write_text("".join(json.dumps(r) + "\n" for r in prompt_completion_lines(n)))
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = INSTRUCTIONS[n:2 * n]
    pq.write_table(pa.Table.from_pylist(rows), folder / "table.parquet")
    with open(folder / "table.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["instruction", "input", "output"])
        w.writeheader()
        w.writerows(INSTRUCTIONS[2 * n:3 * n])
    return {"instruction": 3 * n, "sharegpt": n, "chatml": n, "prompt_completion": n}


def write_corpus(folder: Path, docs: int = 120) -> Path:
    """Raw domain text for pre-training: a .txt file (a document per line) and a JSONL file of {"text": ...}."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"Note {i}: to {rec['instruction'].lower()} '{rec.get('input') or 'it'}', the answer is {rec['output']}."
             for i, rec in enumerate(INSTRUCTIONS * (1 + docs // len(INSTRUCTIONS)))][:docs]
    (folder / "notes.txt").write_text("\n".join(lines[: docs // 2]) + "\n")
    (folder / "more.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in lines[docs // 2:]))
    return folder


def make_cached_dataset(hf_home: Path, repo_id: str, files_from: Path) -> Path:
    """A Hub dataset in a Hugging Face cache made by hand (datasets--org--name/refs/main + snapshots/<commit>/), as
    huggingface_hub's snapshot_download reads it offline."""
    import shutil

    commit = "89abcdef0123456789abcdef0123456789abcdef"
    repo = hf_home / "hub" / ("datasets--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    shutil.copytree(files_from, snap / "data", ignore=shutil.ignore_patterns("training_config.json"))
    if (files_from / "training_config.json").exists():  # beside the README, at the repository's root
        shutil.copy(files_from / "training_config.json", snap / "training_config.json")
    (snap / "README.md").write_text(f"# {repo_id}\n")
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap
