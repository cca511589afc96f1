"""`framework: tensorflow`, the driver's side: what needs no TensorFlow (the base model check, what the
framework refuses or ignores of a training config, the pre-flight's facts and plan, the chat tokenizer) and
the driver that starts Ray Train's TensorflowTrainer. The workers' loop is tf_train.py.

A TF base model is a folder at a local path (transformers 5 has no TensorFlow models): `model.keras` (a tf-keras
model mapping int token ids [batch, seq] to next-token logits [batch, seq, vocab]) plus `tokenizer.json` (and
optionally `tokenizer_config.json` naming bos/eos/pad). `cleverthis_runtime.tf_tiny` makes one.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any

from .data import ARROW, PROMPT_COMPLETION, TEXT
from .records import conversation
from .spec import JobSpec, TrainingConfig

MODEL_FILE = "model.keras"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
COPIED_FILES = (TOKENIZER_FILE, TOKENIZER_CONFIG, "special_tokens_map.json", "cleverthis_model.json")
STRATEGY = "multi_worker_mirrored"


class TFModelError(ValueError):
    """The base model is not a TF model folder this runtime can train."""


# -- driver -----------------------------------------------------------------------------------------------------
def check_base_model(path: str) -> None:
    """A TF base model (or a TF checkpoint) is a local folder with model.keras and tokenizer.json."""
    p = Path(path)
    missing = [f for f in (MODEL_FILE, TOKENIZER_FILE) if not (p / f).is_file()]
    if not p.is_dir() or missing:
        what = "is not a folder on this node" if not p.is_dir() else f"has no {' or '.join(missing)}"
        raise TFModelError(
            f"base_model {path} {what}: framework tensorflow trains a tf-keras model saved in a local folder "
            f"({MODEL_FILE} + {TOKENIZER_FILE}), or continues a tensorflow checkpoint (transformers has no "
            f"TensorFlow models; build a tiny one with `python -m cleverthis_runtime.tf_tiny OUT DATA`)"
        )


REJECTED = "framework tensorflow does not support LoRA or DeepSpeed"


def unsupported_config(tc: TrainingConfig) -> list[tuple[str, str]]:
    """(field, message) for the merged training config's requests a tensorflow job cannot honour (the page:
    "Does not support LoRA or DeepSpeed"); training_config.json beside the data counts, not only the spec."""
    out = []
    if tc.method in ("lora", "qlora"):
        out.append(("training_config.method", f"{REJECTED}: method '{tc.method}' (set method 'full')"))
    if tc.quantization is not None:
        out.append(("training_config.quantization", f"{REJECTED}: quantization is for QLoRA"))
    if tc.deepspeed is not None:
        out.append(("training_config.deepspeed", f"{REJECTED}: remove 'deepspeed'"))
    if tc.chat_template not in (None, "default"):
        out.append(("training_config.chat_template", "tensorflow jobs use the runtime's default chat template: "
                                                     "remove chat_template (or set it to default)"))
    if tc.eval_steps is not None:
        out.append(("training_config.eval_steps", "tensorflow jobs validate at epoch ends only: remove eval_steps"))
    if tc.early_stopping_patience is not None:
        out.append(("training_config.early_stopping_patience", "tensorflow jobs run every epoch (no early "
                                                               "stopping): remove early_stopping_patience"))
    if set(tc.report_to) - {"tensorboard", "none"}:
        out.append(("training_config.report_to", "tensorflow jobs report to the job's own events only: "
                                                 "remove mlflow and wandb from report_to"))
    return out


def preflight_facts(spec: JobSpec, tc: TrainingConfig, ds: Any, out: dict[str, Any], err: Any) -> None:
    """The pre-flight's model facts for a TF base model (no TensorFlow needed): token lengths and the plan."""
    import statistics

    try:
        check_base_model(spec.base_model)
        rows, truncated = ChatTokenizer(spec.base_model).rows(ds.head(2000), None, tc.max_seq_length)
    except Exception as e:
        err("base_model", f"cannot load {spec.base_model}: {str(e).splitlines()[0][:300]}")
        return
    lengths = sorted(len(ids) for ids, _ in rows) or [0]
    out["token_lengths"] = {
        "sampled": len(lengths), "min": lengths[0], "max": lengths[-1],
        "mean": round(statistics.fmean(lengths), 1), "p50": lengths[len(lengths) // 2],
        "p95": lengths[min(len(lengths) - 1, int(len(lengths) * 0.95))], "truncated": truncated,
    }
    try:
        params = float(json.loads((Path(spec.base_model) / "cleverthis_model.json").read_text())["parameters"])
    except (OSError, ValueError, KeyError, TypeError):
        params = None
    out["parameters"] = params
    out["plan"] = plan(params)
    out["warnings"].extend(warnings(tc))
    if spec.workers > 1:
        out["warnings"].append(EXPOSED)


# TensorFlow's gRPC server binds every interface (no setting chooses one); torch jobs listen on their node's
# address only (compat.py). docs/clusters.md, "Security".
EXPOSED = ("TensorFlow's workers listen for each other on every network interface of their machines while the "
           "job runs (TensorFlow cannot be told one address): on a shared or exposed machine, use one worker or "
           "a firewall")


def plan(params: float | None) -> dict[str, Any]:
    return {"method": "full", "precision": "fp32", "strategy": STRATEGY, "gradient_checkpointing": False,
            "memory_estimate_gb": {"full": round(params * 16 / 1e9, 3)} if params else {}, "batching": "padded",
            "reasons": {"batching": ("padded: framework tensorflow pads every row to the data's longest example "
                                     "(one compiled step shape), in an order seeded per epoch"),
                        "method": "framework tensorflow trains all weights (no LoRA)",
                        "strategy": "MultiWorkerMirroredStrategy: a full replica per worker, gradients all-reduced",
                        "precision": "fp32 (weights, gradients and two Adam moments: 16 bytes per parameter)"}}


def warnings(tc: TrainingConfig) -> list[str]:
    """What a tensorflow job ignores of the training config (said in `warning` events, not refused)."""
    out = []
    if tc.packing:
        out.append("packing is not implemented for framework tensorflow: examples are padded, one per row")
    if tc.group_by_length:
        out.append("group_by_length is not implemented for framework tensorflow: every row is padded to the data's "
                   "longest example")
    if tc.gradient_accumulation_steps > 1:
        out.append("gradient_accumulation_steps is not implemented for framework tensorflow: one micro-batch "
                   "per optimizer step")
    if tc.mixed_precision not in (None, "no"):
        out.append(f"mixed_precision {tc.mixed_precision} is ignored for framework tensorflow (fp32)")
    if tc.strategy == "fsdp":
        out.append("strategy fsdp is a torch strategy: framework tensorflow uses MultiWorkerMirroredStrategy")
    if tc.gradient_checkpointing:
        out.append("gradient_checkpointing is not implemented for framework tensorflow")
    return out


def run_driver(spec: JobSpec, job: str, loop_config: dict[str, Any]) -> None:
    """The driver's half (the `tensorflow` Backend's fit): TensorflowTrainer with the workers."""
    from ray.train.tensorflow import TensorflowTrainer

    from .control import drive
    from .tf_train import train_loop

    tc = TrainingConfig.model_validate(loop_config["training_config"])
    rejected = unsupported_config(tc)
    if rejected:
        raise ValueError("; ".join(f"{f}: {m}" for f, m in rejected))
    drive(TensorflowTrainer, train_loop, spec, job, loop_config, tc, framework="tensorflow")


# -- the chat tokenizer (tokenizers only) ------------------------------------------------------------------
def _tokenizer_config(folder: str) -> dict[str, Any]:
    f = Path(folder) / TOKENIZER_CONFIG
    if not f.is_file():
        return {}
    try:
        return json.loads(f.read_text())
    except ValueError:
        return {}


def _token(cfg: dict[str, Any], key: str, default: str) -> str:
    v = cfg.get(key, default)
    if isinstance(v, dict):
        v = v.get("content", default)
    return str(v or default)


class ChatTokenizer:
    """tokenizer.json + the runtime's default chat template (data.DEFAULT_CHAT_TEMPLATE), without transformers."""

    def __init__(self, folder: str) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(Path(folder) / TOKENIZER_FILE))
        cfg = _tokenizer_config(folder)
        self.eos = _token(cfg, "eos_token", "</s>")
        ids = [self.tok.token_to_id(_token(cfg, "pad_token", "<pad>")), self.tok.token_to_id(self.eos), 0]
        self.pad_id = next(i for i in ids if i is not None)

    def render(self, messages: list[dict[str, Any]]) -> tuple[str, list[tuple[int, int]]]:
        """The conversation as text (data.DEFAULT_CHAT_TEMPLATE's layout, tool calls as <tool_call> blocks) and
        the character spans of the assistant turns (content + end token)."""
        text, spans = "", []
        for m in messages:
            text += f"<|{m['role']}|>\n"
            start = len(text)
            body = f"<tool_response>\n{m['content']}\n</tool_response>" if m["role"] == "tool" else m["content"]
            for j, c in enumerate(m.get("tool_calls") or []):
                call = json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]},
                                  ensure_ascii=False)
                body += ("\n" if body or j else "") + f"<tool_call>\n{call}\n</tool_call>"
            text += f"{body}{self.eos}\n"
            if m["role"] == "assistant":
                spans.append((start, len(text)))
        return text, spans

    def rows(self, records: list[dict[str, Any]], fmt: str | None,
             max_len: int) -> tuple[list[tuple[list[int], list[int]]], int]:
        """(input_ids, labels) per example, labels -100 outside the assistant turns (raw text and text prompts:
        outside the text or the completion); and how many were cut. `fmt` None: each record's `_format`."""
        out, truncated = [], 0
        rendered = []
        for r in records:
            f = fmt or r["_format"]
            if f == ARROW:
                ids = list(r["input_ids"])
                out.append((ids[:max_len], list(r.get("labels") or ids)[:max_len]))
                truncated += int(len(ids) > max_len)
            elif f == TEXT or (f == PROMPT_COMPLETION and isinstance(r["prompt"], str)):
                prompt = r.get("prompt", "")
                text = (r["text"] if f == TEXT else prompt + r["completion"]) + self.eos
                rendered.append((text, [(len(prompt) if f != TEXT else 0, len(text))]))
            else:
                rendered.append(self.render(conversation(r, f)[0]))
        if rendered:
            encs = self.tok.encode_batch([t for t, _ in rendered], add_special_tokens=False)
            for (_, spans), enc in zip(rendered, encs, strict=True):
                ids = list(enc.ids)
                starts = [o[0] for o in enc.offsets]
                labels = [-100] * len(ids)
                for a, b in spans:
                    lo, hi = bisect.bisect_left(starts, a), bisect.bisect_left(starts, b)
                    labels[lo:hi] = ids[lo:hi]
                out.append((ids[:max_len], labels[:max_len]))
                truncated += int(len(ids) > max_len)
        kept = [(i, lab) for i, lab in out if len(i) >= 2 and any(x != -100 for x in lab[1:])]
        return kept, truncated


class TensorflowBackend:
    """The `Backend` of framework tensorflow (backend.py)."""

    framework = "tensorflow"
    environment = "tensorflow"  # the TensorFlow environment (`cleverthis-train setup tensorflow`)
    # tf-keras, because Keras 3 `fit` fails under MultiWorkerMirroredStrategy
    env_vars = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}

    def check_base_model(self, path: str) -> None:
        check_base_model(path)

    def refusals(self, tc: TrainingConfig) -> list[tuple[str, str]]:
        return unsupported_config(tc)

    def preflight_facts(self, spec: JobSpec, tc: TrainingConfig, ds: Any, out: dict[str, Any], err: Any, *,
                        quick: bool = False) -> None:
        if not quick and ds is not None:
            preflight_facts(spec, tc, ds, out, err)

    def fit(self, spec: JobSpec, job: str, loop_config: dict[str, Any]) -> None:
        run_driver(spec, job, loop_config)
