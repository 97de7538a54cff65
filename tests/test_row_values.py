"""Row values (lang/cpp_norms.py): the parts of a normalisation's per-element expressions that read only
statistics and scalars are computed once a row, in the C++ and CUDA functors, and read by name."""

from __future__ import annotations

from kopgen.lang import cpp_norms
from kopgen.lang.cpp import CppOp
from kopgen.pipeline import load_spec_text

SPEC = """\
kopgen: 1
package: krow
defaults: {registration: torch_library, backends: {cpu: cpp, cuda: cuda}}
ops:
  - schema: "scaled(Tensor x, float eps=1e-5, float row0=2.0) -> Tensor"
    normalize:
      stats: {mu: "mean(x)", var: "mean((x - mu) ** 2)"}
      compute: "(x - mu) * rsqrt(var + eps) * row0 + where(var > eps, 1.0, 0.0) + x * mu"
"""


def scaled():
    (op,) = load_spec_text(SPEC, "kopgen.yaml").ops
    return op


def test_a_part_that_reads_only_statistics_and_scalars_is_computed_once_a_row():
    op = scaled()
    slots = cpp_norms.slots(op)
    # each row value after the last statistic it reads; `row0` is an argument, so the first is row0_
    assert slots.names == ("mu", "var", "row0_", "row1")
    assert [(v.name, v.expr.text, v.after) for v in slots.values] == [
        ("row0_", "rsqrt(var + eps)", 1), ("row1", "where(var > eps, 1.0, 0.0)", 1)]
    # the comparison alone is a truth value, not a row value; a bare statistic (mu) stays as it is
    (write,) = op.body.writes
    assert cpp_norms.per_element(op, write.expr).text == "(x - mu) * row0_ * row0 + row1 + x * mu"
    # the statistics' own expressions are read as they were (the square as a product)
    assert cpp_norms.per_element(op, op.body.stats[1].reduced).to_cpp() == "(x - mu) * (x - mu)"


def test_the_functor_finishes_its_row_values_without_a_pass():
    op = scaled()
    methods = "\n".join(cpp_norms.methods(op, "cuda"))
    assert "using Reductions = std::tuple<Mean<acc_t>, Mean<acc_t>, RowValue, RowValue>;" in methods
    assert "__device__ acc_t finished(Stat<2>, const acc_t* stat) const {" in methods
    assert "return acc_t(1) / std::sqrt(var + eps);" in methods
    body = CppOp(op).functor_return
    assert "const acc_t row0_ = stat[2];" in body and "const acc_t row1 = stat[3];" in body
    assert "std::sqrt" not in body  # per element: no square root, no division


def test_an_op_without_row_invariant_parts_has_no_row_values():
    text = SPEC.replace('"(x - mu) * rsqrt(var + eps) * row0 + where(var > eps, 1.0, 0.0) + x * mu"', '"(x - mu) * x * var"')
    (op,) = load_spec_text(text, "kopgen.yaml").ops
    slots = cpp_norms.slots(op)
    assert slots.names == ("mu", "var") and slots.values == ()
    assert "RowValue" not in "\n".join(cpp_norms.methods(op, "cpu"))


def test_a_division_by_a_row_invariant_value_is_a_product_with_its_reciprocal():
    text = SPEC.replace('"(x - mu) * rsqrt(var + eps) * row0 + where(var > eps, 1.0, 0.0) + x * mu"',
                        '"exp(x - mu) / var + (x - mu) / (var + eps) + x / row0 + var / x"')
    (op,) = load_spec_text(text, "kopgen.yaml").ops
    slots = cpp_norms.slots(op)
    # the reciprocal of a statistic or of arithmetic on statistics is a row value; a division by a scalar
    # argument alone (row0) or by the element (x) stays a division
    assert [(v.name, v.expr.text) for v in slots.values] == [("row0_", "1.0 / var"), ("row1", "1.0 / (var + eps)")]
    (write,) = op.body.writes
    assert cpp_norms.per_element(op, write.expr).text == "exp(x - mu) * row0_ + (x - mu) * row1 + x / row0 + var / x"
    body = CppOp(op).functor_return
    assert "std::exp(x - mu) * row0_ + (x - mu) * row1 + x / row0 + var / x" in body
