"""Chat with a checkpoint: generation on the cluster, the answer streamed as it is generated.

`python -m cleverthis_runtime.chat` runs as a short Ray job (the service's `chat`, the `ChatWithCheckpoint`
widget). Its request is JSON in $CLEVERTHIS_CHAT: {sources: [{path, label}], messages, max_new_tokens,
temperature, top_p, serve}. Each source is a model folder (a checkpoint, or any model) answered in turn, the
same prompt for each (side by side). The prompt goes through the folder's tokenizer's chat template (the one
the job trained with: checkpoints keep it), or is the last message's text when the tokenizer has none.

A LoRA checkpoint is served from its merged weights (`serve: merged`, at the checkpoint's root), or as the
original base plus its `adapter_model/` through peft (`serve: adapter`); `served_as` in the answer says which.
Events: `chat_text` {index, text} for each piece of the answer as the model generates it, `chat_answer`
{index, label, path, served_as, text, new_tokens, seconds} per source, then `chat` {answers} (or {error}).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from . import checkpoints, compat, events

SERVE = ("merged", "adapter")


class _Pieces:
    """A transformers streamer (`put`/`end`): decodes the new tokens so far and emits what was added."""

    def __init__(self, tokenizer: Any, index: int, prompt_len: int) -> None:
        self.tokenizer, self.index, self.prompt_len = tokenizer, index, prompt_len
        self.ids: list[int] = []
        self.sent = ""
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        ids = value.reshape(-1).tolist()
        if not self._prompt_seen:  # generate() first passes the prompt itself
            self._prompt_seen = True
            if len(ids) == self.prompt_len:
                return
        self.ids.extend(ids)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # a character cut in the middle: wait for its other bytes
            return
        if text.startswith(self.sent) and len(text) > len(self.sent):
            events.emit("chat_text", index=self.index, text=text[len(self.sent):])
            self.sent = text

    def end(self) -> None:
        return None


def _load(path: str, serve: str, torch: Any) -> tuple[Any, Any, str]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(path)
    adapter = folder / checkpoints.ADAPTER_DIR
    if not (folder / "config.json").is_file() and not adapter.is_dir():
        raise ValueError(f"'{path}' is not a model folder: it has no config.json")
    if not (folder / "config.json").is_file():  # a LoRA epoch that was neither best nor final: the adapter alone
        serve = "adapter"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    if serve == "adapter":
        if not adapter.is_dir():
            raise ValueError(f"'{path}' has no LoRA adapter ({checkpoints.ADAPTER_DIR}/): serve it merged")
        from peft import PeftModel

        base = checkpoints.original_base(str(folder))
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=dtype), str(adapter))
        how = f"base {base} plus the LoRA adapter"
    else:
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
        how = "merged weights" if adapter.is_dir() else "the model's weights"
    return model.to(device).eval(), tokenizer, how


def _prompt_ids(tokenizer: Any, messages: list[dict[str, str]], torch: Any) -> Any:
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer(text, return_tensors="pt", add_special_tokens=False)
    return tokenizer(messages[-1]["content"], return_tensors="pt")


def answer(index: int, source: dict[str, str], request: dict[str, Any]) -> dict[str, Any]:
    import torch

    serve = request.get("serve") or "merged"
    model, tokenizer, how = _load(source["path"], serve, torch)
    inputs = _prompt_ids(tokenizer, request["messages"], torch).to(model.device)
    n_prompt = int(inputs["input_ids"].shape[1])
    temperature = float(request.get("temperature") or 0.0)
    sampling: dict[str, Any] = (
        {"do_sample": True, "temperature": temperature, "top_p": float(request.get("top_p") or 1.0)}
        if temperature > 0 else {"do_sample": False})
    if "seed" in request:
        torch.manual_seed(int(request["seed"]))
    streamer = _Pieces(tokenizer, index, n_prompt)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=int(request.get("max_new_tokens") or 64), streamer=streamer,
                             pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                             else tokenizer.eos_token_id, **sampling)
    new = out[0, n_prompt:]
    text = tokenizer.decode(new, skip_special_tokens=True)
    if text != streamer.sent and text.startswith(streamer.sent):  # what the streamer held back at the end
        events.emit("chat_text", index=index, text=text[len(streamer.sent):])
    return {"index": index, "label": source.get("label") or source["path"], "path": source["path"],
            "served_as": how, "text": text, "new_tokens": int(new.shape[0]),
            "seconds": round(time.perf_counter() - t0, 3)}


def main() -> int:
    events.set_source("chat")
    events.keep_in_ray_logs()
    compat.quiet_peft_checkpointing_warning()
    try:
        request = json.loads(os.environ.get("CLEVERTHIS_CHAT") or "{}")
        if request.get("serve", "merged") not in SERVE:
            raise ValueError(f"serve must be one of {', '.join(SERVE)}")
        answers = []
        for i, source in enumerate(request["sources"]):
            a = answer(i, source, request)
            events.emit("chat_answer", **a)
            answers.append(a)
    except (OSError, ValueError, KeyError) as e:
        events.emit("chat", error=str(e))
        return 1
    events.emit("chat", answers=answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
