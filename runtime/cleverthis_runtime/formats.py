"""The dataset formats the product page names, and the two types every dataset module shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

INSTRUCTION = "instruction"  # alpaca
CHATML = "chatml"  # OpenAI messages
SHAREGPT = "sharegpt"
PROMPT_COMPLETION = "prompt_completion"
TEXT = "text"
ARROW = "arrow"  # pre-tokenized

# Tool calls and tool results as Hermes/Qwen-style ChatML writes them (both of the runtime's templates use them):
# the tool schemas in <tools>, each call in a <tool_call> block of JSON, each result in <tool_response>.
TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\n<tools>{% for t in tools %}{{ '\\n' }}{{ t | tojson }}"
    "{% endfor %}{{ '\\n' }}</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>"
)
MESSAGE_BODY = (
    "{% if m['role'] == 'tool' %}<tool_response>\n{{ m['content'] }}\n</tool_response>"
    "{% else %}{{ m['content'] }}{% endif %}"
    "{% for c in (m.tool_calls or []) %}{% if m['content'] or not loop.first %}{{ '\\n' }}{% endif %}<tool_call>\n"
    "{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}"
)
# (Newlines right after a block tag are written as {{ '\\n' }}: chat templates are compiled with trim_blocks.)
# A system turn carries the tool schemas, after the conversation's own system text.
TOOLS_FIRST = "{% set merged = tools and messages and messages[0]['role'] == 'system' %}"
SKIP_MERGED = "{% if not (merged and loop.first) %}"


def _template(open_turn: str, close_turn: str, generation: str) -> str:
    """A ChatML-like template: each message `open_turn` (with its role), body, `close_turn`."""
    return (
        TOOLS_FIRST
        + "{% if tools %}" + open_turn.replace("ROLE", "system")
        + "{% if merged %}{{ messages[0]['content'] }}\n\n{% endif %}" + TOOLS_PREAMBLE + close_turn + "{% endif %}"
        + "{% for m in messages %}" + SKIP_MERGED + open_turn.replace("ROLE", "{{ m['role'] }}") + MESSAGE_BODY
        + close_turn + "{% endif %}{% endfor %}"
        + "{% if add_generation_prompt %}" + generation + "{% endif %}"
    )


# Used when the tokenizer has no chat template of its own (documented in docs/datasets.md).
DEFAULT_CHAT_TEMPLATE = _template("<|ROLE|>\n", "{{ eos_token }}\n", "<|assistant|>\n")
CHATML_TEMPLATE = _template("<|im_start|>ROLE\n", "<|im_end|>\n", "<|im_start|>assistant\n")


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
    """A dataset as the runtime reads it: memory-mapped Arrow tables on this node (sources.py), never the rows
    in Python lists. `train` and `validation` are `datasets.Dataset`s with the columns `record` (the record as
    JSON text, after training_config.columns), `format`, `file` (an index into `files`) and `line` (1-based; a
    row number for parquet), or, for a saved pre-tokenized dataset (format arrow), its own columns.

    The tables are opened on first use (`open_tables`): the driver and create's check need only the counts, and
    opening them imports `datasets` (a second of CPU in every job's driver)."""

    path: str
    format: str
    examples: int
    validation_examples: int | None = None  # None: the data has no validation set
    files: list[str] = field(default_factory=list)
    formats: dict[str, int] = field(default_factory=dict)  # records of each format (training data)
    open_tables: Callable[[], tuple[Any, Any]] | None = field(default=None, repr=False)
    _tables: tuple[Any, Any] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, path: str, format: str, train: Any, validation: Any = None, **kw: Any) -> Dataset:
        """A dataset whose tables are already open."""
        return cls(path=path, format=format, examples=len(train),
                   validation_examples=len(validation) if validation is not None else None,
                   _tables=(train, validation), **kw)

    @property
    def train(self) -> Any:
        return self._open()[0]

    @property
    def validation(self) -> Any:
        return self._open()[1] if self.validation_examples is not None else None

    def _open(self) -> tuple[Any, Any]:
        if self._tables is None:
            assert self.open_tables is not None
            self._tables = self.open_tables()
        return self._tables

    def __len__(self) -> int:
        return self.examples

    @property
    def kind(self) -> str:
        """"conversation", "text" or "tokens"."""
        from .records import kind

        return kind(self.format)

    def head(self, n: int, *, validation: bool = False) -> list[dict[str, Any]]:
        """The first n records as dicts (each with its format under "_format" when the data holds several)."""
        table = self.validation if validation else self.train
        if table is None:
            return []
        return decode(table.select(range(min(n, len(table))))[:])

    def records(self, *, validation: bool = False) -> list[dict[str, Any]]:
        """Every record in memory: for small data only (tests, the TensorFlow loop); training reads the table."""
        table = self.validation if validation else self.train
        return all_records(table) if table is not None else []


def decode(batch: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """A columnar batch of a dataset's table as record dicts, each with its "_format"."""
    import json

    if "record" not in batch:  # pre-tokenized columns
        keys = list(batch)
        n = len(batch[keys[0]]) if keys else 0
        return [{**{k: batch[k][i] for k in keys}, "_format": ARROW} for i in range(n)]
    return [{**json.loads(r), "_format": f} for r, f in zip(batch["record"], batch["format"], strict=True)]


def all_records(table: Any, batch_size: int = 10_000) -> list[dict[str, Any]]:
    """Every record of a table as dicts (for the callers that keep their rows in memory: the TensorFlow loop)."""
    out: list[dict[str, Any]] = []
    for batch in table.iter(batch_size=batch_size):
        out.extend(decode(batch))
    return out
