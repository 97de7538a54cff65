"""A Python kernel returns its reference's result itself where that already is fresh contiguous output
(`_support.written_to`), and a copy of it into the output everywhere else; and the statement layout refuses
text already laid out (it once cut a `return` short instead)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from kopgen.lang import layout

SUPPORT = Path(__file__).parent / "golden" / "rows" / "krows" / "_support.py"


@pytest.fixture(scope="module")
def support():
    spec = importlib.util.spec_from_file_location("krows_support", SUPPORT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_fresh_contiguous_result_is_returned_as_it_is(support):
    a, b = torch.rand(4, 8), torch.rand(8)
    result = a * b
    assert support.written_to(torch.empty(4, 8), result, a, b, None) is result


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a,  # an input itself
        lambda a: a.detach(),  # its memory, not a view by _base
        lambda a: a.view(4, 8),  # a view of it
        lambda a: (a * 2).t().contiguous().t(),  # fresh but not contiguous
        lambda a: a.double() * 2,  # another dtype
        lambda a: (a * 2)[:1],  # another shape (one row, which the copy broadcasts)
    ],
)
def test_any_other_result_is_copied_into_the_output(support, make):
    a = torch.rand(4, 8)
    result = make(a)
    out = torch.empty(4, 8)
    got = support.written_to(out, result, a)
    assert got is out
    torch.testing.assert_close(out, result.to(out.dtype).expand(4, 8))


def test_statement_refuses_text_already_laid_out():
    assert layout.statement("return f(a, b)", 4) == "return f(a, b)"
    with pytest.raises(ValueError, match="one line"):
        layout.statement("return f(\n    a, b\n)", 4)
