"""Build a tiny TensorFlow (tf-keras) causal language model and a tokenizer trained locally (no hub needed).

`python -m cleverthis_runtime.tf_tiny OUT DATA...` in the TensorFlow environment (.venv-tf) writes a TF base
model folder as `framework: tensorflow` jobs read it:

  OUT/model.keras             a tf-keras model: int token ids [batch, seq] -> next-token logits [batch, seq, vocab]
  OUT/tokenizer.json          a `tokenizers` byte-level BPE trained on the data
  OUT/tokenizer_config.json   its special tokens (bos, eos, pad, unk) and the chat template
  OUT/cleverthis_model.json   {"framework": "tensorflow", ...}: what built it

The model uses built-in layers only (Embedding, GRU, Dense), so `tf_keras.models.load_model(OUT/model.keras)`
loads it (and every checkpoint of a job trained from it) without custom objects.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

MODEL_FILE = "model.keras"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
MARKER_FILE = "cleverthis_model.json"
TOKENIZER_FILES = (TOKENIZER_FILE, TOKENIZER_CONFIG, "special_tokens_map.json")


def build_model(vocab_size: int, hidden: int = 64, layers: int = 1, seed: int = 0):
    """The tiny architecture: token embedding, `layers` causal GRUs, a projection to the vocabulary."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tf_keras

    tf_keras.utils.set_random_seed(seed)
    ids = tf_keras.Input(shape=(None,), dtype="int32", name="input_ids")
    x = tf_keras.layers.Embedding(vocab_size, hidden, name="embed")(ids)
    for i in range(layers):
        x = tf_keras.layers.GRU(hidden, return_sequences=True, name=f"gru_{i}")(x)
    logits = tf_keras.layers.Dense(vocab_size, name="lm_head")(x)
    return tf_keras.Model(ids, logits, name="tiny_tf_lm")


def train_tokenizer(out: Path, data_paths: list[str], vocab_size: int) -> int:
    """A byte-level BPE (the same recipe as tiny.py's) saved as tokenizer.json + tokenizer_config.json."""
    from .data import DEFAULT_CHAT_TEMPLATE
    from .tiny import train_bpe

    tok = train_bpe(data_paths, vocab_size)
    tok.save(str(out / TOKENIZER_FILE))
    (out / TOKENIZER_CONFIG).write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
        "chat_template": DEFAULT_CHAT_TEMPLATE, "tokenizer_class": "PreTrainedTokenizerFast",
    }, indent=2))
    return tok.get_vocab_size()


def build_tf_tiny_model(out_dir: str, data_paths: list[str], *, vocab_size: int = 512, hidden: int = 64,
                        layers: int = 1, seed: int = 0) -> str:
    """Write the tokenizer and a randomly initialised tiny model to out_dir; idempotent."""
    out = Path(out_dir)
    if (out / MODEL_FILE).exists() and (out / TOKENIZER_FILE).exists():
        return str(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    vocab = train_tokenizer(tmp, data_paths, vocab_size)
    model = build_model(vocab, hidden, layers, seed)
    model.save(str(tmp / MODEL_FILE), save_format="keras_v3")  # the native format in any thread (tf_checkpoints)
    (tmp / MARKER_FILE).write_text(json.dumps({
        "framework": "tensorflow", "architecture": "embedding-gru-lm", "vocab_size": vocab, "hidden": hidden,
        "layers": layers, "parameters": int(model.count_params()),
    }, indent=2))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return str(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("data", nargs="+", help="JSONL files or folders the tokenizer is trained on")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--vocab-size", type=int, default=512)
    a = ap.parse_args(argv)
    print(build_tf_tiny_model(a.out_dir, a.data, vocab_size=a.vocab_size, hidden=a.hidden, layers=a.layers))


if __name__ == "__main__":
    main()
