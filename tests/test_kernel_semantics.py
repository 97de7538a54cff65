"""Generated kernels compute what torch computes, in cases found by writing specs as a user would.

minimum, maximum and relu let a NaN win on every backend, as torch does. Triton's tl.maximum and
tl.minimum drop a NaN unless told (a correct `minimum(maximum(x, -limit), limit)` failed its generated
suite's NaN test), and std::max(0, nan) is 0 (the first operand wins): `maximum(0.0, x)` dropped it on the
compiled routes. And a python kernel that swaps two arguments copies them before it writes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kopgen import generate

from .conftest import pip_install

OPS = """\
ops:
  - schema: "rowmin_clamp(Tensor x, float limit=0.25) -> Tensor"
    reduce: {op: min, expr: "minimum(maximum(x, -limit), limit)"}
  - schema: "crelu(Tensor x) -> Tensor"
    compute: "relu(minimum(6.0, maximum(0.0, x)))"
"""
CHECK = """\
import torch, knan
x = torch.tensor([[float("nan"), -1.0, 0.5, 7.0], [1.0, 2.0, 3.0, 4.0]])
for op in ("crelu", "rowmin_clamp"):
    got, want = getattr(knan, op)(x), getattr(knan.reference, op)(x)
    assert torch.equal(got.isnan(), want.isnan()) and torch.allclose(got.nan_to_num(), want.nan_to_num()), (op, got)
"""


def run_check(env: dict) -> None:
    result = subprocess.run([sys.executable, "-c", CHECK], env={**os.environ, **env}, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]


def test_triton_kernels_let_a_nan_win(tmp_path):
    spec = tmp_path / "kopgen.yaml"
    spec.write_text("kopgen: 1\npackage: knan\ndefaults: {backends: {cpu: triton, cuda: triton}}\n" + OPS)
    repo = generate(spec, tmp_path / "repo")
    run_check({"PYTHONPATH": str(repo), "TRITON_INTERPRET": "1"})


@pytest.mark.slow
def test_cpp_kernels_let_a_nan_win_in_either_operand(tmp_path):
    spec = tmp_path / "kopgen.yaml"
    spec.write_text("kopgen: 1\npackage: knan\ndefaults: {registration: torch_library, backends: {cpu: cpp}}\n" + OPS)
    repo = generate(spec, tmp_path / "repo")
    pip_install(repo, tmp_path / "site")
    run_check({"PYTHONPATH": str(tmp_path / "site")})


def test_cuda_kernels_take_the_min_and_max_that_let_a_nan_win(tmp_path):
    """No GPU here: the CUDA functors call cuda/pointwise.cuh's nan_min and nan_max (a NaN in either operand wins)."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text("kopgen: 1\npackage: knan\ndefaults: {registration: torch_library, backends: {cpu: cpp, cuda: cuda}}\n"
                    + OPS)
    kernels = (generate(spec, tmp_path / "repo") / "knan/csrc/cuda/kernels.cu").read_text()
    # relu keeps std::max(x, 0): its first operand, x, wins where it is NaN
    assert "{std::max(nan_min(acc_t(6.0), nan_max(acc_t(0.0), x)), acc_t(0))}" in kernels
    assert "nan_min(nan_max(x, -limit), limit)" in kernels


def test_a_python_kernel_that_swaps_two_arguments_copies_before_it_writes(tmp_path):
    """`compute: {a: b, b: a}`: the reference returned b and a themselves (float32 upcasts to itself), so the
    python kernel wrote a, then copied the new a into b: both ended as b."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(
        "kopgen: 1\npackage: kswap\ndefaults: {registration: library, backends: {cpu: python}}\nops:\n"
        '  - schema: "swap_(Tensor(a!) a, Tensor(b!) b) -> ()"\n    compute: {a: "b", b: "a"}\n'
        '  - schema: "swap_k_(Tensor(a!) a, Tensor(b!) b) -> ()"\n    kernel: custom\n'
        '    reference: {a: "b", b: "a"}\n'
    )
    repo = generate(spec, tmp_path / "repo")
    check = (
        "import torch, kswap\n"
        "for op in (kswap.swap_, kswap.swap_k_):\n"
        "    a, b = torch.ones(3), torch.zeros(3)\n"
        "    op(a, b)\n"
        "    assert a.eq(0).all() and b.eq(1).all(), (op, a, b)\n"
    )
    result = subprocess.run([sys.executable, "-c", check], env={**os.environ, "PYTHONPATH": str(repo)},
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]


def test_triton_powers_of_negative_bases_are_torchs(tmp_path):
    """Triton has no pow: x ** k was exp2(k * log2(x)), NaN for every negative x (the generated suite draws
    positive inputs for powers, so it passed). Now an integer exponent keeps the base's sign where odd, a
    fractional one gives NaN as torch does, and x ** 0 is 1."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(
        "kopgen: 1\npackage: kpow\ndefaults: {backends: {cpu: triton, cuda: triton}}\nops:\n"
        '  - schema: "pw(Tensor x, int k=2) -> Tensor"\n    compute: "x ** k"\n'
        '  - schema: "pwt(Tensor x, Tensor y) -> Tensor"\n    compute: "x ** y"\n'
        '  - schema: "p11(Tensor x) -> Tensor"\n    compute: "x ** 11 + x ** 10 + (x * x) ** 0.5"\n'
    )
    repo = generate(spec, tmp_path / "repo")
    check = (
        "import torch, kpow\n"
        "x = torch.tensor([-2.0, -1.5, -0.0, 0.0, 0.5, 2.0, float('nan')])\n"
        "def same(got, want):\n"
        "    assert torch.equal(got.isnan(), want.isnan()), (got, want)\n"
        "    assert torch.allclose(got.nan_to_num(), want.nan_to_num(), rtol=1e-5), (got, want)\n"
        "for k in (0, 1, 2, 3, -3):\n"
        "    same(kpow.pw(x, k), kpow.reference.pw(x, k))\n"
        "y = torch.tensor([3.0, 2.5, -1.0, 0.0, -2.0, 0.5, 0.0])\n"
        "same(kpow.pwt(x, y), kpow.reference.pwt(x, y))\n"
        "same(kpow.p11(x), kpow.reference.p11(x))\n"
    )
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", check],
                            env={**os.environ, "PYTHONPATH": str(repo), "TRITON_INTERPRET": "1"},
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
