"""The dataset formats the product page names, and the two types every dataset module shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INSTRUCTION = "instruction"
CHATML = "chatml"
ARROW = "arrow"

# Used when the tokenizer has no chat template of its own (documented in the README).
DEFAULT_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
VALIDATION_FILE = "validation.jsonl"


class DatasetError(ValueError):
    """A dataset that cannot be used; the message names the path and, where it applies, the line."""


@dataclass
class Dataset:
    path: str
    format: str
    records: list[dict[str, Any]]
    validation: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
