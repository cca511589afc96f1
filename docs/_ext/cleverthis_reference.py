"""Reference pages written from the code at build time, so none can drift from it.

Each page is a MyST file written into the source tree when the builder starts (git-ignores them):
- reference/job-spec.md: JobSpec and TrainingConfig, from their pydantic JSON Schemas;
- reference/cli.md: every `cleverthis-train` subcommand and option, from the argparse parser the CLI and `%train` use;
- reference/rest.md: every path and method of docs/openapi.yaml with its summary, parameters and schemas;
- _generated/error-kinds.md: every failure kind of the runtime's triage with its advice (troubleshooting includes it).
A page is rewritten only when its text changed, so an incremental build re-reads only what moved.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from sphinx.application import Sphinx

ROOT = Path(__file__).resolve().parents[2]


def _cell(text: Any) -> str:
    """Text fit for one Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _code(value: Any) -> str:
    return "`" + json.dumps(value).replace("|", "\\|").replace("`", "'") + "`"


def _type(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in prop:
        kinds = [_type(p) for p in prop["anyOf"] if p.get("type") != "null"]
        return " or ".join(kinds) + (" or null" if len(kinds) < len(prop["anyOf"]) else "")
    if "const" in prop:
        return _code(prop["const"])
    if "enum" in prop:
        return " \\| ".join(_code(v) for v in prop["enum"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if kind == "object" and "additionalProperties" in prop and isinstance(prop["additionalProperties"], dict):
        return f"map of {_type(prop['additionalProperties'])}"
    return kind


def _bounds(prop: dict[str, Any]) -> str:
    parts = []
    for key, word in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"),
                      ("minLength", "length >="), ("maxLength", "length <="), ("minItems", "items >="),
                      ("maxItems", "items <=")):
        for p in [prop, *prop.get("anyOf", [])]:
            if key in p:
                parts.append(f"{word} {p[key]}")
    return ", ".join(parts)


def _model_table(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    lines = ["| field | type | default | description |", "|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        default = "required" if name in required else _code(prop.get("default"))
        desc = prop.get("description", "")
        bounds = _bounds(prop)
        if bounds:
            desc = f"{desc} ({bounds})" if desc else bounds
        lines.append(f"| `{name}` | {_type(prop)} | {default} | {_cell(desc)} |")
    return lines


def job_spec_page() -> str:
    from cleverthis_runtime.spec import JobSpec

    schema = JobSpec.model_json_schema()
    defs = schema.get("$defs", {})
    out = [
        "# Job spec and training_config reference",
        "",
        "Written from the pydantic models in `runtime/cleverthis_runtime/spec.py` when the docs are built: every "
        "field, its type, its default and its description. The Create Job form, `%train`, `cleverthis-train`, the "
        "REST API and the runtime all validate against these models; unknown keys are refused. "
        "See [training methods and strategies](../training.md) for what the choices do together.",
        "",
        "(jobspec)=",
        "## JobSpec",
        "",
        schema.get("description", ""),
        "",
        *_model_table(schema),
    ]
    order = ["TrainingConfig", *sorted(k for k in defs if k != "TrainingConfig")]
    for name in order:
        sub = defs[name]
        out += ["", f"({name.lower()})=", f"## {name}", "", sub.get("description", ""), "", *_model_table(sub)]
    return "\n".join(out) + "\n"


def _usage(parser: argparse.ArgumentParser) -> str:
    return parser.format_usage().strip().removeprefix("usage: ")


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | default | help |", "|---|---|---|"]
    for action in parser._actions:  # argparse has no public iterator over a parser's arguments
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(action.option_strings) or action.dest
        if action.choices and not isinstance(action, argparse._SubParsersAction):
            name += " {" + ",".join(map(str, action.choices)) + "}"
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) else f"`{default}`"
        if action.required and action.option_strings:
            shown = "required"
        rows.append(f"| `{name}` | {shown} | {_cell(action.help or '')} |")
    return rows


def cli_page() -> str:
    from jupyter_cleverthis.cli import build_parser

    parser = build_parser()
    out = [
        "# Command-line reference",
        "",
        "Written from the argparse parser in `jupyter_cleverthis/cli.py` when the docs are built. "
        "`cleverthis-train ARGS` and `%train ARGS` in a notebook take exactly the same arguments; with no "
        "subcommand, `create` is meant.",
        "",
        "Exit codes: 0 done; 1 a waited-for job (or a download) did not succeed; 2 a usage error (an unknown option, "
        "a bad value, an invalid spec); 3 the service or the cluster refused or failed (not running, no such job, "
        "Ray unreachable).",
        "",
        "```text",
        _usage(parser),
        "```",
    ]
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in subs._choices_actions}
    for name, sub in subs.choices.items():
        out += ["", f"## `{name}`", "", _cell(helps.get(name, "")), "", "```text", _usage(sub), "```", "",
                *_option_rows(sub)]
    return "\n".join(out) + "\n"


def _schema_text(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if schema.get("type") == "array":
        return f"list of {_schema_text(schema.get('items', {}))}"
    return schema.get("type", "object")


def rest_page() -> str:
    api = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())
    params = api.get("components", {}).get("parameters", {})
    out = [
        f"# {api['info']['title']}",
        "",
        "Written from `docs/openapi.yaml` when the docs are built (a test keeps that file and the server's routes "
        "in sync).",
        "",
        _cell(api["info"].get("description", "")),
        "",
        "| method | path | summary |",
        "|---|---|---|",
    ]
    details: list[str] = []
    for path, ops in api.get("paths", {}).items():
        shared = ops.get("parameters", [])
        for method, op in ops.items():
            if method == "parameters":
                continue
            summary = op.get("summary") or op.get("description", "")
            out.append(f"| {method.upper()} | `{path}` | {_cell(summary)} |")
            details += ["", f"### {method.upper()} `{path}`", ""]
            if op.get("description") and op.get("summary"):
                details += [_cell(op["description"]), ""]
            elif summary:
                details += [_cell(summary), ""]
            plist = [params[p["$ref"].rsplit("/", 1)[-1]] if "$ref" in p else p for p in shared + op.get("parameters", [])]
            for p in plist:
                details.append(f"- {p['in']} `{p['name']}`: {_cell(p.get('description', _schema_text(p.get('schema', {}))))}")
            body = op.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                details.append(f"- body ({media}): {_schema_text(content.get('schema', {}))}")
            for code, resp in op.get("responses", {}).items():
                kinds = ", ".join(_schema_text(c.get("schema", {})) for c in resp.get("content", {}).values())
                details.append(f"- answers {code}: {_cell(resp.get('description', ''))}" + (f" ({kinds})" if kinds else ""))
    out += ["", "## Operations", *details, "", "## Schemas", ""]
    for name, schema in api.get("components", {}).get("schemas", {}).items():
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += [_cell(schema["description"]), ""]
        props: dict[str, Any] = dict(schema.get("properties", {}))
        for part in schema.get("allOf", []):
            if "$ref" in part:
                out += [f"Everything in {part['$ref'].rsplit('/', 1)[-1]}, and:", ""]
            props.update(part.get("properties", {}))
        if props:
            out += ["| field | type | description |", "|---|---|---|"]
            for key, prop in props.items():
                kind = _schema_text(prop) + (" (" + ", ".join(map(str, prop["enum"])) + ")" if "enum" in prop else "")
                out.append(f"| `{key}` | {_cell(kind)} | {_cell(prop.get('description', ''))} |")
            out.append("")
    return "\n".join(out) + "\n"


def error_kinds_page() -> str:
    from cleverthis_runtime.triage import RULES, advice_for

    out = ["| kind | what to do |", "|---|---|"]
    out += [f"| `{kind}` | {_cell(advice)} |" for kind, _, advice in RULES]
    out.append(f"| `training` | {_cell(advice_for('training'))} |")
    return "\n".join(out) + "\n"


PAGES = {
    "reference/job-spec.md": job_spec_page,
    "reference/cli.md": cli_page,
    "reference/rest.md": rest_page,
    "_generated/error-kinds.md": error_kinds_page,
}


def write_pages(srcdir: Path) -> None:
    for rel, render in PAGES.items():
        target = srcdir / rel
        text = render()
        if not target.exists() or target.read_text() != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)


def _on_builder_inited(app: Sphinx) -> None:
    write_pages(Path(app.srcdir))


def setup(app: Sphinx) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "runtime"))
    sys.path.insert(0, str(ROOT))
    app.connect("builder-inited", _on_builder_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
