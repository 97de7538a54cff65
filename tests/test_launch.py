"""_support.launch, the cached launch of compiled Triton kernels: what runs on CPU here (the key,
the fallbacks to Triton's own path). The direct launchers themselves run on the GPU machine."""

from __future__ import annotations

import ast
import importlib.util
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import ROOT

triton = pytest.importorskip("triton")
from triton.runtime.interpreter import InterpretedFunction


def _support():
    """The golden muladd package's _support.py, loaded on its own (it imports nothing of the package)."""
    spec = importlib.util.spec_from_file_location("_launch_support", ROOT / "tests/golden/muladd/kbook/_support.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@triton.jit
def _kernel(x_ptr, n, BLOCK: triton.language.constexpr):
    pass


class _Recording:
    """A kernel that records Triton's own path: `kernel[grid](*args, **constexprs)`."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **constexprs: self.calls.append((grid, args, constexprs))


def _key(support, *args, **constexprs):
    """The key of a call on CUDA tensors, faking the device of the CPU tensors here."""
    real = torch.Tensor.get_device
    torch.Tensor.get_device = lambda tensor: 0
    try:
        return support._launch_key(_kernel, args, constexprs)
    finally:
        torch.Tensor.get_device = real


def test_key_is_none_where_triton_keeps_its_path():
    support = _support()
    x = torch.zeros(8)
    interpreted = InterpretedFunction(_kernel.fn)
    assert support._launch_key(interpreted, (x, 8), {"BLOCK": 8}) is None  # the interpreter
    assert support._launch_key(_kernel, (x, 8), {"BLOCK": 8}) is None  # a CPU tensor
    assert support._launch_key(_Recording(), (x, 8), {"BLOCK": 8}) is None  # wrap_triton and the like
    assert _key(support, x, (1, 2), BLOCK=8) is None  # an argument Triton specialises in its own way
    # Ints beyond 32 bits (i64, u64: tensors of 2**31 elements and more).
    assert _key(support, x, 2**31, BLOCK=8) is None and _key(support, x, -(2**31) - 1, BLOCK=8) is None
    assert _key(support, x, 2**31 - 1, BLOCK=8) is not None


def test_key_follows_what_triton_specialises():
    support = _support()
    x = torch.zeros(64)
    assert _key(support, x, 32, BLOCK=8) == _key(support, x, 48, BLOCK=8)
    different = [
        _key(support, x[1:], 32, BLOCK=8),  # 4 bytes off a 16-byte boundary
        _key(support, x.double(), 32, BLOCK=8),
        _key(support, x, 33, BLOCK=8),  # not divisible by 16
        _key(support, x, 1, BLOCK=8),  # Triton makes 1 a constant
        _key(support, x, 0, x, BLOCK=8),  # another tensor, so another signature
        _key(support, x, 32.0, BLOCK=8),
        _key(support, x, 32, BLOCK=16),
    ]
    keys = [_key(support, x, 32, BLOCK=8), *different]
    assert len(set(keys)) == len(keys)


def test_interpreted_kernels_take_tritons_path(monkeypatch):
    support = _support()
    kernel = _Recording()
    x = torch.zeros(8)
    support.launch(kernel, (1,), x, 8, BLOCK=8)
    assert kernel.calls == [((1,), (x, 8), {"BLOCK": 8})]
    assert support._LAUNCHERS == {}


def test_a_failing_direct_launcher_gives_way_to_tritons_path(monkeypatch):
    support = _support()
    kernel = _Recording()
    monkeypatch.setattr(support, "_launch_key", lambda kernel, args, constexprs: (kernel, 0))
    monkeypatch.setattr(support, "_current_gpu", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)

    def broken(grid, stream, args):
        raise TypeError("a launcher of another torch")

    support._LAUNCHERS[(kernel, 0)] = broken
    support.launch(kernel, (2,), 5, BLOCK=8)
    support.launch(kernel, (2,), 5, BLOCK=8)
    assert len(kernel.calls) == 2 and support._LAUNCHERS[(kernel, 0)] is None


def test_static_launcher_passes_the_kernels_parameters(monkeypatch):
    """The static launcher hands torch's launcher the kept arguments (not the constants) and the
    scratch pointers, through the GPU launch stubbed here."""
    support = _support()
    launched = []
    monkeypatch.setattr(torch._C, "_StaticCudaLauncher", SimpleNamespace(_launch_kernel=lambda *a: launched.append(a)),
                        raising=False)  # fmt: skip
    src = _src({"x_ptr": "*fp32", "out_ptr": "*fp32", "one": "i32", "n": "i32", "BLOCK": "constexpr"}, {(2,): 1})
    meta = SimpleNamespace(num_warps=4, shared=0, num_ctas=1, global_scratch_size=0)
    compiled = SimpleNamespace(src=src, metadata=meta, function=7, _init_handles=lambda: None)
    launch = support._static_launcher(compiled, 4)
    x, out = torch.zeros(8), torch.zeros(8)
    launch((3,), 0, (x, out, 1, 8))
    assert launched == [(7, 3, 1, 1, 4, 0, "OOiO", (x, out, 8, None), 0)]
    # One kept parameter: no static launcher (the compiled kernel's own run launches it).
    lone = SimpleNamespace(src=_src({"x_ptr": "*fp32", "n": "i32"}, {(1,): 1}), metadata=meta)
    assert support._static_launcher(lone, 2) is None


def test_unknown_compiled_kernels_get_no_direct_launcher():
    support = _support()
    assert support._direct_launcher(object(), 2, {"BLOCK": 8}) is None


def _src(signature, constants):
    return SimpleNamespace(fn=SimpleNamespace(arg_names=list(signature)), signature=signature, constants=constants)


def test_kernel_parameters_skip_constants():
    support = _support()
    # Triton 3.3 and later: constexprs typed "constexpr", an int equal to 1 specialised to a constant.
    src = _src({"x_ptr": "*fp32", "out_ptr": "*fp32", "c": "fp32", "one": "constexpr", "n": "i32",
                "BLOCK": "constexpr"}, {(3,): 1, (5,): 1024})
    assert support._kernel_parameters(src, 5) == ([0, 1, 2, 4], "OOfi")
    # A runtime parameter passed by keyword, or a type the static launcher does not take: none.
    assert support._kernel_parameters(src, 3)[0] is None
    flag = _src({"x_ptr": "*fp32", "flag": "i1"}, {})
    assert support._kernel_parameters(flag, 2)[0] is None


def test_generated_launchers_call_no_constexpr_function_per_call():
    """triton.cdiv and triton.next_power_of_2 are constexpr_functions: microseconds each in host code
    (docs/field-notes.md). The launchers kopgen writes compute grids and blocks in plain Python."""
    slow = {"cdiv", "next_power_of_2"}
    for path in sorted(ROOT.glob("tests/golden/*/*/kernels/*.py")):
        module = ast.parse(path.read_text())
        for node in ast.walk(module):
            if isinstance(node, ast.Attribute) and node.attr in slow:
                pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
