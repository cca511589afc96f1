"""The record shapes users bring, detected per record, and what each becomes for training.

Every conversational shape becomes one conversation (`messages`, each `{role, content}` with string content and
optional `tool_calls`, plus the record's `tools`): the chat template renders it and only the assistant turns train.
The others keep their own meaning: `prompt`/`completion` text trains on the completion, raw `text` on every token,
and pre-tokenized rows (`input_ids`) as given.

| format | keys | becomes |
|---|---|---|
| instruction (alpaca) | instruction, output; optional input, system, history | system, history turns, user, assistant |
| chatml (OpenAI messages) | messages; optional tools | the messages (content parts joined, tool calls kept) |
| sharegpt | conversations (from/value); optional system, tools | the turns, roles mapped as LLaMA-Factory maps them |
| prompt_completion | prompt, completion (text, or message lists) | text: trained on the completion; lists: a conversation |
| text | text | documents for causal-LM training on every token |
| arrow (pre-tokenized) | input_ids; optional labels, attention_mask | the token ids as given |

Each check raises `DatasetError` naming the record (`where`: the file and line, or the row) and the key at fault.
"""

from __future__ import annotations

import json
from typing import Any

from .formats import ARROW, CHATML, INSTRUCTION, PROMPT_COMPLETION, SHAREGPT, TEXT, DatasetError

#: What a record of each format must hold (for the "closest format" of an unknown shape).
REQUIRED: dict[str, tuple[str, ...]] = {
    CHATML: ("messages",),
    SHAREGPT: ("conversations",),
    INSTRUCTION: ("instruction", "output"),
    PROMPT_COMPLETION: ("prompt", "completion"),
    TEXT: ("text",),
    ARROW: ("input_ids",),
}
#: Formats whose records become a conversation (several of them may share one dataset).
CONVERSATIONAL = (CHATML, SHAREGPT, INSTRUCTION, PROMPT_COMPLETION)
OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")
#: ShareGPT's role names (LLaMA-Factory's defaults and the usual variants) -> OpenAI roles.
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "bot": "assistant",
                  "model": "assistant", "system": "system", "function_call": "assistant", "observation": "tool",
                  "tool": "tool", "function": "tool"}


def kind(fmt: str) -> str:
    """"conversation", "text" or "tokens": formats of one kind may share a dataset."""
    if fmt == TEXT:
        return "text"
    if fmt == ARROW:
        return "tokens"
    return "conversation"


def apply_columns(rec: Any, columns: dict[str, str] | None) -> Any:
    """training_config.columns maps the runtime's key to the file's key: {"instruction": "question"}."""
    if not columns or not isinstance(rec, dict):
        return rec
    out = dict(rec)
    for ours, theirs in columns.items():
        if theirs in out and ours not in rec:
            out[ours] = out.pop(theirs)
    return out


def detect(rec: Any, where: str) -> str:
    """The record's format, after checking it can be trained on; DatasetError names the key at fault."""
    if not isinstance(rec, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    present = {k for k, v in rec.items() if v is not None}
    if "messages" in present:
        _openai_messages(rec["messages"], where, "messages")
        _tools(rec.get("tools"), where)
        return CHATML
    if "conversations" in present:
        sharegpt_messages(rec, where)
        _tools(rec.get("tools"), where)
        return SHAREGPT
    if "instruction" in present or "output" in present:
        alpaca_messages(rec, where)
        return INSTRUCTION
    if "prompt" in present and "completion" in present:
        _prompt_completion(rec, where)
        return PROMPT_COMPLETION
    if "text" in present:
        if not isinstance(rec["text"], str):
            raise DatasetError(f"{where}: 'text' must be a string, got {type(rec['text']).__name__}")
        return TEXT
    if "input_ids" in present:
        ids = rec["input_ids"]
        if not isinstance(ids, (list, tuple)) or not all(isinstance(i, int) for i in ids):
            raise DatasetError(f"{where}: 'input_ids' must be a list of token ids")
        return ARROW
    raise DatasetError(unknown_shape(sorted(present), where))


def unknown_shape(keys: list[str], where: str) -> str:
    """Names the closest format (the most of its keys present) and what it misses."""
    shown = ", ".join(keys[:8]) or "none"
    scored = sorted(REQUIRED.items(), key=lambda kv: -sum(k in keys for k in kv[1]))
    fmt, need = scored[0]
    missing = [k for k in need if k not in keys]
    if sum(k in keys for k in need) == 0:
        return (f"{where}: unknown record shape (keys: {shown}); expected one of: 'messages' (chatml), "
                "'conversations' (sharegpt), 'instruction'/'output' (alpaca), 'prompt'/'completion', 'text', "
                "'input_ids'; map other keys with training_config.columns")
    return (f"{where}: unknown record shape (keys: {shown}); the closest format is {fmt}, which needs "
            f"{', '.join(repr(k) for k in missing)}; map your keys with training_config.columns "
            f"(for example {{\"{missing[0]}\": \"<your key>\"}})")


def conversation(rec: dict[str, Any], fmt: str) -> tuple[list[dict[str, Any]], list[Any] | None]:
    """(messages, tools) of a conversational record whose format `detect` returned."""
    if fmt == CHATML:
        return _openai_messages(rec["messages"], "", "messages"), _tools(rec.get("tools"), "")
    if fmt == SHAREGPT:
        return sharegpt_messages(rec, ""), _tools(rec.get("tools"), "")
    if fmt == INSTRUCTION:
        return alpaca_messages(rec, ""), None
    if fmt == PROMPT_COMPLETION and isinstance(rec["prompt"], list):
        return _prompt_completion(rec, "") or [], _tools(rec.get("tools"), "")
    raise ValueError(f"{fmt} records are not conversations")


def alpaca_messages(rec: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """LLaMA-Factory's alpaca: `system`, then each `history` pair [query, response], then instruction + input."""
    for k in ("instruction", "output"):
        if not isinstance(rec.get(k), str):
            raise DatasetError(f"{where}: instruction format needs a string '{k}'")
    for k in ("input", "system"):
        if rec.get(k) is not None and not isinstance(rec[k], str):
            raise DatasetError(f"{where}: '{k}' must be a string")
    out: list[dict[str, Any]] = []
    if rec.get("system"):
        out.append({"role": "system", "content": rec["system"]})
    history = rec.get("history") or []
    if not isinstance(history, list):
        raise DatasetError(f"{where}: 'history' must be a list of [query, response] pairs")
    for i, pair in enumerate(history):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise DatasetError(f"{where}: history[{i}] must be a [query, response] pair of strings")
        out += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
    user = rec["instruction"]
    if rec.get("input"):
        user = f"{user}\n\n{rec['input']}" if user else rec["input"]
    out += [{"role": "user", "content": user}, {"role": "assistant", "content": rec["output"]}]
    return out


def sharegpt_messages(rec: dict[str, Any], where: str) -> list[dict[str, Any]]:
    turns = rec["conversations"]
    if not isinstance(turns, list) or not turns:
        raise DatasetError(f"{where}: 'conversations' must be a non-empty list")
    out: list[dict[str, Any]] = []
    if isinstance(rec.get("system"), str) and rec["system"]:
        out.append({"role": "system", "content": rec["system"]})
    for i, t in enumerate(turns):
        if not isinstance(t, dict):
            raise DatasetError(f"{where}: conversations[{i}] must be an object with 'from' and 'value'")
        who = t.get("from", t.get("role"))
        value = t.get("value", t.get("content"))
        if who not in SHAREGPT_ROLES:
            raise DatasetError(f"{where}: conversations[{i}].from is {who!r}; expected one of "
                               f"{', '.join(sorted(SHAREGPT_ROLES))}")
        if not isinstance(value, str):
            raise DatasetError(f"{where}: conversations[{i}].value must be a string")
        if who == "function_call":
            out.append({"role": "assistant", "content": "",
                        "tool_calls": _calls_from_text(value, f"{where}: conversations[{i}].value")})
        else:
            out.append({"role": SHAREGPT_ROLES[who], "content": value})
    _needs_assistant(out, where, "conversations")
    return out


def _openai_messages(msgs: Any, where: str, key: str) -> list[dict[str, Any]]:
    if not isinstance(msgs, list) or not msgs:
        raise DatasetError(f"{where}: '{key}' must be a non-empty list")
    out = []
    for i, m in enumerate(msgs):
        at = f"{where}: {key}[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise DatasetError(f"{at} needs string 'role' and 'content'")
        role = m["role"]
        if role not in OPENAI_ROLES:
            raise DatasetError(f"{at}.role is {role!r}; expected one of {', '.join(OPENAI_ROLES)}")
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role,
                               "content": _content(m.get("content"), at, allow_none=bool(m.get("tool_calls")))}
        if m.get("tool_calls"):
            if role != "assistant":
                raise DatasetError(f"{at}: only assistant messages carry tool_calls")
            msg["tool_calls"] = [_tool_call(c, f"{at}.tool_calls[{j}]") for j, c in enumerate(m["tool_calls"])]
        out.append(msg)
    _needs_assistant(out, where, key)
    return out


def _content(content: Any, at: str, *, allow_none: bool) -> str:
    """A message's text: a string, or OpenAI content parts ({"type": "text", "text": ...}) joined."""
    if isinstance(content, str):
        return content
    if content is None and allow_none:
        return ""
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
                continue
            if not isinstance(part, dict) or part.get("type", "text") != "text" or not isinstance(part.get("text"), str):
                what = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise DatasetError(f"{at}.content[{j}] is a {what} part; only text parts can be trained on")
            texts.append(part["text"])
        return "".join(texts)
    raise DatasetError(f"{at} needs string 'role' and 'content' (or a list of text parts)")


def _tool_call(call: Any, at: str) -> dict[str, Any]:
    """OpenAI's {"type": "function", "function": {"name", "arguments"}} or a bare {"name", "arguments"}, as the
    chat templates of transformers read it (arguments as an object where the text is JSON)."""
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise DatasetError(f"{at} needs a function 'name' and its 'arguments'")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as e:
            raise DatasetError(f"{at}.arguments is not valid JSON ({e})") from e
    out: dict[str, Any] = {"type": "function", "function": {"name": fn["name"], "arguments": args}}
    if isinstance(call, dict) and isinstance(call.get("id"), str):
        out["id"] = call["id"]
    return out


def _calls_from_text(value: str, at: str) -> list[dict[str, Any]]:
    """A ShareGPT function_call turn: JSON text of one call or a list of calls."""
    try:
        data = json.loads(value)
    except ValueError as e:
        raise DatasetError(f"{at}: a function_call turn holds JSON ({{\"name\", \"arguments\"}}): {e}") from e
    calls = data if isinstance(data, list) else [data]
    return [_tool_call(c, f"{at}[{j}]") for j, c in enumerate(calls)]


def _tools(tools: Any, where: str) -> list[Any] | None:
    """The `tools` column: a list of tool schemas, or its JSON text (LLaMA-Factory writes text)."""
    if tools is None or tools == "" or tools == []:
        return None
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except ValueError as e:
            raise DatasetError(f"{where}: 'tools' is not valid JSON ({e})") from e
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise DatasetError(f"{where}: 'tools' must be a list of tool schemas")
    return tools


def _prompt_completion(rec: dict[str, Any], where: str) -> list[dict[str, Any]] | None:
    """TRL's prompt/completion: both text (None: not a conversation) or both message lists (a conversation)."""
    p, c = rec["prompt"], rec["completion"]
    if isinstance(p, str) and isinstance(c, str):
        return None
    if isinstance(p, list) and isinstance(c, list):
        prompt = _openai_messages(p, where, "prompt") if any(m.get("role") == "assistant" for m in p
                                                             if isinstance(m, dict)) else _plain(p, where, "prompt")
        completion = _openai_messages(c, where, "completion")
        return prompt + completion
    raise DatasetError(f"{where}: 'prompt' and 'completion' must both be text or both be lists of messages")


def _plain(msgs: list[Any], where: str, key: str) -> list[dict[str, Any]]:
    """Messages that need not hold an assistant turn (a conversational prompt)."""
    padded = [*msgs, {"role": "assistant", "content": ""}]
    return _openai_messages(padded, where, key)[:-1]


def _needs_assistant(msgs: list[dict[str, Any]], where: str, key: str) -> None:
    if not any(m["role"] == "assistant" for m in msgs):
        raise DatasetError(f"{where}: a conversation needs at least one 'assistant' message ({key})")
