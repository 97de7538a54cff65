"""Found bringing hand-written Triton kernels through kopgen as their authors write them (2026-12-06): kernels
under @triton.autotune and @triton.heuristics that call tl.sum and @triton.jit helpers, run on CPU tensors in
Triton's interpreter, and kernels kept in a module of the package that the op's kernels module imports."""

from __future__ import annotations

import os
import re

from .conftest import EXAMPLES, run_suite
from .test_normalize import _generated, _passes

PAIRSUM = (EXAMPLES / "custom.yaml").read_text(encoding="utf-8")

# pairsum's skeleton made into the kernel an author writes: tuned, with heuristics, a helper of its own and
# tl.sum; the skeleton's `pairsum_kernel_interpreted = ...` line stays as kopgen wrote it.
KERNEL = '''
@triton.jit
def _pair_sum(x_ptr, pairs, mask, PAIR: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    values = tl.load(x_ptr + pairs[:, None] + tl.arange(0, PAIR)[None, :], mask=mask[:, None])
    return tl.sum(values.to(COMPUTE_DTYPE), axis=1)


@triton.autotune(configs=[triton.Config({"PAIR": 2}, num_warps=2)], key=["n_elements"])
@triton.heuristics({"EVEN": lambda args: args["n_elements"] % args["BLOCK_SIZE"] == 0})
@triton.jit
def pairsum_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr, COMPUTE_DTYPE: tl.constexpr,
                   PAIR: tl.constexpr, EVEN: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    out = _pair_sum(x_ptr, PAIR * offsets, mask, PAIR, COMPUTE_DTYPE)
    tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)
'''

CHECK = """
import torch
import kcustom

x = torch.randn(5, 8)
torch.testing.assert_close(kcustom.pairsum(x), x.unflatten(-1, (-1, 2)).sum(-1))
print("ok")
"""


def _write_kernel(path, where=None) -> None:
    """KERNEL in place of the skeleton's kernel (in `where`, a module the skeleton imports, where given)."""
    text = re.sub(r"    raise NotImplementedError\(\n.*\n    \)\n", "", path.read_text())
    text, found = re.subn(r"\n@triton\.jit\ndef pairsum_kernel\(.*?\n\n\n", "\n" if where else KERNEL + "\n\n", text,
                          flags=re.DOTALL)
    assert found == 1, text
    if where:
        where.write_text("import triton\nimport triton.language as tl\n\n" + KERNEL)
        text = text.replace("from .. import _support\n", f"from .. import _support\nfrom .{where.stem} import pairsum_kernel\n")
    path.write_text(text)


def test_an_autotuned_kernel_calling_jit_functions_runs_in_the_interpreter(tmp_path):
    """The skeleton's InterpretedFunction(kernel.fn) took an autotuned kernel's Heuristics for its function
    ("JITFunction.__call__() got multiple values for argument 'self'"), and in-process the interpreter
    cannot call @triton.jit functions (tl.sum, the author's helpers): "Cannot call @triton.jit'd outside of
    the scope of a kernel". _support.interpreted runs the first config, the heuristics and the callees."""
    repo = _generated(tmp_path, PAIRSUM)
    _write_kernel(repo / "kcustom/kernels/pairsum.py")
    _passes(repo, CHECK)


def test_a_triton_ops_kernels_may_live_in_a_module_its_kernels_module_imports(tmp_path):
    """TracedIntoTriton required every traced kernel to be written in kernels/<op>.py itself: kernels kept in
    a module of their own (`from ._shared import ...`, as kernel repos share them) failed the trace test."""
    repo = _generated(tmp_path, PAIRSUM.replace("registration: custom_op", "registration: triton_op"))
    _write_kernel(repo / "kcustom/kernels/pairsum.py", where=repo / "kcustom/kernels/_shared.py")
    result = run_suite(repo, {**os.environ, "PYTHONPATH": str(repo)}, "-k", "traces or matches_reference", "-rA")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert "PASSED tests/test_pairsum.py::TestPairsum::test_compile_traces_into_its_triton_kernels" in result.stdout
