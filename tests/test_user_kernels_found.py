"""Found by bringing hand-written kernels through kopgen as a new user (exploratory runs, 2026-12-06): a
differentiable op taking a Tensor[], fp8 outputs in the generated suite, the empty sample of a kernel whose
Tensors relate by other dimensions than rows, a stale build of another route beside a stable-ABI one, a
not-differentiable op with keyword-only arguments, and the suite of an op of CUDA only on a machine without one."""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys

import pytest

from .conftest import run_suite
from .test_end_to_end import installed  # noqa: F401  (the fixture)
from .test_normalize import _generated, _passes

TENSOR_LIST = """\
kopgen: 1
package: klist
ops:
  - schema: "add_all(Tensor base, Tensor[] xs) -> Tensor"
    kernel: custom
    backends: {cpu: python}
    reference: "base + torch.stack(xs).sum(0)"
    fake: {shape: base.shape}
    backward:
      base: "grad"
"""

TENSOR_LIST_CHECK = """
import pytest, torch
import klist

base = torch.randn(3, 4, requires_grad=True)
xs = [torch.randn(3, 4), torch.randn(3, 4)]
klist.add_all(base, xs).sum().backward()
torch.testing.assert_close(base.grad, torch.ones(3, 4))
# A tensor of the list that wants a gradient: an error, never a silent None
xs[1].requires_grad_()
with pytest.raises(RuntimeError, match="klist::add_all: no gradient for xs: a Tensor list takes no backward formula"):
    klist.add_all(base, xs).sum().backward()
print("ok")
"""


def test_a_differentiable_op_taking_a_tensor_list_returns_its_gradients_as_a_list(tmp_path):
    """torch's autograd of an op wants backward's value for a Tensor[] as a list of as many; a None there
    failed every backward (the structure of the inputs)."""
    _passes(_generated(tmp_path, TENSOR_LIST), TENSOR_LIST_CHECK)


KERNELS = """\
kopgen: 1
package: kfound
ops:
  - schema: "quant(Tensor x) -> (Tensor, Tensor)"
    kernel: custom
    backends: {cpu: python}
    dtypes: [float32, bfloat16]
    reference: "(x.to(torch.float8_e4m3fn), x.abs().amax(-1))"
    fake:
      - {shape: x.shape, dtype: torch.float8_e4m3fn}
      - {shape: "x.shape[:-1]", dtype: torch.float32}
  - schema: "transpose_out(Tensor(a!) out, Tensor x) -> ()"
    kernel: custom
    backends: {cpu: python}
    reference: {out: "x.transpose(0, 1)"}
    tests:
      shapes: [{out: [6, 4], x: [4, 6]}]
"""


def test_fp8_outputs_and_the_empty_sample_of_related_shapes_pass_the_generated_suite(tmp_path):
    """fp8 outputs: opcheck compares them bitwise (half dtypes' tolerances refused there), and the
    not-differentiable check sums them as float32. The empty sample keeps the transpose's relation: out
    [0, 4] from x [4, 0], not x [0, 6]."""
    repo = _generated(tmp_path, KERNELS)
    assert '"empty": lambda make: (make(0, 4), make(4, 0)),' in (repo / "tests" / "test_transpose_out.py").read_text()
    result = run_suite(repo, {**os.environ, "PYTHONPATH": str(repo)}, "-k", "opcheck or backward_raises or empty")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " failed" not in result.stdout


@pytest.mark.slow
def test_a_stable_abi_package_refuses_a_torch_library_build_beside_it(installed, tmp_path):  # noqa: F811
    """Python loads _C.cpython-*.so before _C.abi3.so: a build left from the package's torch_library route
    ran its old kernels, and the suite passed against them."""
    _, site, env = installed("fused_stable.yaml")
    copy = tmp_path / "site"
    shutil.copytree(site / "kstable", copy / "kstable")
    (abi3,) = (copy / "kstable").glob("_C.abi3.*")
    # the abi3 build under this Python's own suffix loads as well (the same PyInit__C)
    shutil.copy(abi3, abi3.with_name("_C" + importlib.machinery.EXTENSION_SUFFIXES[0]))
    result = subprocess.run([sys.executable, "-P", "-c", "import kstable"], env={**env, "PYTHONPATH": str(copy)},
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode != 0
    assert "holds a build of the torch_library route (_C.cpython-*)" in result.stderr, result.stderr[-2000:]


KEYWORD_ONLY = """\
kopgen: 1
package: kkw
defaults:
  registration: ROUTE
  backends: {cpu: python, cuda: triton}
ops:
  - schema: "scale(Tensor x, *, float s=2.0) -> Tensor"
    compute: "x * s"
"""

KEYWORD_ONLY_CHECK = """
import pytest, torch
import kkw

y = kkw.scale(torch.randn(3, requires_grad=True), s=3.0)
with pytest.raises(RuntimeError, match="kkw::scale is not differentiable: its spec has no backward formulas"):
    y.sum().backward()
print("ok")
"""


@pytest.mark.parametrize("route", ["custom_op", "library", "triton_op"])
def test_an_op_with_keyword_only_arguments_and_no_backward_runs_with_grad(tmp_path, route):
    """torch passes keyword_only_inputs to setup_context where the schema has keyword-only arguments: the
    not-differentiable op's setup_context took none, and every call with an input needing grad raised a
    TypeError before backward's own error."""
    _passes(_generated(tmp_path, KEYWORD_ONLY.replace("ROUTE", route)), KEYWORD_ONLY_CHECK)


CUDA_ONLY = """\
kopgen: 1
package: kconly
defaults:
  backends: {cuda: triton}
ops:
  - schema: "twice(Tensor x) -> Tensor"
    compute: "x * 2"
"""


def test_the_suite_of_an_op_of_cuda_only_skips_on_a_machine_without_one(tmp_path):
    """A check of no device (the Python API, backward's error) took the op's first device, cuda, and failed
    ("Torch not compiled with CUDA enabled") where it should skip, as every CUDA test does."""
    repo = _generated(tmp_path, CUDA_ONLY)
    result = run_suite(repo, {**os.environ, "PYTHONPATH": str(repo), "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert " skipped" in result.stdout and " failed" not in result.stdout
