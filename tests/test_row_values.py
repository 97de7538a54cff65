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
    body = CppOp(op).functor_return("cpu")
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
    body = CppOp(op).functor_return("cpu")
    assert "exp_of(x - mu) * row0_ + (x - mu) * row1 + x / row0 + var / x" in body
    cuda = CppOp(op).functor_return("cuda")  # the same with the exp of the storage type
    assert "exp_for<scalar_t>(x - mu) * row0_ + (x - mu) * row1 + x / row0 + var / x" in cuda


def test_independent_statistics_are_reduced_in_one_pass_on_cuda():
    """A reduction joins the first pass whose results its values do not read, where its finishing reads only
    statistics done or finished before it in the pass (c's rsqrt reads var); a row value comes as soon as what
    it reads is. The CPU functor keeps the slot order."""
    text = SPEC.replace(
        'stats: {mu: "mean(x)", var: "mean((x - mu) ** 2)"}',
        'stats: {mu: "mean(x)", var: "mean((x - mu) ** 2)", c: "rsqrt(mean(x * x) + var)", top: "max(x)"}',
    ).replace('"(x - mu) * rsqrt(var + eps) * row0 + where(var > eps, 1.0, 0.0) + x * mu"', '"(x - mu) * c + top"')
    (op,) = load_spec_text(text, "kopgen.yaml").ops
    assert cpp_norms.slots(op).names == ("mu", "var", "c", "top")
    assert cpp_norms.passes(op) == [(0, 3), (1, 2)]
    assert "using Passes = std::tuple<Together<0, 3>, Together<1, 2>>;" in cpp_norms.methods(op, "cuda")
    # where the finishing reads a later statistic, the statistic waits for it
    late = text.replace('c: "rsqrt(mean(x * x) + var)", top: "max(x)"', 'c: "mean(x * x)", top: "max(x) + c + var"')
    (op,) = load_spec_text(late, "kopgen.yaml").ops
    assert cpp_norms.passes(op) == [(0, 2), (1, 3)]
    assert not any("Passes" in line for line in cpp_norms.methods(op, "cpu"))


def test_a_row_value_is_finished_before_the_pass_that_reads_it():
    op = scaled()  # row0_ and row1 read var; nothing reads them but the written value
    assert cpp_norms.passes(op) == [(0,), (1,), (2,), (3,)]
    assert not any("Passes" in line for line in cpp_norms.methods(op, "cuda"))  # no pass holds two


LAYER_NORM_BACKWARD = """\
kopgen: 1
package: krow
defaults: {registration: torch_library, backends: {cpu: cpp, cuda: cuda}}
ops:
  - schema: "grad_x(Tensor grad, Tensor x, Tensor weight, float eps=1e-5) -> Tensor"
    normalize:
      stats:
        mu: "mean(x)"
        var: "mean((x - mu) * (x - mu))"
        gw: "mean(grad * weight)"
        gwx: "mean(grad * weight * (x - mu) * rsqrt(var + eps))"
        top: "max(grad * rsqrt(var + eps))"
      compute: "rsqrt(var + eps) * (grad * weight - gw - (x - mu) * rsqrt(var + eps) * gwx) + top"
"""


def test_a_row_value_that_multiplies_a_mean_is_taken_out_of_it():
    """layer_norm's backward: mean(g * (x - mu) * rstd) is rstd * mean(g * (x - mu)), so it reduces with the
    variance (two rounds of a row's reductions, not three); a max keeps its row value inside."""
    (op,) = load_spec_text(LAYER_NORM_BACKWARD, "kopgen.yaml").ops
    layout = cpp_norms.slots(op)
    assert layout.names == ("mu", "var", "row0", "gw", "gwx", "top")
    assert layout.reduced["gwx"].text == "grad * weight * (x - mu)"
    assert layout.finishing["gwx"].text == "gwx * rsqrt(var + eps)"
    assert layout.reduced["top"].text == "grad * row0" and layout.finishing["top"] is None
    assert cpp_norms.passes(op) == [(0, 3), (1, 4), (2,), (5,)]
    methods = "\n".join(cpp_norms.methods(op, "cuda"))
    assert "__device__ acc_t finished(Stat<4>, const acc_t* stat, acc_t gwx) const {" in methods
    assert "return gwx * (acc_t(1) / std::sqrt(var + eps));" in methods
    # the CPU functor finishes in slot order, after var: the same methods
    assert "acc_t finished(Stat<4>, const acc_t* stat, acc_t gwx) const {" in "\n".join(cpp_norms.methods(op, "cpu"))


SOFTMAX = """\
kopgen: 1
package: krow
defaults: {registration: torch_library, backends: {cpu: cpp, cuda: cuda}}
ops:
  - schema: "softmax(Tensor x, float kept=1.0) -> Tensor"
    normalize:
      stats: {top: "max(x)", sum_exp: "sum(exp(x - top))"}
      compute: "exp(x - top) / sum_exp * kept"
"""


def test_the_cpu_loop_keeps_a_statistics_exponentials_for_the_written_value():
    """softmax's exp(x - top), reduced by its sum, is kept by the CPU loop and read by from_kept (the argument
    named `kept` renames the parameter); the CUDA functor computes it again."""
    (op,) = load_spec_text(SOFTMAX, "kopgen.yaml").ops
    reuse = cpp_norms.kept(op)
    assert (reuse.slot, reuse.name, reuse.expr.text) == (1, "kept_", "kept_ * row0 * kept")
    cpu = "\n".join(cpp_norms.methods(op, "cpu"))
    assert "static constexpr int kept_stat = 1;" in cpu
    assert "Values<acc_t, 1> from_kept(const acc_t* stat, acc_t kept_, acc_t /*x*/) const {" in cpu
    assert "return {kept_ * row0 * kept};" in cpu
    assert "from_kept" not in "\n".join(cpp_norms.methods(op, "cuda"))


def test_nothing_is_kept_where_it_would_not_save_a_function_call():
    cases = [
        SOFTMAX.replace('"exp(x - top) / sum_exp * kept"', '"(x - top) / sum_exp * kept"'),  # not in the written value
        SOFTMAX.replace('sum(exp(x - top))', 'sum(x - top)').replace('"exp(x - top)', '"(x - top)'),  # no call
    ]
    for text in cases:
        (op,) = load_spec_text(text, "kopgen.yaml").ops
        assert cpp_norms.kept(op) is None, text
        assert "kept_stat" not in "\n".join(cpp_norms.methods(op, "cpu"))
