"""Tokenizing for the torch runtime: chat templates, the loss on assistant tokens only (the template's
generation markers where it has them, else the assistant turns' spans), completions and raw text, one batched call
for fast tokenizers, and the collator of packed rows (TRL packs them: rows.py). Training rows over the node's Arrow tables: rows.py.
"""

from __future__ import annotations

import bisect
import functools
import re
from typing import Any

from .formats import ARROW, DEFAULT_CHAT_TEMPLATE, PROMPT_COMPLETION, TEXT, DatasetError
from .records import alpaca_messages, conversation, kind


def ensure_chat_template(tokenizer: Any) -> None:
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE


def instruction_to_messages(rec: dict[str, Any]) -> list[dict[str, Any]]:
    return alpaca_messages(rec, "")


def _fmt(rec: dict[str, Any], fmt: str | None) -> str:
    return fmt or rec["_format"]


def _is_conversation(rec: dict[str, Any], fmt: str) -> bool:
    return kind(fmt) == "conversation" and not (fmt == PROMPT_COMPLETION and isinstance(rec["prompt"], str))


def _ids(tokenizer: Any, messages: list[dict[str, Any]], add_generation_prompt: bool,
         tools: list[Any] | None = None) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt,
                                        **_tools(tools))
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


def tokenize_example(tokenizer: Any, rec: dict[str, Any], fmt: str | None, max_len: int) -> dict[str, list[int]]:
    """input_ids and labels: a conversation's assistant tokens, a completion, or every token of a text (the rest
    are -100). `fmt`: the records' format, or None when each record names its own (`_format`)."""
    fmt = _fmt(rec, fmt)
    if fmt == ARROW:
        return _pretokenized(rec, max_len)
    if fmt == TEXT:
        ids = _plain(tokenizer, rec["text"], bos=True) + [tokenizer.eos_token_id]
        return {"input_ids": ids[:max_len], "labels": ids[:max_len], "truncated": int(len(ids) > max_len)}
    if not _is_conversation(rec, fmt):  # prompt/completion text: no template, the completion trains
        prompt = _plain(tokenizer, rec["prompt"], bos=True)
        completion = _plain(tokenizer, rec["completion"], bos=False) + [tokenizer.eos_token_id]
        ids = prompt + completion
        labels = [-100] * len(prompt) + completion
        return {"input_ids": ids[:max_len], "labels": labels[:max_len], "truncated": int(len(ids) > max_len)}
    messages, tools = conversation(rec, fmt)
    ids: list[int] = []
    labels: list[int] = []
    # Render prefix by prefix so each message's tokens are known exactly; robust to any template.
    prev: list[int] = []
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            prompt = _ids(tokenizer, messages[:i], add_generation_prompt=True, tools=tools) if i else []
            full = _ids(tokenizer, messages[: i + 1], add_generation_prompt=False, tools=tools)
            ids.extend(prompt[len(prev):])
            labels.extend([-100] * (len(prompt) - len(prev)))
            ids.extend(full[len(prompt):])
            labels.extend(full[len(prompt):])
            prev = full
        else:
            full = _ids(tokenizer, messages[: i + 1], add_generation_prompt=False, tools=tools)
            ids.extend(full[len(prev):])
            labels.extend([-100] * (len(full) - len(prev)))
            prev = full
    return {"input_ids": ids[:max_len], "labels": labels[:max_len], "truncated": int(len(ids) > max_len)}


def _tools(tools: list[Any] | None) -> dict[str, Any]:
    """The `tools` argument of apply_chat_template, given only when the record has tools (a template that knows
    no tools renders as before)."""
    return {"tools": tools} if tools else {}


def _plain(tokenizer: Any, text: str, *, bos: bool) -> list[int]:
    """Text without a chat template; `bos`: with the tokenizer's own start tokens (those of a new sequence)."""
    return list(tokenizer(text, add_special_tokens=bos)["input_ids"])


def _pretokenized(rec: dict[str, Any], max_len: int) -> dict[str, Any]:
    """A pre-tokenized row: `input_ids`, optional `labels` (-100 = not trained; default: every token) and optional
    `attention_mask` (positions with 0 are padding and are dropped; the collator pads again)."""
    ids = [int(i) for i in rec["input_ids"]]
    labels = [int(x) for x in rec["labels"]] if rec.get("labels") is not None else list(ids)
    mask = rec.get("attention_mask")
    if len(labels) != len(ids) or (mask is not None and len(mask) != len(ids)):
        raise DatasetError(f"a pre-tokenized row has {len(ids)} input_ids but {len(labels)} labels"
                           + (f" and {len(mask)} attention_mask values" if mask is not None else "")
                           + ": they must be the same length")
    if mask is not None:
        keep = [k for k, m in enumerate(mask) if m]
        ids, labels = [ids[k] for k in keep], [labels[k] for k in keep]
    return {"input_ids": ids[:max_len], "labels": labels[:max_len], "truncated": int(len(ids) > max_len)}


def _render(tokenizer: Any, messages: list[dict[str, Any]], add_generation_prompt: bool,
            tools: list[Any] | None = None) -> str:
    """The chat template rendered to text: compiled once with jinja2 as transformers compiles it (calling
    apply_chat_template costs 2.5x more per call, which shows on large datasets), else apply_chat_template."""
    compiled = _compiled(getattr(tokenizer, "chat_template", None))
    if compiled is not None:
        return str(compiled.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                   **tokenizer.special_tokens_map))
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                             **_tools(tools)))


_GENERATION = re.compile(r"{%-?\s*generation\s*-?%}")


@functools.lru_cache(maxsize=16)
def _compiled(template: Any) -> Any:
    """The template compiled with jinja2's public API and the settings transformers documents for chat templates
    (sandboxed, trim_blocks, lstrip_blocks, loopcontrols, `tojson`, `raise_exception`, `strftime_now`); None for
    a template this cannot compile (a `{% generation %}` block, a syntax of transformers' own)."""
    if not isinstance(template, str) or _GENERATION.search(template):
        return None
    import datetime
    import json as _json

    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False, ensure_ascii=False: \
        _json.dumps(x, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except TemplateError:
        return None


_PROBE_U, _PROBE_A = "\x00user-probe\x00", "\x00assistant-probe\x00"
_MARKERS: dict[tuple[Any, str], tuple[str, str] | None] = {}  # (template, special tokens) -> _turn_markers


def _turn_markers(tokenizer: Any) -> tuple[str, str] | None:
    """(what comes between a user message's text and the assistant's reply, what closes the reply), read from
    one rendered probe conversation; None when the template does not show them plainly."""
    key = (getattr(tokenizer, "chat_template", None), repr(sorted(tokenizer.special_tokens_map.items())))
    cache = _MARKERS
    if key not in cache:
        try:
            probe = [{"role": "user", "content": _PROBE_U}, {"role": "assistant", "content": _PROBE_A}]
            text = _render(tokenizer, probe, add_generation_prompt=False)
            u, a = text.find(_PROBE_U), text.find(_PROBE_A)
            cache[key] = (text[u + len(_PROBE_U):a], text[a + len(_PROBE_A):]) if 0 <= u < a else None
        except Exception:  # noqa: BLE001 - a template that refuses the probe takes the exact path
            cache[key] = None
    return cache[key]


def _assistant_spans(tokenizer: Any, messages: list[dict[str, Any]],
                     tools: list[Any] | None = None) -> tuple[str, list[tuple[int, int]]] | None:
    """The rendered conversation (rendered once) and the character spans of its assistant turns with their end
    tokens. Each reply is found right after a user turn's closing markers, as in the probe; None when any reply is
    not (a reply after a system or assistant turn, a template that trims or rewrites the text): then the exact
    prefix-by-prefix path is used for that example."""
    markers = _turn_markers(tokenizer)
    if markers is None or not markers[0] or any(m.get("tool_calls") or m["role"] == "tool" for m in messages):
        return None  # tool calls and results render beyond their content: the exact path marks them
    before, close = markers
    text = _render(tokenizer, messages, add_generation_prompt=False, tools=tools)
    spans, cursor = [], 0
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        if i == 0 or messages[i - 1]["role"] != "user":
            return None
        user_end = text.find(messages[i - 1]["content"], cursor)
        if user_end < 0:
            return None
        user_end += len(messages[i - 1]["content"])
        start = user_end + len(before)
        end = start + len(m["content"])
        if text[user_end:start] != before or text[start:end] != m["content"] or not text.startswith(close, end):
            return None
        spans.append((start, end + len(close)))
        cursor = end + len(close)
    return text, spans


def _with_generation_mask(tokenizer: Any, messages: list[dict[str, Any]], max_len: int,
                          tools: list[Any] | None = None) -> dict[str, Any]:
    """A template with `{% generation %}` blocks marks the trained tokens itself (transformers' assistant mask)."""
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                        **_tools(tools))
    ids = list(out["input_ids"])
    labels = [t if m else -100 for t, m in zip(ids, out["assistant_masks"], strict=True)]
    return {"input_ids": ids[:max_len], "labels": labels[:max_len], "truncated": int(len(ids) > max_len)}


def tokenize_all(tokenizer: Any, recs: list[dict[str, Any]], fmt: str | None, max_len: int,
                 dropped: list[int] | None = None) -> tuple[list[dict], int]:
    """Tokenize every example (one batched tokenizer call when the tokenizer is fast). Examples left with no
    trained token (after truncation) are skipped; their indices go to `dropped`."""
    out, truncated = [], 0
    for k, ex in enumerate(tokenize_rows(tokenizer, recs, fmt, max_len)):
        truncated += ex.pop("truncated", 0)
        if any(lbl != -100 for lbl in ex["labels"]):
            out.append(ex)
        elif dropped is not None:
            dropped.append(k)
    return out, truncated


def tokenize_rows(tokenizer: Any, recs: list[dict[str, Any]], fmt: str | None, max_len: int) -> list[dict]:
    """One row per record, in order (`truncated` set where it was cut); `fmt` None: each record's `_format`."""
    if all(_fmt(r, fmt) == ARROW for r in recs):
        rows = []
        for k, rec in enumerate(recs):
            try:
                rows.append(_pretokenized(rec, max_len))
            except DatasetError as e:
                raise DatasetError(f"row {k}: {e}") from None
        return rows
    ensure_chat_template(tokenizer)
    if not getattr(tokenizer, "is_fast", False):
        return [tokenize_example(tokenizer, rec, fmt, max_len) for rec in recs]
    return _tokenize_batched(tokenizer, recs, fmt, max_len)


def preview(tokenizer: Any, rows: list[dict[str, list[int]]], limit: int = 5) -> list[list[dict[str, Any]]]:
    """The first examples as the model sees them: runs of text, each marked trained (counts toward the loss)."""
    out = []
    for row in rows[:limit]:
        runs: list[dict[str, Any]] = []
        ids, labels = row["input_ids"], row["labels"]
        start = 0
        for i in range(1, len(ids) + 1):
            if i == len(ids) or (labels[i] != -100) != (labels[start] != -100):
                runs.append({"text": tokenizer.decode(ids[start:i]), "trained": labels[start] != -100,
                             "tokens": i - start})
                start = i
        out.append(runs)
    return out


def _tokenize_batched(tokenizer: Any, recs: list[dict[str, Any]], fmt: str | None, max_len: int) -> list[dict]:
    rendered: list[tuple[int, str, list[tuple[int, int]]]] = []
    rows: list[dict | None] = [None] * len(recs)
    marked = bool(_GENERATION.search(str(getattr(tokenizer, "chat_template", "") or "")))
    for k, rec in enumerate(recs):
        f = _fmt(rec, fmt)
        if not _is_conversation(rec, f):
            rows[k] = tokenize_example(tokenizer, rec, f, max_len)
            continue
        messages, tools = conversation(rec, f)
        if marked:
            rows[k] = _with_generation_mask(tokenizer, messages, max_len, tools)
            continue
        found = _assistant_spans(tokenizer, messages, tools)
        if found is None:
            rows[k] = tokenize_example(tokenizer, rec, f, max_len)
        else:
            rendered.append((k, *found))
    if rendered:
        texts = [r[1] for r in rendered]
        for (k, text, spans), (ids, first_token_at) in zip(rendered, _encode(tokenizer, texts), strict=True):
            # Tokens are in text order, so each assistant span is one contiguous run of tokens.
            labels = [-100] * len(ids)
            for a, b in spans:
                lo, hi = first_token_at(a), (first_token_at(b) if b < len(text) else len(ids))
                labels[lo:hi] = ids[lo:hi]
            rows[k] = {"input_ids": ids[:max_len], "labels": labels[:max_len], "truncated": int(len(ids) > max_len)}
    return [r for r in rows if r is not None]


def _encode(tokenizer: Any, texts: list[str]) -> list[tuple[list[int], Any]]:
    """Token ids of each text, without special tokens, in one batched call, each with `first_token_at(char)`: the
    index of the first token that starts at or after that character.

    The `tokenizers` backend directly when the tokenizer has one: transformers' wrapper converts every encoding,
    offsets included, to Python lists first (a third of the time on large datasets); here only the ids are, and a
    boundary asks the encoding itself (`char_to_token`). Else the tokenizer's own call, with offsets.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "encode_batch"):
        backend.no_truncation()
        backend.no_padding()
        return [(e.ids, functools.partial(_first_token_at, e)) for e in backend.encode_batch(texts,
                                                                                            add_special_tokens=False)]
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for ids, offsets in zip(enc["input_ids"], enc["offset_mapping"], strict=True):
        starts = [o[0] for o in offsets]
        out.append((ids, functools.partial(bisect.bisect_left, starts)))
    return out


def _first_token_at(encoding: Any, char: int) -> int:
    t = encoding.char_to_token(char)
    if t is None:  # a character no token covers (a normalizer dropped it): search the offsets
        return bisect.bisect_left([o[0] for o in encoding.offsets], char)
    return t if encoding.token_to_chars(t)[0] >= char else t + 1


class PackedCollator:
    """Pads packed rows to the longest in the batch; sends position_ids and no attention_mask, so transformers
    builds a block-diagonal causal mask and packed examples never attend to each other.

    A row comes from TRL's `pack_dataset` (its `seq_lengths`: the length of each example in it), or holds its own
    `position_ids` (raw-text blocks). Position ids restart at each example, and each example's first label is
    masked: nothing in its own example predicts it."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad = pad_token_id

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        width = max(len(f["input_ids"]) for f in features)
        ids, labels, pos = [], [], []
        for f in features:
            row_labels, row_pos = list(f["labels"]), f.get("position_ids")
            if row_pos is None:
                row_pos = []
                for n in f["seq_lengths"]:
                    row_labels[len(row_pos)] = -100
                    row_pos.extend(range(n))
            gap = width - len(f["input_ids"])
            ids.append(list(f["input_ids"]) + [self.pad] * gap)
            labels.append(row_labels + [-100] * gap)
            pos.append(list(row_pos) + list(range(gap)))  # padding is its own isolated "example"
        return {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels), "position_ids": torch.tensor(pos)}
