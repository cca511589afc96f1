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
    """A dataset that cannot be used; the message names the path and, where it applies, the line.

    `path`, `line` and `text` (the line as read, cut to TEXT_CHARS) say where when one line of a file is to
    blame: the error event and the pre-flight carry them, and the front-ends offer that line. They survive
    pickling (a worker's error reaches the driver through Ray): BaseException pickles `__dict__`."""

    TEXT_CHARS = 200

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 text: str | None = None) -> None:
        super().__init__(message)
        self.path, self.line, self.text = path, line, text

    def locate(self, path: str, line: int, text: str | None) -> None:
        """Name the line, unless an inner read already did."""
        if self.line is None:
            self.path, self.line = path, line
            self.text = None if text is None else text.rstrip("\r\n")[: self.TEXT_CHARS]

    def location(self) -> dict[str, Any]:
        """{path, line, text} when one line is to blame, else {}."""
        return {"path": self.path, "line": self.line, "text": self.text} if self.line is not None else {}


@dataclass
class Dataset:
    path: str
    format: str
    records: list[dict[str, Any]]
    validation: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
