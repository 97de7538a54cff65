"""Templates only print: no template holds arithmetic, `|length`, tests of rendered strings, string
building, assignments or macros; kopgen/lang/ decides (counted by benchmarks/template_logic.py, whose
table the closing notes print). Their remaining `if`s only say whether a block exists at all, and
tests/test_kinds.py checks that none branches on an op kind."""

from __future__ import annotations

import importlib.util

import pytest

from .conftest import ROOT

TEMPLATES = ROOT / "templates"
EVERY_TEMPLATE = sorted(
    path.relative_to(TEMPLATES).as_posix()
    for path in TEMPLATES.rglob("*")
    if path.is_file() and path.suffix in (".j2", ".jinja")
)
FORBIDDEN = ("arith", "length", "in_str", "concat", "set", "macro")


def _counter():
    spec = importlib.util.spec_from_file_location("template_logic", ROOT / "benchmarks" / "template_logic.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.count


@pytest.mark.parametrize("template", EVERY_TEMPLATE)
def test_templates_only_print(template):
    counts = _counter()((TEMPLATES / template).read_text(encoding="utf-8"))
    found = {kind: counts[kind] for kind in FORBIDDEN if counts[kind]}
    assert not found, f"{template}: {found}; compute it in kopgen/lang/ instead"


def test_the_test_templates_do_not_branch():
    """The generated tests are one contract and per-op data: the generator decided, the templates print."""
    for template in (t for t in EVERY_TEMPLATE if t.startswith("tests/")):
        assert _counter()((TEMPLATES / template).read_text(encoding="utf-8"))["if"] == 0, template


def test_the_scan_sees_logic():
    """The counter finds what the tests above forbid (else they would pass on anything)."""
    counts = _counter()(
        '{% set x = 1 %}{% macro m() %}{% endmacro %}{{ "-" * (97 - name | length) }}{{ "," if "," in text }}{{ a ~ b }}'
    )
    assert [counts[kind] for kind in ("set", "macro", "arith", "length", "in_str", "concat", "if")] == [1, 1, 2, 1, 1, 1, 1]
