"""The code's shape holds (docs/development.md): no function over 80 lines, and modules use only each other's
public names. Modules have no size limit: they are split by concern, never to meet a number."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("jupyter_cleverthis", "runtime/cleverthis_runtime")
OURS = ("jupyter_cleverthis", "cleverthis_runtime")
MAX_FUNCTION = 80
# generated code and data are not written by hand
TS_EXCLUDED = ("js/src/shared/generated/",)


def _python_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "labextension" not in p.parts)


def _ts_files() -> list[Path]:
    return sorted(p for p in (ROOT / "js" / "src").rglob("*.ts")
                  if not any(str(p.relative_to(ROOT)).startswith(x) for x in TS_EXCLUDED))


def test_no_python_function_over_80_lines():
    long = []
    for p in _python_files():
        src = p.read_text()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION:
                    long.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name}(): {n} lines")
    assert not long, "\n".join(long)


def _our_module(name: str | None, level: int) -> bool:
    return level > 0 or bool(name) and name.split(".")[0] in OURS


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@pytest.mark.parametrize("path", _python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_use_only_public_names_of_each_other(path):
    tree = ast.parse(path.read_text())
    modules: set[str] = set()  # local names bound to one of our modules
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _our_module(node.module, node.level):
            for a in node.names:
                if _private(a.name):
                    found.append(f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import {a.name}")
                modules.add(a.asname or a.name)  # a submodule (from . import checkpoints) or a name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if _our_module(a.name, 0):
                    modules.add(a.asname or a.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name) \
                and node.value.id in modules:
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    assert not found, "private names of other modules: " + "; ".join(found)
