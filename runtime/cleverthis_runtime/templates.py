"""Chat templates: `chat_template` in training_config is a name below, `model` (the model's own), `default` (the
runtime's), or Jinja text. Unset: the model's own when its tokenizer has one, else the runtime's default.

Each template renders a conversation so that every prefix renders as a prefix of the whole: the loss mask (only
assistant tokens train) is read from the rendered text (data.py). The tokenizer saved with every checkpoint keeps
the template the job used, so generation uses the same one.
"""

from __future__ import annotations

from typing import Any

from .formats import CHATML_TEMPLATE, DEFAULT_CHAT_TEMPLATE

TEMPLATES: dict[str, str] = {
    "chatml": CHATML_TEMPLATE,
    "llama-3": (
        "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
        "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
    ),
    # Mistral's instruct format has no system turn: a system message goes before the first user turn.
    "mistral": (
        "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}\n\n"
        "{% elif m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
        "{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
    ),
    # Gemma's turns are `user` and `model`; a system message is a user turn, as Gemma's own template folds it.
    "gemma": (
        "{{ bos_token }}{% for m in messages %}"
        "{% set role = 'model' if m['role'] == 'assistant' else 'user' %}"
        "<start_of_turn>{{ role }}\n{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
    ),
    "phi-3": (
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    ),
    "default": DEFAULT_CHAT_TEMPLATE,
}
NAMES = (*TEMPLATES, "model")


def check(value: str) -> str:
    """A template name, or Jinja text that parses (the error names the line); raises ValueError."""
    if value in NAMES:
        return value
    if "{{" not in value and "{%" not in value:
        raise ValueError(f"unknown template '{value[:60]}': use one of {', '.join(NAMES)}, or Jinja text")
    from jinja2 import TemplateSyntaxError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        ImmutableSandboxedEnvironment(extensions=["jinja2.ext.loopcontrols"]).parse(value)
    except TemplateSyntaxError as e:
        raise ValueError(f"the Jinja template does not parse, line {e.lineno}: {e.message}") from e
    return value


class TemplateError(ValueError):
    """`chat_template: model` for a model whose tokenizer has none."""


def apply(tokenizer: Any, choice: str | None) -> tuple[str, str]:
    """Set the tokenizer's template for training; returns (what was used, why) for the plan."""
    own = getattr(tokenizer, "chat_template", None)
    if choice is None:
        if own:
            return "model", "the model's own template (its tokenizer has one)"
        tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE
        return "default", "the runtime's default: the model's tokenizer has no template"
    if choice == "model":
        if not own:
            raise TemplateError("the model's tokenizer has no chat template of its own: choose a name "
                                f"({', '.join(TEMPLATES)}) or give Jinja text")
        return "model", "the model's own template, as asked"
    if choice in TEMPLATES:
        tokenizer.chat_template = TEMPLATES[choice]
        return choice, f"{choice}, as asked"
    tokenizer.chat_template = choice
    return "custom", "the Jinja template given in training_config"


def drops_system_turn(tokenizer: Any) -> bool:
    """Whether the template loses a system message's text (then pre-flight warns)."""
    probe = "SYSTEM-PROBE-7f3a"
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "system", "content": probe}, {"role": "user", "content": "u"},
             {"role": "assistant", "content": "a"}], tokenize=False)
    except Exception:  # noqa: BLE001 - a template that raises on a system turn drops it too
        return True
    return probe not in str(text)
