"""Backward kernels (kopgen/backward_kernel.py): which ops get `<op>_backward`, its schema and
expressions, the formulas that call it, and what `kopgen check` says of each op."""

from __future__ import annotations

from kopgen.backward_kernel import RowGradient
from kopgen.choices import Route
from kopgen.model import PointwiseCompute
from kopgen.pipeline import load_spec_text
from kopgen.report import describe_plan
from kopgen.split import SplitGradient

HEAD = """\
kopgen: 1
package: kbw
ops:
"""
MULADD = """\
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    compute: "a * b + c"
    backward: {a: "grad * b", b: "grad * a"}
"""


def ops_of(text: str) -> dict:
    return {op.name: op for op in load_spec_text(HEAD + text, "kopgen.yaml").ops}


def test_pointwise_formulas_give_one_backward_op_computing_every_gradient():
    ops = ops_of(MULADD)
    kernel = ops["muladd_backward"]
    assert list(ops) == ["muladd", "muladd_backward"]
    assert kernel.schema_text == "muladd_backward(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)"
    assert isinstance(kernel.body, PointwiseCompute) and kernel.backward is None
    assert [w.expr.text for w in kernel.body.writes] == ["grad * b", "grad * a"]
    assert (kernel.registration, kernel.kernels, kernel.dtypes) == (
        ops["muladd"].registration, ops["muladd"].kernels, ops["muladd"].dtypes)
    gradients = ops["muladd"].backward.gradients
    assert [g.formula.text for g in gradients] == ["muladd_backward(grad, a, b)[0]", "muladd_backward(grad, a, b)[1]"]
    assert [g.eager.text for g in gradients] == ["grad * b", "grad * a"]
    # the kernel reads a and b for either gradient: both are saved where either is wanted
    assert [(s.name, s.needed_by) for s in ops["muladd"].backward.saved_tensors] == [("a", (0, 1)), ("b", (0, 1))]
    assert ops["muladd"].backward.differentiable_twice  # create_graph runs the formulas as written


def test_torch_functions_of_the_language_result_and_scalars_reach_the_kernel():
    ops = ops_of("""\
  - schema: "scaled_sigmoid(Tensor x, float scale=1.0) -> Tensor"
    compute: "scale * sigmoid(x)"
    backward: {x: "grad * result * (1 - result / scale) + torch.exp(x) * 0.0"}
""")
    kernel = ops["scaled_sigmoid_backward"]
    assert kernel.schema_text == "scaled_sigmoid_backward(Tensor grad, Tensor x, Tensor result, float scale) -> Tensor"
    assert ops["scaled_sigmoid"].backward.gradients[0].formula.text == "scaled_sigmoid_backward(grad, x, result, scale)"


def test_equal_gradients_share_an_output_and_grad_itself_stays_a_formula():
    ops = ops_of("""\
  - schema: "bias_relu(Tensor x, Tensor bias) -> Tensor"
    compute: "relu(x + bias)"
    backward: {x: "torch.where(result > 0, grad, 0.0)", bias: "torch.where(result > 0, grad, 0.0)"}
  - schema: "add3(Tensor a, Tensor b, Tensor c) -> Tensor"
    compute: "a + b + c"
    backward: {a: "grad", b: "grad * 2", c: non_differentiable}
""")
    assert ops["bias_relu_backward"].schema_text == "bias_relu_backward(Tensor grad, Tensor result) -> Tensor"
    assert {g.formula.text for g in ops["bias_relu"].backward.gradients} == {"bias_relu_backward(grad, result)"}
    assert ops["add3_backward"].schema_text == "add3_backward(Tensor grad) -> Tensor"
    a, b, c = ops["add3"].backward.gradients
    assert (a.formula.text, a.eager, b.formula.text, c.formula) == ("grad", None, "add3_backward(grad)", None)


def test_formulas_outside_the_language_keep_the_eager_path():
    ops = ops_of("""\
  - schema: "mymul(Tensor a, Tensor b) -> Tensor"
    compute: "a * b"
    backward: {a: "mymul(grad, b)", b: "torch.mul(grad, a)"}
  - schema: "sincos(Tensor x) -> (Tensor, Tensor)"
    compute: ["sin(x)", "cos(x)"]
    backward: {x: "grads[0] * results[1] - grads[1] * results[0]"}
  - schema: "passthrough(Tensor x) -> Tensor"
    compute: "x * 1.0"
    backward: {x: "grad"}
""")
    assert list(ops) == ["mymul", "sincos", "passthrough"]
    assert all(g.eager is None for op in ops.values() for g in op.backward.gradients)


def test_a_name_taken_by_an_op_of_the_spec_keeps_the_eager_path():
    ops = ops_of(MULADD + """\
  - schema: "muladd_backward(Tensor grad, Tensor a) -> Tensor"
    compute: "grad * a"
""")
    assert ops["muladd_backward"].backward_of == ""
    assert ops["muladd"].backward.gradients[0].eager is None


def test_check_says_which_ops_get_a_backward_kernel():
    text = MULADD + """\
  - schema: "mymul(Tensor a, Tensor b) -> Tensor"
    compute: "a * b"
    backward: {a: "mymul(grad, b)", b: "mymul(grad, a)"}
"""
    plan = describe_plan(load_spec_text(HEAD + text, "kopgen.yaml"), "kopgen.yaml")
    assert "  backward: a: grad * b\n            b: grad * a\n" in plan
    assert ("  backward kernel: kbw::muladd_backward, one launch for every gradient (then summed to broadcast "
            "shapes)\n") in plan
    assert "kbw::muladd_backward(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)\n" in plan
    assert "  computes: the gradients of kbw::muladd (its backward kernel)\n" in plan
    assert ("  backward kernel: none, the formulas run as torch ops: the formula of a calls an op of the "
            "namespace\n") in plan


SILU_AND_MUL = """\
  - schema: "silu_and_mul(Tensor x) -> Tensor"
    split: {x: [gate, up]}
    compute: "silu(gate) * up"
    backward:
      x: "torch.cat([grad * up * torch.sigmoid(gate) * (1 + gate * (1 - torch.sigmoid(gate))), \
grad * torch.nn.functional.silu(gate)], dim=-1)"
"""


def test_a_split_ops_cat_of_two_pointwise_halves_is_one_kernel_writing_both():
    ops = ops_of(SILU_AND_MUL)
    kernel = ops["silu_and_mul_backward"]
    assert kernel.schema_text == "silu_and_mul_backward(Tensor grad, Tensor x) -> Tensor"
    assert isinstance(kernel.body, SplitGradient) and kernel.body.source.name == "x"
    # the kernel reads x's halves and writes its output's halves; it returns the one Tensor
    assert [a.name for a in kernel.kernel_args] == ["grad", "gate", "up"]
    assert [(w.name, w.expr.text) for w in kernel.body.writes] == [
        ("grad_gate", "grad * up * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate)))"), ("grad_up", "grad * silu(gate)")]
    assert kernel.output_names == ("out",)
    assert kernel.shapes[0]["grad"][-1] * 2 == kernel.shapes[0]["x"][-1]  # grad is half as wide
    (gradient,) = ops["silu_and_mul"].backward.gradients
    assert gradient.formula.text == "silu_and_mul_backward(grad, x)"
    assert gradient.eager.text.startswith("torch.cat([")


def test_a_split_op_keeps_its_formulas_where_they_are_no_cat_of_pointwise_halves():
    not_cat = SILU_AND_MUL.replace("torch.cat([", "torch.stack([")
    assert "silu_and_mul_backward" not in ops_of(not_cat)
    other_dim = SILU_AND_MUL.replace("dim=-1", "dim=0")
    assert "silu_and_mul_backward" not in ops_of(other_dim)
    plan = describe_plan(load_spec_text(HEAD + SILU_AND_MUL, "kopgen.yaml"), "kopgen.yaml")
    assert "  backward kernel: kbw::silu_and_mul_backward, one launch writing both halves of x's gradient (no cat)\n" in plan


def test_a_compiled_split_ops_gradient_kernel_runs_by_rows_writing_the_halves_of_one_tensor():
    """On torch_library and stable_abi the C++ and CUDA kernels of `<op>_backward` run the norms loop with no
    statistics: the halves of x read in place, the two writes the halves of the one Tensor joined_output makes."""
    from kopgen.lang.cpp import CppOp

    for route in ("torch_library", "stable_abi"):
        compiled = SILU_AND_MUL.replace("    split:", f"    registration: {route}\n    backends: {{cpu: cpp, cuda: cuda}}\n    split:")
        ops = ops_of(compiled)
        assert ops["silu_and_mul"].backward.gradients[0].formula.text == "silu_and_mul_backward(grad, x)"
        kernel = CppOp(ops["silu_and_mul_backward"])
        assert isinstance(kernel.op.body, SplitGradient)
        assert kernel.host_signature.startswith("Tensor silu_and_mul_backward(")  # one Tensor: x's gradient
        body = kernel.host_body("cpu")
        assert body[-6:] == ['KernelCall call("kbw::silu_and_mul_backward", {grad, gate, up});', "call.read(grad);",
                             "call.read(gate);", "call.read(up);", "Tensor out = call.joined_output();",
                             "call.norms_cpu<functors::silu_and_mul_backward>();"][1:] + ["return out;"], body
        assert body[-7] == 'KernelCall call("kbw::silu_and_mul_backward", {grad, gate, up});', body
        assert "launch(call, kernels::silu_and_mul_backward);" in kernel.host_body("cuda")
        assert kernel.functor_methods("cpu") == ["using Reductions = std::tuple<>;"]
        assert kernel.cpu_operator.startswith("Values<acc_t, 2> operator()(")  # grad_gate and grad_up
        assert "const acc_t* /*no statistics*/" in kernel.cpu_operator
        assert kernel.launcher_return == "return cuda::norms<functors::silu_and_mul_backward>(launch);"
        plan = describe_plan(load_spec_text(HEAD + compiled, "kopgen.yaml"), "kopgen.yaml")
        assert "backward kernel: kbw::silu_and_mul_backward, one launch writing both halves" in plan


ROWS = """\
  - schema: "rowmax(Tensor x) -> Tensor"
    reduce: {op: max}
    backward: {x: "torch.where(x == result.unsqueeze(-1), grad.unsqueeze(-1), 0.0)"}
  - schema: "rowsum(Tensor x) -> Tensor"
    reduce: {op: sum}
    backward: {x: "grad.unsqueeze(-1).expand(x.shape)"}
  - schema: "rowdot(Tensor a, Tensor b) -> Tensor"
    reduce: {op: sum, expr: "a * b"}
    backward: {a: "grad.unsqueeze(-1) * b", b: "grad * a.sum(-1)"}
"""


def test_a_row_reductions_gradient_is_one_pointwise_kernel_reading_grad_and_result_as_columns():
    ops = ops_of(ROWS)
    kernel = ops["rowmax_backward"]
    assert kernel.schema_text == "rowmax_backward(Tensor grad, Tensor x, Tensor result) -> Tensor"
    assert isinstance(kernel.body, RowGradient) and kernel.body.per_row == ("grad", "result")
    assert [w.expr.text for w in kernel.body.writes] == ["where(x == result, grad, 0.0)"]
    assert (kernel.shapes[0]["grad"], kernel.shapes[0]["result"]) == (kernel.shapes[0]["x"][:-1],) * 2
    assert ops["rowmax"].backward.gradients[0].formula.text == "rowmax_backward(grad, x, result)"
    # grad broadcast alone is a view (no kernel beats it); grad read as a row's value is not pointwise
    assert "rowsum_backward" not in ops and "rowdot_backward" not in ops
    plan = describe_plan(load_spec_text(HEAD + ROWS, "kopgen.yaml"), "kopgen.yaml")
    assert "it reads no input (grad broadcast: a view, which no kernel beats)" in plan


def test_a_tensor_optional_the_kernels_formulas_do_not_read_leaves_the_kernel_to_the_others():
    ops = ops_of("""\
  - schema: "scale_shift(Tensor x, Tensor scale, Tensor? shift=None) -> Tensor"
    compute: "x * scale + (shift if present(shift) else 0.0)"
    backward: {x: "grad * scale", scale: "grad * x", shift: "grad"}
  - schema: "gated_scale(Tensor x, Tensor? gate=None) -> Tensor"
    compute: "x * (gate if present(gate) else 1.0)"
    backward: {x: "grad * gate if gate is not None else grad", gate: "grad * x"}
""")
    assert ops["scale_shift_backward"].schema_text == "scale_shift_backward(Tensor grad, Tensor x, Tensor scale) -> (Tensor, Tensor)"
    # shift's gradient is grad itself: it stays a formula, summed to shift's shape where shift is given
    assert [g.formula.text for g in ops["scale_shift"].backward.gradients] == [
        "scale_shift_backward(grad, x, scale)[0]", "scale_shift_backward(grad, x, scale)[1]", "grad"]
    assert "gated_scale_backward" not in ops  # its formula tests the Tensor?


NORMS = """\
  - schema: "rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> Tensor"
    normalize:
      stats: {rstd: "rsqrt(mean(x * x) + eps)"}
      compute: "x * rstd * weight"
    backward:
      x: "rstd * (grad * weight - x * rstd * rstd * (grad * weight * x).mean(-1, keepdim=True))"
      weight: "grad * x * rstd"
  - schema: "softmax(Tensor x) -> Tensor"
    normalize:
      stats: {x_max: "max(x)", sum_exp: "sum(exp(x - x_max))"}
      compute: "exp(x - x_max) / sum_exp"
    backward:
      x: "result * (grad - (grad * result).sum(dim=-1, keepdim=True) + 0.0 * (grad * result).sum(-1, keepdim=True))"
"""


def test_a_normalisations_input_gradient_is_a_row_normalisation_reading_the_saved_statistics():
    from kopgen.model_kinds import RowNormalization

    ops = ops_of(NORMS)
    kernel = ops["rms_norm_backward"]
    assert kernel.schema_text == "rms_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor rstd) -> Tensor"
    assert isinstance(kernel.body, RowNormalization) and kernel.body.row_stats == ("rstd",)
    (mean,) = kernel.body.stats
    assert (mean.name, mean.reduction.kind, mean.reduced.text, mean.outer) == ("mean0", "mean", "grad * weight * x", None)
    assert [w.expr.text for w in kernel.body.writes] == ["rstd * (grad * weight - x * rstd * rstd * mean0)"]
    assert kernel.shapes[0]["rstd"] == (*kernel.shapes[0]["x"][:-1], 1)  # a value per row, as norm_stat keeps it
    # x's formula calls the kernel; weight's (a broadcast input's) stays a formula; rstd is still saved
    x, weight = ops["rms_norm"].backward.gradients
    assert x.formula.text == "rms_norm_backward(grad, x, weight, rstd)" and x.eager.text.startswith("rstd * (grad")
    assert weight.formula.text == "grad * x * rstd" and weight.eager is None
    assert ops["rms_norm"].backward.stats == ("rstd",) and ops["rms_norm"].backward.differentiable_twice
    # one statistic per distinct reduction (dim=-1 or -1 alike); result read as the row's elements
    softmax = ops["softmax_backward"]
    assert softmax.schema_text == "softmax_backward(Tensor grad, Tensor result) -> Tensor"
    assert [s.name for s in softmax.body.stats] == ["sum0"] and softmax.body.row_stats == ()
    plan = describe_plan(load_spec_text(HEAD + NORMS, "kopgen.yaml"), "kopgen.yaml")
    assert ("backward kernel: kbw::rms_norm_backward, one launch for x's gradient (its row reductions, then the "
            "formula); weight: the formulas, as torch ops") in plan


BROADCAST_NORMS = """\
  - schema: "rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> Tensor"
    normalize:
      stats: {rstd: "rsqrt(mean(x * x) + eps)"}
      compute: "x * rstd * weight"
    tests:
      shapes: [{x: [4, 10], weight: [10]}, {x: [2, 3, 8], weight: [1, 1, 8]}]
    backward:
      x: "rstd * (grad * weight - x * rstd * rstd * (grad * weight * x).mean(-1, keepdim=True))"
      weight: "grad * x * rstd"
  - schema: "layer_norm(Tensor x, Tensor weight, Tensor scale, Tensor? bias=None, float eps=1e-5) -> Tensor"
    normalize:
      stats:
        mu: "mean(x)"
        rstd: "rsqrt(mean((x - mu) * (x - mu)) + eps)"
      compute: "(x - mu) * rstd * weight * scale + (bias if present(bias) else 0.0)"
    tests:
      shapes: [{x: [4, 10], weight: [10], scale: [4, 10], bias: [10]}]
    backward:
      x: "rstd * (grad * weight * scale - (grad * weight * scale).mean(-1, keepdim=True) - (x - mu) * rstd * (grad * weight * scale * (x - mu) * rstd).mean(-1, keepdim=True))"
      weight: "grad * (x - mu) * rstd * scale"
      scale: "grad * (x - mu) * rstd * weight"
      bias: "grad"
"""


def test_the_gradients_of_inputs_read_by_all_rows_are_summed_over_the_rows_in_the_same_kernel():
    from kopgen.model_kinds import ColumnSum

    ops = ops_of(BROADCAST_NORMS)
    kernel = ops["rms_norm_backward"]
    assert kernel.schema_text == "rms_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)"
    (summed,) = kernel.body.column_sums
    assert isinstance(summed, ColumnSum) and (summed.name, summed.expr.text, summed.like) == ("out1", "grad * x * rstd", "weight")
    assert kernel.output_names == ("out0", "out1")
    # both formulas index one call of the kernel (backward runs it once: lang/autograd.py's shared calls)
    x, weight = ops["rms_norm"].backward.gradients
    assert x.formula.text == "rms_norm_backward(grad, x, weight, rstd)[0]" and x.eager.text.startswith("rstd * (grad")
    assert weight.formula.text == "rms_norm_backward(grad, x, weight, rstd)[1]" and weight.eager.text == "grad * x * rstd"
    # scale has rows of its own (its spec'd shape is x's): its formula stays; bias, a Tensor?, stays a formula
    layer = ops["layer_norm_backward"]
    assert [c.like for c in layer.body.column_sums] == ["weight"]
    assert layer.schema_text == ("layer_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor scale, Tensor mu, "
                                 "Tensor rstd) -> (Tensor, Tensor)")
    formulas = {g.arg.name: g.formula.text for g in ops["layer_norm"].backward.gradients}
    assert formulas["weight"] == "layer_norm_backward(grad, x, weight, scale, mu, rstd)[1]"
    assert formulas["scale"] == "grad * (x - mu) * rstd * weight" and formulas["bias"] == "grad"
    plan = describe_plan(load_spec_text(HEAD + BROADCAST_NORMS, "kopgen.yaml"), "kopgen.yaml")
    assert ("backward kernel: kbw::rms_norm_backward, one launch for x's gradient (its row reductions, then the "
            "formula) and weight's (summed over the rows in the kernel)") in plan
    assert "and weight's (summed over the rows in the kernel); scale, bias: the formulas, as torch ops" in plan


def test_a_compiled_routes_weight_formula_that_recomputes_statistics_is_summed_in_the_kernel():
    """The compiled routes save no statistics: a weight's formula recomputes them, and its row reductions
    are the kernel's statistics, one where the lead gradient's formula has the same (x * x's mean)."""
    ops = ops_of("""\
  - schema: "rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> Tensor"
    registration: torch_library
    backends: {cpu: cpp, cuda: cuda}
    normalize: {stats: {rstd: "rsqrt(mean(x * x) + eps)"}, compute: "x * rstd * weight"}
    tests: {shapes: [{x: [4, 10], weight: [10]}]}
    backward:
      x: "torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (grad * weight - x * (grad * weight * x).mean(-1, keepdim=True) / ((x * x).mean(-1, keepdim=True) + eps))"
      weight: "grad * x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) + (grad * x).sum(-1, keepdim=True)"
""")
    kernel = ops["rms_norm_backward"]
    assert kernel.schema_text == "rms_norm_backward(Tensor grad, Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)"
    assert [s.text for s in kernel.body.stats] == ["mean(x * x)", "mean(grad * weight * x)", "sum(grad * x)"]
    (summed,) = kernel.body.column_sums
    assert (summed.like, summed.expr.text) == ("weight", "grad * x * rsqrt(mean0 + eps) + sum2")
    _, weight = ops["rms_norm"].backward.gradients
    assert weight.formula.text == "rms_norm_backward(grad, x, weight, eps)[1]" and weight.eager.text.startswith("grad * x")


# Two inputs read by all rows (a bias that is not optional): two column sums.
LAYER_NORM_WITH_BIAS = """\
  - schema: "layer_norm(Tensor x, Tensor weight, Tensor bias, float eps=1e-5) -> Tensor"
    normalize:
      stats: {mu: "mean(x)", rstd: "rsqrt(mean((x - mu) * (x - mu)) + eps)"}
      compute: "(x - mu) * rstd * weight + bias"
    tests: {shapes: [{x: [4, 10], weight: [10], bias: [10]}]}
    backward:
      x: "rstd * (grad * weight - (grad * weight).mean(-1, keepdim=True) - (x - mu) * rstd * (grad * weight * (x - mu) * rstd).mean(-1, keepdim=True))"
      weight: "grad * (x - mu) * rstd"
      bias: "grad"
"""


def test_two_column_sums_of_a_triton_launcher_are_summed_apart():
    """Views of one Tensor as two outputs alias each other, which torch.library refuses (opcheck, and
    autograd through the op): each column sum is its own sum of the partial rows, into its own output
    (test_normalize.py runs them)."""
    from kopgen.lang import norm_sums

    ops = ops_of(LAYER_NORM_WITH_BIAS)
    kernel = ops["layer_norm_backward"]
    assert [c.like for c in kernel.body.column_sums] == ["weight", "bias"]
    epilogue = "\n".join(norm_sums.epilogue(kernel))
    assert "norm_column_sum(partials, 0, out1, kernel)" in epilogue
    assert "norm_column_sum(partials, 1, out2, kernel)" in epilogue and "sums =" not in epilogue


def test_a_normalisations_backward_runs_its_kernel_once_for_every_gradient_it_computes():
    from kopgen.lang import autograd, norm_sums, norms, sharding

    ops = ops_of(BROADCAST_NORMS)
    body = "\n".join(autograd.backward_body(ops["rms_norm"]))
    # once, as plain eager backward runs it (its kernel) or the operator; create_graph runs the formulas as written
    assert body.count("torch.ops.kbw.rms_norm_backward.default,") == 1
    assert body.count("_support.kernel_or_op(") == 1
    assert "One rms_norm_backward call serves the gradients of x and weight" in body
    # the partial sums are the launcher's: each program sums its blocks of rows, in registers (one pass),
    # then stores its partial row, or adds to its partial row (longer rows)
    kernel = ops["rms_norm_backward"]
    stores = "\n".join(norms.store(kernel, 8))
    assert "if COLUMN_SUMS:" in stores and "out1 += tl.reduce(" in stores
    tail = "\n".join(norm_sums.column_sum_tail(kernel))
    assert "tl.store(partials_ptr + offsets, out1, mask=cols < n_cols)" in tail
    looped = "\n".join(norms.looped(kernel, 8))
    # its first block's sums stored: the partial rows need no zeros first
    assert "mask=(cols < n_cols) & (step > 0),\n" in looped and "other=0.0," in looped
    # DTensor: weight's gradient is a partial sum where the rows are sharded
    assert "summed=(2,)" in "".join(sharding.registration(kernel))


def test_a_normalisations_formula_outside_the_reductions_of_pointwise_rows_keeps_the_eager_path():
    def norm(name: str, formula: str, route: str = "custom_op") -> str:
        backends = "{cpu: cpp, cuda: cuda}" if route == "torch_library" else "{cpu: triton, cuda: triton}"
        return f"""\
  - schema: "{name}(Tensor x, float eps=1e-6) -> Tensor"
    registration: {route}
    backends: {backends}
    normalize:
      stats: {{rstd: "rsqrt(mean(x * x) + eps)"}}
      compute: "x * rstd"
    backward: {{x: "{formula}"}}
"""

    ops = ops_of(
        norm("nested", "rstd * (grad - x * (grad * (x * x).mean(-1, keepdim=True)).mean(-1, keepdim=True))")
        + norm("no_keepdim", "rstd * (grad - x * rstd * rstd * (grad * x).mean(-1).unsqueeze(-1))")
        + norm("other_dim", "rstd * (grad - x * rstd * rstd * (grad * x).mean(0, keepdim=True))")
        + norm("pointwise", "grad * rstd")
        + norm("own_op", "rstd * (grad - x * rstd * rstd * pointwise(grad * x).mean(-1, keepdim=True))")
        + norm("reduced", "rstd * (grad - x * rstd * rstd * (grad * x).mean(-1, keepdim=True))")
    )
    # a reduction without keepdim or over another dimension, none at all (a pointwise kernel would do, not
    # this one), an op of the namespace: each keeps its formula
    kernels = {name for name in ops if name.endswith("_backward")}
    assert kernels == {"reduced_backward", "nested_backward"}
    assert all(g.eager is None for name in ("no_keepdim", "other_dim", "pointwise", "own_op")
               for g in ops[name].backward.gradients)
    # a reduction inside a reduced expression is a statistic of its own, computed first
    nested = ops["nested_backward"].body.stats
    assert [(s.name, s.text) for s in nested] == [("mean0", "mean(x * x)"), ("mean1", "mean(grad * mean0)")]
    plan = describe_plan(load_spec_text(HEAD + norm("pointwise", "grad * rstd"), "kopgen.yaml"), "kopgen.yaml")
    assert "backward kernel: none, the formulas run as torch ops: x's formula is not pointwise with row reductions" in plan
    # the compiled routes run it through their norms loop (C++ and CUDA) where the formula reads no saved
    # statistic (they save none: normalize.check_saved_stats), and their C++ autograd calls it
    recomputed = ("torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (grad - x * (grad * x).mean(-1, keepdim=True)"
                  " / ((x * x).mean(-1, keepdim=True) + eps))")
    compiled = ops_of(norm("compiled", recomputed, "torch_library"))
    kernel = compiled["compiled_backward"]
    assert kernel.body.row_stats == () and [s.text for s in kernel.body.stats] == ["mean(x * x)", "mean(grad * x)"]
    assert compiled["compiled"].cpp_autograd and kernel.registration is Route.TORCH_LIBRARY
