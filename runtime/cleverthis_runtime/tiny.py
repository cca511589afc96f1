"""Build a tiny Llama-architecture base model and a tokenizer trained locally (no model hub needed).

Used by `make demo`, the tests and the example notebooks: `python -m cleverthis_runtime.tiny OUT DATA...`.
The result is a normal `save_pretrained` folder, loaded by the runtime's real loading code.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from pathlib import Path

SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]


def _texts(paths: list[str]) -> Iterator[str]:
    for p in paths:
        files = sorted(Path(p).glob("*.jsonl")) if Path(p).is_dir() else [Path(p)]
        for f in files:
            for line in f.read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                rec = json.loads(line)
                if "messages" in rec:
                    for m in rec["messages"]:
                        yield m["content"]
                else:
                    yield " ".join(str(rec.get(k, "")) for k in ("instruction", "input", "output"))


def build_tiny_model(
    out_dir: str, data_paths: list[str], *, vocab_size: int = 512, hidden: int = 64, layers: int = 2, seed: int = 0
) -> str:
    """Write a tokenizer and a randomly initialised LlamaForCausalLM to out_dir; idempotent."""
    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return str(out)
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from .data import DEFAULT_CHAT_TEMPLATE

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    texts = list(_texts(data_paths)) + ["<|user|>\n", "<|assistant|>\n", "<|system|>\n"]
    tok.train_from_iterator(texts, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    hf_tok.chat_template = DEFAULT_CHAT_TEMPLATE
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    hf_tok.save_pretrained(tmp)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        bos_token_id=hf_tok.bos_token_id,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(tmp)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    os.replace(tmp, out)
    return str(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out_dir")
    ap.add_argument("data", nargs="+", help="JSONL files or folders the tokenizer is trained on")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab-size", type=int, default=512)
    a = ap.parse_args(argv)
    print(build_tiny_model(a.out_dir, a.data, vocab_size=a.vocab_size, hidden=a.hidden, layers=a.layers))


if __name__ == "__main__":
    main()
