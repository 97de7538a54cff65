"""torch_library ops get their autograd in C++ where their backward formulas translate (lang/cpp_autograd.py):
the choice per op, what `kopgen check` says of it, the C++ written, that it compiles, and (slow) that the
generated suite's gradcheck, gradgradcheck and opcheck pass with it."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from kopgen import generate
from kopgen.cli import main
from kopgen.lang.cpp_autograd import python_reason
from kopgen.model import Route

from .conftest import EXAMPLES, installed_suite_passes
from .test_compiled import compile_host, needs_nvcc

# Scalars of each kind, torch.where, a condition on a bool, two outputs (grads[i], results[i]), one call of a
# fused backward op shared by two gradients, an int in a true division, arguments named like the generated
# locals (ctx, grad, saved, guard, handle), a split op's torch.cat of its halves' gradients; and one formula
# outside the subset.
SPEC = """\
kopgen: 1
package: kgrads
defaults:
  registration: torch_library
  backends: {cpu: cpp, cuda: cuda}
  dtypes: [float32, float64]
ops:
  - schema: "bias_leaky(Tensor x, Tensor bias, *, float alpha=0.1, bool negate=False) -> Tensor"
    compute: "-where(x + bias > 0, x + bias, alpha * (x + bias)) if negate else where(x + bias > 0, x + bias, alpha * (x + bias))"
    backward:
      x: "grad * torch.where(x + bias > 0, 1.0, alpha) * (-1.0 if negate else 1.0)"
      bias: "grad * torch.where(x + bias > 0, 1.0, alpha) * (-1.0 if negate else 1.0)"
  - schema: "sincos(Tensor x) -> (Tensor, Tensor)"
    compute: ["sin(x)", "cos(x)"]
    backward:
      x: "grads[0] * results[1] - grads[1] * results[0]"
  - schema: "scaled(Tensor x, Tensor w, float s) -> Tensor"
    compute: "x * w * s"
    backward:
      x: "scaled_grads(grad, x, w, s)[0]"
      w: "scaled_grads(grad, x, w, s)[1]"
  - schema: "scaled_grads(Tensor grad, Tensor x, Tensor w, float s) -> (Tensor, Tensor)"
    compute: ["grad * w * s", "grad * x * s"]
  - schema: "expish(Tensor x, int n) -> Tensor"
    compute: "exp(x) * (n / 2)"
    backward:
      x: "grad * torch.exp(x) * (n / 2)"
  - schema: "clash(Tensor ctx, Tensor grad, Tensor saved, float guard, Tensor handle) -> Tensor"
    compute: "ctx * grad + saved * guard * handle"
    backward:
      ctx: "grads[0] * grad"
      grad: "grads[0] * ctx"
      saved: "grads[0] * guard * handle"
      handle: "grads[0] * saved * guard"
  - schema: "twice(Tensor x) -> Tensor"
    compute: "2 * x"
    backward:
      x: "grad * 2 * torch.ones_like(x)"
  - schema: "shifted(Tensor x, Tensor? shift, Tensor scale) -> Tensor"
    compute: "x * scale + (shift if present(shift) else 0.0)"
    backward:
      x: "grad * scale"
      shift: "grad"
      scale: "grad * x"
  - schema: "gated(Tensor x, Tensor? gate=None) -> Tensor"
    compute: "x * gate if present(gate) else x"
    backward:
      x: "grad * gate if gate is not None else grad"
      gate: "grad * x"
  - schema: "silu_mul(Tensor x) -> Tensor"
    split: {x: [gate, up]}
    compute: "silu(gate) * up"
    backward:
      x: "torch.cat([grad * up * torch.sigmoid(gate) * (1 + gate * (1 - torch.sigmoid(gate))), grad * torch.nn.functional.silu(gate)], -1)"
"""
IN_CPP = "  autograd: C++ (a torch::autograd::Function in csrc/ops.cpp; calls with grad stay in C++)\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    spec = tmp_path_factory.mktemp("spec") / "kopgen.yaml"
    spec.write_text(SPEC)
    return generate(spec, tmp_path_factory.mktemp("kgrads") / "repo")


def test_check_shows_which_autograd_each_op_gets(tmp_path):
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(SPEC)
    output = CliRunner().invoke(main, ["check", str(spec)]).output
    assert output.count(IN_CPP) == 7  # scaled_grads has no backward
    assert ("  autograd: Python (torch.library.register_autograd): x's formula: torch.ones_like() has no C++ "
            "translation\n") in output
    assert ("  autograd: Python (torch.library.register_autograd): x's formula reads the Tensor? 'gate' (C++ "
            "autograd takes an optional Tensor only where no formula reads it)\n") in output
    stable = CliRunner().invoke(main, ["check", str(EXAMPLES / "fused_stable.yaml")]).output
    assert stable.count("autograd: Python (torch.library.register_autograd): the stable ABI has no autograd") == 4


def test_formulas_become_aten_calls_and_own_ops_dispatcher_calls(repo):
    ops = (repo / "kgrads/csrc/ops.cpp").read_text()
    assert "grad * at::where(x + bias > 0, 1.0, alpha) * (negate ? -1.0 : 1.0),\n" in ops
    assert "    bool negate = ctx->saved_data[\"negate\"].toBool();\n" in ops
    assert "grads[0] * result1 - grads[1] * result0,\n" in ops
    assert "    auto [out0, out1] = ops::sincos(x);\n" in ops
    # The shared call runs once, where either gradient is wanted.
    assert ("    std::tuple<Tensor, Tensor> scaled_grads_grads;\n"
            "    if (ctx->needs_input_grad(0) || ctx->needs_input_grad(1)) {\n"
            "      scaled_grads_grads = ops::scaled_grads(grad, x, w, s);\n") in ops
    assert "grad * at::exp(x) * (static_cast<double>(n) / 2)" in ops  # Python's / of two ints is a true division
    impls = ops.partition("TORCH_LIBRARY_IMPL(kgrads, Autograd, m) {\n")[2].partition("}")[0]
    # The ops with C++ formulas, and those without formulas (scaled_grads, the backward kernels): not twice's
    # and gated's, whose formulas stay Python.
    in_cpp = ("bias_leaky", "bias_leaky_backward", "sincos", "scaled", "scaled_grads", "expish", "expish_backward",
              "clash", "shifted", "shifted_backward", "silu_mul", "silu_mul_backward")
    assert impls.splitlines() == [f'  m.impl("{name}", &kgrads::autograd::kernels::{name});' for name in in_cpp]
    # An op without formulas: its Function's backward raises what the Python registration raised.
    assert ('    TORCH_CHECK(false, "kgrads::scaled_grads is not differentiable: its spec has no backward "\n'
            '                       "formulas");\n    return {};\n') in ops
    assert ('    TORCH_CHECK(false, "kgrads::expish_backward is not differentiable: it is the backward kernel "\n'
            '                       "of kgrads::expish");\n') in ops
    # Its locals give way to the arguments: ctx_, the saved tensors saved_, the handle handle_, guard_.
    assert "  static variable_list backward(AutogradContext* ctx_, variable_list grads) {\n" in ops
    assert "    variable_list saved_ = ctx_->get_saved_variables();\n    const Tensor& ctx = saved_[0];\n" in ops
    assert "      grad_saved = at::sum_to(\n          grads[0] * guard * handle,\n" in ops
    assert "  static auto handle_ = c10::Dispatcher::singleton()\n" in ops
    assert "    at::AutoDispatchBelowADInplaceOrView guard_;\n    Tensor out = ops::clash(ctx, grad, saved, guard, handle);\n" in ops
    registration = (repo / "kgrads/_registration.py").read_text()
    # twice's and gated's formulas; scaled_grads and the backward kernels raise from C++
    assert registration.count("torch.library.register_autograd(") == 2
    assert '"kgrads::gated", _gated_backward' in registration
    # bias_leaky's backward kernel serves both gradients; its formulas stay for a differentiated backward
    assert "      bias_leaky_grads = ops::bias_leaky_backward(grad, x, bias, alpha, negate);\n" in ops
    assert "    if (torch::autograd::GradMode::is_enabled()) {  // create_graph: the formulas as written\n" in ops
    assert '"kgrads::twice", _twice_backward' in registration
    assert "kgrads::bias_leaky\", _bias_leaky" not in registration  # its autograd is C++
    # A Tensor? no formula reads: an edge only where given, so the indices after it move with it.
    assert '    ctx->saved_data["has_shift"] = shift.has_value() && shift->defined();\n' in ops
    assert '    const bool has_shift = ctx->saved_data["has_shift"].toBool();\n' in ops
    assert "      if (has_shift && ctx->needs_input_grad(1)) {\n" in ops
    assert "      if (ctx->needs_input_grad(has_shift + 1)) {\n" in ops
    assert "return {grad_x, grad_shift, grad_scale};" in ops
    # A split op: its backward kernel, else (create_graph) its formula over the halves of the saved x.
    assert ("      const Tensor gate = x.narrow(-1, 0, x.size(-1) / 2);\n"
            "      const Tensor up = x.narrow(-1, x.size(-1) / 2, x.size(-1) / 2);\n") in ops
    assert "at::cat({grad * up * at::sigmoid(gate) * (1 + gate * (1 - at::sigmoid(gate))), grad\n" in ops
    assert "            ops::silu_mul_backward(grad, x),\n" in ops


def test_what_keeps_the_python_registration(tmp_path):
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(SPEC)
    from kopgen.pipeline import check_spec

    package, _ = check_spec(spec)
    ops = {op.name: op for op in package.ops}
    # the ops without formulas too (scaled_grads, the backward kernels: their backward raises)
    assert [op.name for op in package.ops if op.cpp_autograd] == [
        "bias_leaky", "bias_leaky_backward", "sincos", "scaled", "scaled_grads", "expish", "expish_backward", "clash",
        "shifted", "shifted_backward", "silu_mul", "silu_mul_backward"]
    assert python_reason(dataclasses.replace(ops["sincos"], registration=Route.CUSTOM_OP), package.ops) \
        == "custom_op is a Python route"
    formula = dataclasses.replace(ops["expish"].backward.gradients[0].formula, python="grad.unsqueeze(-1) * x")
    backward = dataclasses.replace(ops["expish"].backward, gradients=(
        dataclasses.replace(ops["expish"].backward.gradients[0], formula=formula),))
    assert python_reason(dataclasses.replace(ops["expish"], backward=backward), package.ops) \
        == "x's formula: grad.unsqueeze() has no C++ translation"


def test_the_autograd_compiles(repo, tmp_path):
    """csrc/ops.cpp with its Functions, g++ -Wall -Werror as torch builds it."""
    compile_host(repo / "kgrads/csrc/ops.cpp", tmp_path, "torch_library")


@needs_nvcc
def test_the_autograd_compiles_beside_cuda(repo, tmp_path):
    """The same with USE_CUDA, as a CUDA build of torch sees it (nvcc as the host compiler's driver)."""
    compile_host(repo / "kgrads/csrc/ops.cpp", tmp_path, "torch_library", cuda=True)


@pytest.mark.slow
def test_suite_passes_with_the_cpp_autograd(repo, tmp_path):
    """gradcheck, gradgradcheck and opcheck (test_aot_dispatch_dynamic among them) of every op, built and run."""
    installed_suite_passes(repo, tmp_path / "site", at_least=60)


TRANSLATED = {
    "grad * x ** 2 + alpha ** 2": "grad * at::pow(x, 2) + std::pow(alpha, 2)",
    "grad * (x > 0) * torch.sigmoid(x)": "grad * (x > 0) * at::sigmoid(x)",
    "grad * torch.where(x > bias, x, 0.0)": "grad * at::where(x > bias, x, 0.0)",
    "-grad if negate and alpha > 0 else grad": "negate && alpha > 0 ? -grad : grad",
    "grad * (not negate) - grad / (1 - alpha)": "grad * !negate - grad / (1 - alpha)",
    "grad * torch.maximum(x, bias)": "grad * at::maximum(x, bias)",
    # a normalisation's row statistics, as its formulas write them
    "grad - x * (grad * x).mean(-1, keepdim=True)": "grad - x * at::mean(grad * x, at::IntArrayRef{-1}, true)",
    "(grad * x).sum(dim=-1, keepdim=True)": "at::sum(grad * x, at::IntArrayRef{-1}, true)",
    # a split op's gradient, its halves' gradients joined
    "torch.cat([grad * x, grad * torch.nn.functional.silu(x)], -1)": "at::cat({grad * x, grad * at::silu(x)}, -1)",
}
REFUSED = {
    "grad.unsqueeze(-1) * x": "grad.unsqueeze() has no C++ translation",
    "grad * ~negate": "'~negate': C++ autograd takes -, + and not",
    "torch.clamp(grad, min=0.0)": "'torch.clamp(grad, min=0.0)': keyword arguments",
    "grad * x.shape[0]": "'x.shape' has no C++ translation",
    "grad * torch.maximum(x, 0.0)": "at::maximum() of a number",
    "grad if x.sum() > 0 else -grad": "x.sum() has no C++ translation",
    "grad * (1.0 if negate else x)": "'1.0 if negate else x': a condition on a scalar, choosing between two Tensors "
                                     "or two numbers",
    "grad // 2": "'grad // 2': C++ autograd takes + - * / and **",
    "grad * x.sum(0, keepdim=True)": "'x.sum(0, keepdim=True)': C++ autograd takes a sum or mean over the last "
                                     "dimension with keepdim=True",
    "torch.cat((grad, x), -1)": "torch.cat((grad, x), -1): C++ autograd takes a list of Tensors and a dimension",
    "torch.cat([grad, alpha], -1)": "torch.cat([grad, alpha], -1) of a number",
    "grad * (x * x).mean(-1)": "'(x * x).mean(-1)': C++ autograd takes a sum or mean over the last dimension "
                               "with keepdim=True",
}


@pytest.mark.parametrize(("python", "cpp"), TRANSLATED.items())
def test_formula_translations(tmp_path, python, cpp):
    import ast

    from kopgen.lang.cpp_formula import Formula

    op = _bias_leaky(tmp_path)
    assert Formula(op, {op.name: op}, ()).emit(ast.parse(python, mode="eval").body).code == cpp


@pytest.mark.parametrize(("python", "reason"), REFUSED.items())
def test_formulas_outside_the_subset_keep_python(tmp_path, python, reason):
    op = _bias_leaky(tmp_path)
    gradient = dataclasses.replace(op.backward.gradients[0], formula=dataclasses.replace(
        op.backward.gradients[0].formula, python=python))
    op = dataclasses.replace(op, backward=dataclasses.replace(op.backward, gradients=(gradient,)))
    assert python_reason(op, [op]) == f"x's formula: {reason}"


def _bias_leaky(tmp_path):
    from kopgen.pipeline import check_spec

    spec = tmp_path / "kopgen.yaml"
    spec.write_text(SPEC)
    return check_spec(spec)[0].ops[0]
