"""The expression languages of an op spec, parsed with :mod:`ast` and checked against an allow-list.

* `syntax`: parsing and the checks every language shares (ExprError, the base Checker,
  constant folding).
* `pointwise`: pointwise expressions (`compute`, `reduce.expr`), translated to PyTorch, Triton
  and C++ by the emitters of `emitters`.
* `formula`: backward formulas (`derivatives`), turned into executable Python.
* `metadata`: the output shapes and dtypes of custom ops (`fake`).
"""

from .formula import Formula, FormulaContext, parse_formula
from .metadata import NOT_DIFFERENTIABLE_DTYPES, evaluate, fake_source, is_dynamic, parse_metadata
from .pointwise import ARG_KINDS, Pointwise, parse_pointwise
from .syntax import ExprError

__all__ = [
    "ARG_KINDS",
    "NOT_DIFFERENTIABLE_DTYPES",
    "ExprError",
    "Formula",
    "FormulaContext",
    "Pointwise",
    "evaluate",
    "fake_source",
    "is_dynamic",
    "parse_formula",
    "parse_metadata",
    "parse_pointwise",
]
