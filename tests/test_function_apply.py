"""The typed API applies its autograd.Functions through `_support.function_apply`: torch's C apply without
autograd.Function.apply's Python layer, but for that layer's unwrapping of tensors that outlived the
functorch transform that made them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

SUPPORT = Path(__file__).parent / "golden" / "rows" / "krows" / "_support.py"


@pytest.fixture(scope="module")
def support():
    spec = importlib.util.spec_from_file_location("krows_support_apply", SUPPORT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class MulAdd(torch.autograd.Function):
    """a * b + c; its forward reads the inputs' storage, as a Python kernel's `written_to` does (which a
    functorch wrapper does not have)."""

    @staticmethod
    def forward(ctx, a, b, c):
        assert a.untyped_storage().data_ptr() != 0 and b.untyped_storage().data_ptr() != 0
        ctx.save_for_backward(a, b)
        return a * b + c

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * b, grad * a, None


def left_by_a_transform(x: torch.Tensor) -> torch.Tensor:
    """A copy of x made inside torch.func.grad and kept after it: a dead functorch wrapper."""
    kept = []

    def f(t):
        kept.append(t * 1)
        return t.sum()

    torch.func.grad(f)(x.clone())
    assert torch._C._functorch.is_functorch_wrapped_tensor(kept[0])
    return kept[0]


def test_the_same_values_and_gradients_as_apply(support):
    a, b = torch.rand(3, 4, requires_grad=True), torch.rand(4, requires_grad=True)
    got = support.function_apply(MulAdd)(a, b, 0.5)
    want = MulAdd.apply(a, b, 0.5)
    assert got.grad_fn is not None and type(got.grad_fn) is type(want.grad_fn)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), (a, b)), torch.autograd.grad(want.sum(), (a, b)))


def test_a_tensor_left_by_a_transform_is_unwrapped(support):
    a, b = torch.rand(4), torch.rand(4, requires_grad=True)
    dead = left_by_a_transform(a)
    with pytest.raises(NotImplementedError):  # what the unwrapping saves: the C apply alone passes it on
        super(torch.autograd.Function, MulAdd).apply(dead, b, 0.5)
    got = support.function_apply(MulAdd)(dead, b, 0.5)
    torch.testing.assert_close(got, a * b + 0.5)
    (grad_b,) = torch.autograd.grad(got.sum(), (b,))
    torch.testing.assert_close(grad_b, a)
