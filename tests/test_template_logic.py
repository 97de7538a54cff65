"""Templates only print: the Python and Triton templates hold no arithmetic, no `|length`, no tests of
rendered strings and no string building; the lang/ modules decide (counted by benchmarks/template_logic.py)."""

from __future__ import annotations

import importlib.util

import pytest

from .conftest import ROOT

TEMPLATES = ROOT / "templates"
# The templates of the Python and Triton code (the tests' and the C++ templates are counted apart).
PYTHON_TEMPLATES = sorted(
    path.relative_to(TEMPLATES).as_posix()
    for pattern in ("package/*.py.j2", "package/_registration/*.j2", "package/_support/*.j2", "package/kernels/*.j2",
                    "benchmarks/*.j2")
    for path in TEMPLATES.glob(pattern)
)


def _counter():
    spec = importlib.util.spec_from_file_location("template_logic", ROOT / "benchmarks" / "template_logic.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.count


@pytest.mark.parametrize("template", PYTHON_TEMPLATES)
def test_python_templates_only_print(template):
    counts = _counter()((TEMPLATES / template).read_text(encoding="utf-8"))
    found = {kind: counts[kind] for kind in ("arith", "length", "in_str", "concat", "set", "macro") if counts[kind]}
    assert not found, f"{template}: {found}; compute it in kopgen/lang/ instead"


def test_the_scan_sees_logic():
    """The counter finds what the test above forbids (else that test would pass on anything)."""
    counts = _counter()('{% set x = 1 %}{{ "-" * (97 - name | length) }}{{ "," if "," in text }}{{ a ~ b }}')
    assert [counts[kind] for kind in ("set", "arith", "length", "in_str", "concat")] == [1, 2, 1, 1, 1]
