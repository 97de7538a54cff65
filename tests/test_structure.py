"""kopgen's own code stays in small rooms: no module over 600 lines, no class over 200, no function of
60 lines or more (issue 13). A module that grows past them is split by what its parts do."""

from __future__ import annotations

import ast

import pytest

from .conftest import ROOT

MODULES = sorted((ROOT / "kopgen").rglob("*.py"))


def sizes(path) -> list[tuple[str, int]]:
    """(what, lines) of the module, each class and each function in it."""
    text = path.read_text(encoding="utf-8")
    found = [(f"module {path.relative_to(ROOT)}", len(text.splitlines()))]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            found.append((f"{kind} {node.name}", node.end_lineno - node.lineno + 1))
    return found


LIMITS = {"module": 600, "class": 200, "function": 59}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_classes_and_functions_stay_small(path):
    too_large = [(what, lines) for what, lines in sizes(path) if lines > LIMITS[what.split()[0]]]
    assert not too_large, too_large


def test_the_largest_of_each():
    every = [entry for path in MODULES for entry in sizes(path)]
    for kind, limit in LIMITS.items():
        what, lines = max((e for e in every if e[0].startswith(kind)), key=lambda e: e[1])
        print(f"largest {kind}: {what.split(' ', 1)[1]} ({lines} lines)")
        assert lines <= limit
