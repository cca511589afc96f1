"""Build a tiny base model (Llama by default, or any family in ARCHITECTURES) and a tokenizer trained locally (no model hub needed).

Used by `make demo`, the tests and the example notebooks: `python -m cleverthis_runtime.tiny OUT DATA...`.
The result is a normal `save_pretrained` folder, loaded by the runtime's real loading code.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]


def texts(paths: list[str]) -> Iterator[str]:
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


# The families the product page lists, each built from its own transformers config (tiny sizes, real layout).
ARCHITECTURES = ("llama", "mistral", "mixtral", "gemma", "falcon", "gpt2", "qwen2", "phi3")


def train_bpe(data_paths: list[str], vocab_size: int) -> Any:
    """A byte-level BPE `tokenizers.Tokenizer` trained on the datasets' texts and the chat template's markers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = list(texts(data_paths)) + ["<|user|>\n", "<|assistant|>\n", "<|system|>\n"]
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def tiny_config(arch: str, *, vocab_size: int, hidden: int, layers: int, bos: int, eos: int, pad: int) -> Any:
    """A tiny config of `arch` (one of ARCHITECTURES), 4 attention heads, no tied embeddings."""
    import transformers as tf

    ids = {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad, "vocab_size": vocab_size,
           "tie_word_embeddings": False}
    common = {"hidden_size": hidden, "intermediate_size": hidden * 2, "num_hidden_layers": layers,
              "num_attention_heads": 4, "max_position_embeddings": 1024, **ids}
    if arch == "llama":
        return tf.LlamaConfig(num_key_value_heads=4, **common)
    if arch == "mistral":
        return tf.MistralConfig(num_key_value_heads=2, sliding_window=None, **common)
    if arch == "mixtral":
        return tf.MixtralConfig(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                                sliding_window=None, **common)
    if arch == "gemma":
        return tf.GemmaConfig(num_key_value_heads=2, head_dim=hidden // 4, **common)
    if arch == "qwen2":
        return tf.Qwen2Config(num_key_value_heads=2, **common)
    if arch == "phi3":
        return tf.Phi3Config(num_key_value_heads=4, **common)
    if arch == "falcon":
        return tf.FalconConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                               new_decoder_architecture=False, multi_query=True, parallel_attn=True,
                               max_position_embeddings=1024, **ids)
    if arch == "gpt2":
        return tf.GPT2Config(n_embd=hidden, n_layer=layers, n_head=4, n_positions=1024, **ids)
    raise ValueError(f"unknown architecture '{arch}'; one of {', '.join(ARCHITECTURES)}")


def build_tiny_model(
    out_dir: str, data_paths: list[str], *, vocab_size: int = 512, hidden: int = 64, layers: int = 2, seed: int = 0,
    arch: str = "llama",
) -> str:
    """Write a tokenizer and a randomly initialised model of `arch` (default Llama) to out_dir; idempotent."""
    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return str(out)
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from .data import DEFAULT_CHAT_TEMPLATE

    tok = train_bpe(data_paths, vocab_size)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    hf_tok.chat_template = DEFAULT_CHAT_TEMPLATE
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    hf_tok.save_pretrained(tmp)

    torch.manual_seed(seed)
    config = tiny_config(arch, vocab_size=len(hf_tok), hidden=hidden, layers=layers, bos=hf_tok.bos_token_id,
                         eos=hf_tok.eos_token_id, pad=hf_tok.pad_token_id)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp)
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
    ap.add_argument("--arch", default="llama", choices=ARCHITECTURES)
    a = ap.parse_args(argv)
    print(build_tiny_model(a.out_dir, a.data, vocab_size=a.vocab_size, hidden=a.hidden, layers=a.layers,
                           arch=a.arch))


if __name__ == "__main__":
    main()
