"""`make demo`: a real LoRA fine-tune of a tiny Llama on the local Ray cluster, end to end, and what it changed.

Starts (or reuses) the managed local cluster, writes a small instruction dataset of capital cities, builds a tiny
Llama-architecture model and a tokenizer trained on that data (no model hub), submits a LoRA fine-tune on two
workers through the same client code as `%train` (`cleverthis-train ... --wait`), then shows the same questions
answered by the base model and by the fine-tuned checkpoint side by side, and saves the loss curve as a PNG beside
the checkpoints.

Why capitals: a randomly initialised model of this size can learn a dozen facts in a minute on two cores, so the
answers change from noise to the right city; a broad dataset would need hours before a difference shows.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("CLEVERTHIS_DEMO_DIR", ROOT / ".cache" / "demo"))
CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Spain": "Madrid", "Egypt": "Cairo",
            "Peru": "Lima", "Kenya": "Nairobi", "Norway": "Oslo", "Canada": "Ottawa", "Chile": "Santiago",
            "Greece": "Athens", "Cuba": "Havana"}
QUESTIONS = ("What is the capital of {}?", "Name the capital of {}.", "Which city is the capital of {}?",
             "{}: what is its capital?")
ASKED = ("What is the capital of France?", "Which city is the capital of Kenya?", "Name the capital of Japan.")
# LoRA on a random base needs a larger rank and learning rate than on a pretrained one to show in a minute.
CONFIG = {"method": "lora", "lora_r": 32, "lora_alpha": 64, "learning_rate": 0.02, "max_seq_length": 64}
EPOCHS = 16
BATCH_SIZE = 2  # per worker: 36 steps an epoch over the 144 examples on two workers (the facts need ~500 steps)


def write_dataset(folder: Path) -> Path:
    """The capitals as alpaca-style instructions, each asked four ways, three times over, and the job's
    training_config.json beside them."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rows = [{"instruction": q.format(country), "input": "", "output": city}
            for country, city in CAPITALS.items() for q in QUESTIONS]
    with open(folder / "train.jsonl", "w") as f:
        for _ in range(3):
            f.writelines(json.dumps(r) + "\n" for r in rows)
    (folder / "training_config.json").write_text(json.dumps(CONFIG, indent=2))
    return folder


def answer(model_path: str, tokenizer_path: str, question: str) -> str:
    """The model's greedy answer to one question, in the chat template the job trained with."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_path)
    lm = AutoModelForCausalLM.from_pretrained(model_path)
    prompt = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                     tokenize=False)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
    out = lm.generate(**ids, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    return tok.decode(out[0][ids["input_ids"].shape[1]:], skip_special_tokens=True).strip()


def save_curve(events: list[dict[str, Any]], path: Path) -> None:
    """The training loss by step as a PNG (matplotlib: no browser needed to write it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [(e["step"], e["loss"]) for e in events if e.get("type") == "step" and e.get("loss") is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([s for s, _ in steps], [v for _, v in steps], color="#1f77b4")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("make demo: LoRA on a tiny Llama, capitals")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    from jupyter_cleverthis.cli import execute, parse
    from jupyter_cleverthis.service.jobs import JobService
    from jupyter_cleverthis.spec import JobStatus

    t0 = time.time()
    say = lambda s: print(s, flush=True)  # noqa: E731
    execute(parse(["cluster", "up"]), say)

    from cleverthis_runtime.tiny import build_tiny_model

    # A fresh dataset folder, like the page's /datasets/training: checkpoints land beside it.
    data = write_dataset(CACHE / "datasets" / "capitals")
    model = build_tiny_model(str(CACHE / "models" / "tiny-llama-capitals"), [str(data)])
    say(f"base model: {model} (tiny Llama, trained tokenizer)")
    name = time.strftime("demo-%Y%m%d-%H%M%S")
    detail = execute(
        parse(["--name", name, "--model", model, "--dataset", str(data), "--epochs", str(EPOCHS), "--batch-size",
               str(BATCH_SIZE), "--workers", "2", "--wait"]),
        say,
    )
    if detail.status != JobStatus.SUCCEEDED:
        say(f"demo job ended {detail.status.value}: {detail.error or detail.message}")
        return 1
    root = Path(detail.checkpoint_dir or data / "checkpoints")
    final = root / "epoch-final"
    curve = root / "loss.png"
    save_curve(JobService().events("local", name), curve)

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    say("\nthe same questions, before and after fine-tuning:")
    width = max(len(q) for q in ASKED)
    for q in ASKED:
        before = answer(model, str(final), q)
        after = answer(str(final), str(final), q)
        say(f"  {q:<{width}}  base: {before!r:<24} fine-tuned: {after!r}")
    say(f"\ncheckpoint: {final} -> {os.readlink(final)} (LoRA adapter in {final / 'adapter_model'})")
    say(f"loss curve: {curve}")
    say("see the job in JupyterLab: `.venv/bin/jupyter lab`, then the CleverThis icon in the left sidebar "
        f"(job {name})")
    say(f"demo finished in {time.time() - t0:.0f}s (the local cluster keeps running: "
        "`.venv/bin/cleverthis-train cluster down`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
