"""A backward formula that calls a fused backward op of its namespace (a `kernel: custom` op of its own
returning several gradients): setup_context saves exactly what the formulas read, and backward runs
the fused op once, however many gradients read it."""

from __future__ import annotations

import pytest

from kopgen.pipeline import generate, load_spec_text
from kopgen.plan import plan
from kopgen.render import render

from .conftest import installed_suite_passes

# rms_norm and its fused backward, both custom kernels on the Python route custom_op.
RMS_NORM = """\
kopgen: 1
package: kfnorm
description: RMS norm whose backward is a second, fused custom op
defaults:
  registration: custom_op
  backends: {cpu: triton, cuda: triton}
  dtypes: [float32, float64]
ops:
  - schema: "rms_norm(Tensor input, Tensor weight, float epsilon) -> Tensor"
    kernel: custom
    reference: "input * torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + epsilon) * weight"
    fake: {shape: input.shape}
    tests:
      args:
        weight: {shape: "(input.shape[-1],)"}
        epsilon: {value: 1.0e-5}
    backward:
      input: "rms_norm_backward(grad, input, weight, epsilon)[0]"
      weight: "rms_norm_backward(grad, input, weight, epsilon)[1]"
  - schema: "rms_norm_backward(Tensor grad, Tensor input, Tensor weight, float epsilon) -> (Tensor, Tensor)"
    doc: The gradients of rms_norm's input and weight, in one call.
    kernel: custom
    reference: "(torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + epsilon) * (grad * weight - input * \
torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + epsilon) ** 2 * (grad * weight * input).mean(-1, keepdim=True)), \
(grad * input * torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + epsilon)).reshape(-1, input.size(-1)).sum(0))"
    fake: [{shape: input.shape}, {shape: weight.shape}]
    tests:
      args:
        grad: {shape: input.shape}
        weight: {shape: "(input.shape[-1],)"}
        epsilon: {value: 1.0e-5}
"""

BACKWARD = '''\
def _rms_norm_backward_(ctx, grad):
    input, weight = ctx.saved_tensors
    epsilon = ctx.epsilon
    grad_input = None
    grad_weight = None
    # One rms_norm_backward call serves the gradients of input and weight: it runs once, if one is wanted.
    if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
        rms_norm_grads = _support.kernel_or_op(
            _rms_norm_backward_kernels,
            torch.ops.kfnorm.rms_norm_backward.default,
            grad,
            input,
            weight,
            epsilon,
        )
    # Each gradient is summed back to its input's shape, where the input was broadcast.
    if ctx.needs_input_grad[0]:
        grad_input = _support.sum_to_shape(rms_norm_grads[0], ctx.input_shape)
    if ctx.needs_input_grad[1]:
        grad_weight = _support.sum_to_shape(rms_norm_grads[1], ctx.weight_shape)
    return grad_input, grad_weight, None
'''

SETUP_CONTEXT = '''\
def _rms_norm_setup_context(ctx, inputs, output):
    input, weight, epsilon = inputs
    ctx.input_shape = input.shape
    ctx.weight_shape = weight.shape
    ctx.epsilon = epsilon
    # Save only what the formulas read, and only when a gradient that reads it is wanted.
    ctx.save_for_backward(
        input if ctx.needs_input_grad[0] or ctx.needs_input_grad[1] else None,
        weight if ctx.needs_input_grad[0] or ctx.needs_input_grad[1] else None,
    )
'''


def registration(spec: str) -> str:
    package = load_spec_text(spec, "kopgen.yaml")
    return next(render(file, package) for file in plan(package) if file.path.endswith("_registration.py"))


def test_the_fused_backward_runs_once_into_a_local_named_after_it():
    text = registration(RMS_NORM)
    assert BACKWARD in text
    assert text.count("torch.ops.kfnorm.rms_norm_backward.default,") == 1


def test_setup_context_saves_exactly_what_the_formulas_read():
    """input and weight (each read by both gradients, through the fused call), epsilon as a scalar; not grad,
    not the output, no metadata beyond the shapes that sum gradients back."""
    backward = load_spec_text(RMS_NORM, "kopgen.yaml").ops[0].backward
    assert [(s.name, s.needed_by) for s in backward.saved_tensors] == [("input", (0, 1)), ("weight", (0, 1))]
    assert backward.scalars == ("epsilon",)
    assert backward.saved_metadata == ()
    assert SETUP_CONTEXT in registration(RMS_NORM)


def test_formulas_that_share_no_call_are_printed_as_before():
    """One formula calls the fused op, the other does not: nothing to share, the call stays in its formula."""
    spec = RMS_NORM.replace('weight: "rms_norm_backward(grad, input, weight, epsilon)[1]"',
                            'weight: "(grad * input).reshape(-1, input.size(-1)).sum(0)"')
    text = registration(spec)
    assert "rms_norm_grads" not in text
    assert ("        grad_input = _support.sum_to_shape(\n"
            "            _support.kernel_or_op(\n"
            "                _rms_norm_backward_kernels,\n"
            "                torch.ops.kfnorm.rms_norm_backward.default,\n") in text
    assert "            )[0],\n            ctx.input_shape,\n" in text


def test_an_argument_named_like_the_local_keeps_its_name():
    forward, fused = RMS_NORM.split('  - schema: "rms_norm_backward')
    spec = forward.replace("epsilon", "rms_norm_grads") + '  - schema: "rms_norm_backward' + fused
    text = registration(spec)
    assert "        rms_norm_grads_ = _support.kernel_or_op(\n" in text
    assert "grad_input = _support.sum_to_shape(rms_norm_grads_[0], ctx.input_shape)" in text


# What a user of the spec writes: the two kernels, here in plain PyTorch (the tests' own float64 math).
RMS_NORM_KERNEL = '''

def rms_norm_triton(input: Tensor, weight: Tensor, epsilon: float) -> Tensor:
    """input / sqrt(mean(input^2) + epsilon) * weight, over the last dimension."""
    # Dense, as `fake` says, whatever the inputs' strides.
    return (input * torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + epsilon) * weight).contiguous()
'''

RMS_NORM_BACKWARD_KERNEL = '''

def rms_norm_backward_triton(grad: Tensor, input: Tensor, weight: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Both gradients of rms_norm in one pass over the rows."""
    rstd = torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + epsilon)
    grad_input = rstd * (grad * weight - input * rstd**2 * (grad * weight * input).mean(-1, keepdim=True))
    grad_weight = (grad * input * rstd).reshape(-1, input.shape[-1]).sum(0)
    return grad_input.contiguous(), grad_weight
'''

# A test of the user's own beside the generated suite: the fused op runs once per backward.
COUNT_CALLS = '''\
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import kfnorm


class CountCalls(TorchDispatchMode):
    def __init__(self, op):
        super().__init__()
        self.op, self.count = op, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func is self.op
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("wanted", [(True, True), (True, False), (False, True)], ids=["both", "input", "weight"])
def test_the_fused_backward_runs_once_per_backward(wanted):
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=wanted[0])
    w = torch.randn(8, dtype=torch.float64, requires_grad=wanted[1])
    y = kfnorm.rms_norm(x, w, 1e-5)
    with CountCalls(torch.ops.kfnorm.rms_norm_backward.default) as calls:
        y.sum().backward()
    assert calls.count == 1
    x2, w2 = x.detach().requires_grad_(wanted[0]), w.detach().requires_grad_(wanted[1])
    (x2 * torch.rsqrt(x2.pow(2).mean(-1, keepdim=True) + 1e-5) * w2).sum().backward()
    for ours, want in ((x, x2), (w, w2)):
        assert (ours.grad is None) == (want.grad is None)
        if want.grad is not None:
            torch.testing.assert_close(ours.grad, want.grad)


def test_a_plain_eager_backward_runs_the_kernel_without_the_custom_ops_layers():
    import sys

    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    y = kfnorm.rms_norm(x, w, 1e-5)
    calls = []
    sys.setprofile(lambda frame, event, arg: calls.append(frame.f_code) if event == "call" else None)
    try:
        y.sum().backward()
    finally:
        sys.setprofile(None)
    assert any(code.co_name == "rms_norm_backward_triton" for code in calls)
    assert not [code for code in calls if "custom_ops" in code.co_filename]
    assert x.grad is not None and w.grad is not None
'''


def write_launcher(path, launcher: str) -> None:
    """The user's kernel file with the skeleton's launcher (its `raise` and all) replaced by `launcher`."""
    text = path.read_text()
    name = launcher.split("def ", 1)[1].split("(", 1)[0]
    path.write_text(text[: text.index(f"def {name}(")].rstrip() + "\n" + launcher)


@pytest.mark.slow
def test_the_generated_suite_passes_and_the_fused_backward_runs_once(tmp_path):
    (tmp_path / "kopgen.yaml").write_text(RMS_NORM)
    repo = generate(tmp_path / "kopgen.yaml", tmp_path / "repo")
    write_launcher(repo / "kfnorm/kernels/rms_norm.py", RMS_NORM_KERNEL)
    write_launcher(repo / "kfnorm/kernels/rms_norm_backward.py", RMS_NORM_BACKWARD_KERNEL)
    (repo / "tests/test_fused_calls.py").write_text(COUNT_CALLS)
    result = installed_suite_passes(repo, tmp_path / "site", "-rA", at_least=30)
    assert "PASSED tests/test_rms_norm.py::TestRmsNorm::test_gradcheck" in result.stdout
    for wanted in ("both", "input", "weight"):
        assert f"PASSED tests/test_fused_calls.py::test_the_fused_backward_runs_once_per_backward[{wanted}]" in result.stdout
    assert ("PASSED tests/test_fused_calls.py::test_a_plain_eager_backward_runs_the_kernel_without_the_custom_ops_layers"
            in result.stdout)
