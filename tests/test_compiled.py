"""The compiled routes: generated C++ and CUDA compile with warnings as errors, and every
function of the pointwise language computes what the PyTorch reference does.

The CUDA sources compile with the nvcc of this machine (object files only: nothing CUDA runs
here), so CI catches a broken CUDA template without a GPU. The examples' suites run in
test_end_to_end.py; docs/gpu.md has them on an H200.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from kopgen import generate

from .conftest import EXAMPLES, installed_suite_passes

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit)")

# Every function of the pointwise language, scalars of each kind, two outputs, an op
# that writes two of its arguments, ops over the halves of their input (`split`; one with a backward
# kernel, which writes the halves of its output), and row
# normalisations (four statistics of each reduction; one in place on two tensors; one whose backward
# kernel's statistics nest: the variance's mean reads the mean's; one whose backward kernel sums the
# gradients of w and b over the rows).
EVERYTHING = """\
kopgen: 1
package: kall
defaults:
  registration: stable_abi
  backends: {cpu: cpp, cuda: cuda}
  dtypes: [float32, float64]
ops:
  - schema: "mixed(Tensor x, float alpha=1.0, int steps=2, bool flag=True) -> Tensor"
    compute: "where(x > 0, sigmoid(x) * alpha, tanh(x) / steps) + (relu(x) if flag else abs(x)) + minimum(x, 0.5) + maximum(exp(-x * x), 0.1)"
    backward:
      x: non_differentiable
  - schema: "positive(Tensor x) -> Tensor"
    compute: "log(x) + log1p(x) + sqrt(x) + rsqrt(x) + x ** 1.5 + pow(x, 2) + erf(x) + floor(4 * x) + ceil(4 * x) + sin(x) + cos(x) + tan(x)"
  - schema: "pair(Tensor a, Tensor b) -> (Tensor, Tensor)"
    compute: ["a + b", "-a * b if not (a > b and b < 0) else a - b"]
  - schema: "swap_(Tensor(a!) x, Tensor(b!) y) -> ()"
    compute: {x: "y", y: "x"}
  - schema: "rowmax(Tensor x) -> Tensor"
    reduce: {op: max, expr: "x * x - 1"}
  - schema: "rowdot(Tensor a, Tensor b, float scale=1.0) -> Tensor"
    reduce: {op: mean, expr: "a * b * scale"}
  - schema: "rowmin(Tensor x) -> Tensor"
    reduce: {op: min}
  - schema: "rowsum(Tensor x) -> Tensor"
    reduce: {op: sum, expr: "exp(x)"}
  - schema: "affine(Tensor x, Tensor? w=None, Tensor? b=None) -> Tensor"
    compute: "(x * w if present(w) else x) + (b if present(b) and not present(w) else 0.0)"
  - schema: "rowweighted(Tensor x, Tensor? w) -> Tensor"
    reduce: {op: sum, expr: "x * w if present(w) else x"}
  - schema: "gated(Tensor x, float threshold=0.0) -> Tensor"
    split: {x: [gate, up]}
    compute: "silu(gate) * up + gelu_tanh(up) * gate + where(gate > threshold, gate, 0.0)"
  - schema: "fatrelu(Tensor x, float threshold=0.0) -> Tensor"
    split: {x: [gate, up]}
    compute: "where(gate > threshold, gate, 0.0) * up"
    backward:
      x: "torch.cat([torch.where(gate > threshold, grad * up, 0.0), torch.where(gate > threshold, grad * gate, 0.0)], -1)"
  - schema: "gated_out(Tensor x, Tensor(a!) out) -> ()"
    split: {x: [gate, up]}
    compute: {out: "silu(gate) * up"}
    tests:
      args:
        out: {shape: "x.shape[:-1] + (x.shape[-1] // 2,)"}
  - schema: "rownorm(Tensor x, Tensor? w=None, float eps=1e-5) -> Tensor"
    normalize:
      stats: {mu: "mean(x)", rstd: "rsqrt(mean((x - mu) * (x - mu)) + eps)", low: "min(x)", lse: "log(sum(exp(x - low))) + low"}
      compute: "(x - mu) * rstd * (w if present(w) else 1.0) + lse"
  - schema: "centered(Tensor x, float eps=1e-5) -> Tensor"
    normalize:
      stats: {mu: "mean(x)", rstd: "rsqrt(mean((x - mu) * (x - mu)) + eps)"}
      compute: "(x - mu) * rstd"
    backward:
      x: "torch.rsqrt(((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + eps) * (grad - grad.mean(-1, keepdim=True) - (x - x.mean(-1, keepdim=True)) * (grad * (x - x.mean(-1, keepdim=True))).mean(-1, keepdim=True) / (((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + eps))"
  - schema: "affine_norm(Tensor x, Tensor w, Tensor b, float eps=1e-5) -> Tensor"
    normalize:
      stats: {mu: "mean(x)", rstd: "rsqrt(mean((x - mu) * (x - mu)) + eps)"}
      compute: "(x - mu) * rstd * w + b"
    tests:
      shapes: [{x: [4, 10], w: [10], b: [10]}]
    backward:
      # rstd inside the second mean: the CUDA kernel takes it out (lang/cpp_norms.py), one pass fewer
      x: "torch.rsqrt(((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + eps) * (grad * w - (grad * w).mean(-1, keepdim=True) - (x - x.mean(-1, keepdim=True)) * torch.rsqrt(((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + eps) * (grad * w * (x - x.mean(-1, keepdim=True)) * torch.rsqrt(((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + eps)).mean(-1, keepdim=True))"
      w: "grad * (x - x.mean(-1, keepdim=True)) * torch.rsqrt(((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + eps)"
      b: "grad"
  - schema: "add_norm_(Tensor(a!) x, Tensor(b!) residual, float eps=1e-6) -> ()"
    normalize:
      stats: {rstd: "rsqrt(mean((x + residual) * (x + residual)) + eps)"}
      compute: {x: "(x + residual) * rstd", residual: "x + residual"}
    tests:
      shapes: [{x: [4, 10], residual: [4, 10]}]
"""


def nvcc_flags() -> list[str]:
    """How torch's CUDAExtension calls nvcc, plus every warning as an error."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    return [*COMMON_NVCC_FLAGS, "-std=c++17", "-O3", "-arch=sm_90", "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Werror"]


def torch_includes() -> list[str]:
    from torch.utils.cpp_extension import include_paths

    return [f"-I{path}" for path in include_paths()]


@pytest.fixture(scope="module")
def everything(tmp_path_factory) -> Path:
    spec = tmp_path_factory.mktemp("spec") / "kall.yaml"
    spec.write_text(EVERYTHING)
    return generate(spec, tmp_path_factory.mktemp("everything") / "repo")


def compile_cuda(source: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [NVCC, *nvcc_flags(), "-c", str(source), "-o", str(tmp_path / "kernels.o")],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@needs_nvcc
@pytest.mark.parametrize("example", ["fused", "fused_stable"])
def test_example_cuda_kernels_compile(tmp_path, example):
    repo = generate(EXAMPLES / f"{example}.yaml", tmp_path / "repo")
    (source,) = repo.glob("*/csrc/cuda/kernels.cu")
    compile_cuda(source, tmp_path)


@needs_nvcc
def test_cuda_kernels_of_every_function_compile(everything, tmp_path):
    compile_cuda(everything / "kall/csrc/cuda/kernels.cu", tmp_path)


# Elementwise ops whose CUDA kernels read broadcast, split and transposed inputs, in 16-bit and 32-bit types.
LAYOUT_KERNELS = """\
kopgen: 1
package: klayout
defaults:
  registration: torch_library
  backends: {cpu: cpp, cuda: cuda}
  dtypes: [bfloat16, float32]
ops:
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    compute: "a * b + c"
  - schema: "silu_and_mul(Tensor x) -> Tensor"
    split: {x: [gate, up]}
    compute: "silu(gate) * up"
"""


@needs_nvcc
def test_strided_and_tiled_kernels_write_16_byte_vectors_in_one_store(tmp_path):
    """Each output vector of strided_kernel and tiled_kernel is one 16-byte store in the PTX: NVVM split a vector
    of 16-bit elements written as a struct into 2-byte pairs (st.global.v2.u16), four stores where one does
    (docs/performance.md, 2026-12-03 fourth session)."""
    spec = tmp_path / "klayout.yaml"
    spec.write_text(LAYOUT_KERNELS)
    (source,) = generate(spec, tmp_path / "repo").glob("*/csrc/cuda/kernels.cu")
    ptx = tmp_path / "kernels.ptx"
    result = subprocess.run([NVCC, *nvcc_flags(), "-ptx", str(source), "-o", str(ptx)],
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    entries = ptx.read_text().split(".entry ")[1:]
    checked = 0
    for entry in entries:
        if not entry.startswith(("_ZN7klayout4cuda14strided_kernelILi", "_ZN7klayout4cuda12tiled_kernelILi")):
            continue
        if entry.split("ILi", 1)[1].startswith("1E"):
            continue  # one element a thread: scalar stores
        stores = [line.split()[0] for line in entry.splitlines() if line.strip().startswith("st.global")]
        assert stores and set(stores) == {"st.global.v4.b32"}, (entry.split("(", 1)[0], sorted(set(stores)))
        checked += 1
    assert checked >= 4  # strided and tiled, bfloat16 and float32


@needs_nvcc
def test_column_sums_move_partial_rows_in_16_byte_vectors(tmp_path):
    """A backward kernel's column sums: norms_kernel writes its partial rows in 16-byte stores and
    column_sums_kernel reads them in 16-byte loads, in the PTX of a bfloat16, float32 and float64 package. Before
    (4acb0cf), one 4-byte store a column (a warp's stores 32 bytes apart) and one 4-byte load a partial row
    took bfloat16 rms_norm's backward at hidden 8192 82.3 us against 68.3 on an H200 (docs/performance.md,
    2026-12-03 fifth session)."""
    spec = tmp_path / "kcols.yaml"
    spec.write_text(COLUMN_SUMS.replace("ROUTE", "torch_library"))
    (source,) = generate(spec, tmp_path / "repo").glob("*/csrc/cuda/kernels.cu")
    ptx = tmp_path / "kernels.ptx"
    result = subprocess.run([NVCC, *nvcc_flags(), "-ptx", str(source), "-o", str(ptx)],
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    summing, summed = 0, 0
    for entry in ptx.read_text().split(".entry ")[1:]:
        name = entry.split("(", 1)[0]
        lines = [line.split()[0] for line in entry.splitlines() if line.strip().startswith(("st.global", "ld.global"))]
        kernel = re.match(r"_ZN5kcols4cuda12norms_kernelILi(\d+)ELi(\d+)ELi(\d+)E", name)
        if kernel and kernel.group(1) != "1" and kernel.group(2) != "0" and kernel.group(3) != "0":
            stores = {op for op in lines if op.startswith("st.global")}
            scalar = "st.global.f64" if "IdE" in name else "st.global.f32"
            assert "st.global.v4.b32" in stores and scalar not in stores, (name, sorted(stores))
            summing += 1
        if re.match(r"_ZN5kcols4cuda18column_sums_kernelILi\d+ELi[24]E", name):
            loads = {op for op in lines if op.startswith("ld.global")}
            assert loads and all(op.endswith((".v4.f32", ".v2.f64")) for op in loads), (name, sorted(loads))
            summed += 1
    assert summing >= 6 and summed >= 6  # bfloat16, float32 and float64; one and two column sums


CPU_LOOPS = """\
kopgen: 1
package: kavx
defaults:
  registration: torch_library
  backends: {cpu: cpp}
  dtypes: [float32, bfloat16]
ops:
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    compute: "a * b + c"
  - schema: "rowsum(Tensor x) -> Tensor"
    reduce: {op: sum}
  - schema: "rowmax(Tensor x) -> Tensor"
    reduce: {op: max}
  - schema: "rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> Tensor"
    normalize:
      stats: {rstd: "rsqrt(mean(x * x) + eps)"}
      compute: "x * rstd * weight"
"""


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() != "x86_64" or shutil.which("g++") is None, reason="needs g++ for x86-64")
def test_cpu_loops_have_an_avx2_copy(tmp_path):
    """The elementwise loop, the row reductions and the row normalisations each run, where the CPU has AVX2, a copy
    compiled for it (with_avx2): in the assembly g++ writes with the generated setup.py's flags, every loop's
    instantiation of in_avx2 exists and some use 32-byte registers. The loops must inline into it: called instead,
    they keep the baseline build's SSE (the row reductions and norms loops did before 09521a8: bfloat16 row sums
    0.67-0.83x torch.sum against 0.91-1.21x, docs/performance.md)."""
    spec = tmp_path / "kavx.yaml"
    spec.write_text(CPU_LOOPS)
    repo = generate(spec, tmp_path / "repo")
    setup = (repo / "setup.py").read_text()
    listed = re.search(r"^CXX_FLAGS = \[(.*)\]$", setup, re.MULTILINE).group(1)
    flags = [flag.strip().strip('"') for flag in listed.split(",")]
    assembly = tmp_path / "ops.s"
    result = subprocess.run(
        ["g++", *flags, "-std=c++17", "-S", *torch_includes(), f"-I{sysconfig.get_paths()['include']}",
         str(repo / "kavx/csrc/ops.cpp"), "-o", str(assembly)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    bodies = dict(re.findall(r"^(_Z\S+):\n(.*?)\.cfi_endproc", assembly.read_text(), re.DOTALL | re.MULTILINE))
    for loop in ("run_contiguous", "rows_loop", "norms_loop"):
        copies = [name for name in bodies if "in_avx2" in name and loop in name]
        assert copies, f"no AVX2 copy of {loop}"
        assert any("%ymm" in bodies[name] for name in copies), f"{loop}'s AVX2 copies use no 32-byte vectors"


@needs_nvcc
@pytest.mark.parametrize("route", ["stable_abi", "torch_library"])
def test_host_code_compiles(tmp_path, route):
    """csrc/ops.cpp and cuda/ops.cpp (guard, stream, launches) built as torch builds them, -Wall -Werror."""
    spec = tmp_path / "kall.yaml"
    spec.write_text(EVERYTHING.replace("registration: stable_abi", f"registration: {route}"))
    repo = generate(spec, tmp_path / "repo")
    includes = [*torch_includes(), f"-I{sysconfig.get_paths()['include']}"]
    defines = ["-DUSE_CUDA"]
    if route == "stable_abi":
        defines.append("-DTORCH_TARGET_VERSION=0x020a000000000000")
    else:
        # A CPU build of torch ships c10/cuda without the header its CUDA build generates.
        stub = tmp_path / "stub/c10/cuda/impl/cuda_cmake_macros.h"
        stub.parent.mkdir(parents=True)
        stub.write_text("#pragma once\n")
        includes.append(f"-I{tmp_path / 'stub'}")
    for source in ["kall/csrc/ops.cpp", "kall/csrc/cuda/ops.cpp"]:
        result = subprocess.run(
            [NVCC, "-x", "c++", "-std=c++20", "-Xcompiler", "-Wall,-Werror", *defines, *includes,
             "-c", str(repo / source), "-o", str(tmp_path / "ops.o")],
            capture_output=True, text=True, check=False,
        )
        assert result.returncode == 0, source + "\n" + result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kernels", ["cpp", "triton"])
def test_every_function_matches_the_reference(tmp_path, kernels):
    """Every function, reduction and op shape, in C++ (built with -Werror) and in Triton (its
    CPU interpreter), passes its generated suite (torch.compile aside, which the examples run)."""
    spec = tmp_path / "kall.yaml"
    if kernels == "cpp":
        spec.write_text(EVERYTHING)
    else:
        spec.write_text(EVERYTHING.replace("stable_abi", "custom_op").replace("{cpu: cpp, cuda: cuda}", "{cpu: triton, cuda: triton}"))
    repo = generate(spec, tmp_path / "repo")
    installed_suite_passes(repo, tmp_path / "site", "-k", "not compile", at_least=100)


# -- kernel: custom on the compiled routes: kopgen's host functions and the user's skeletons


def write_csrc(package, root: Path) -> Path:
    """The package's csrc/ as kopgen writes it: its own files and the user's skeletons."""
    from kopgen.plan import plan
    from kopgen.render import render

    for file in plan(package):
        if "/csrc/" in file.path:
            (root / file.path).parent.mkdir(parents=True, exist_ok=True)
            (root / file.path).write_text(render(file, package))
    return root / package.name / "csrc"


def compile_host(source: Path, tmp_path: Path, route: str, *, cuda: bool = False) -> None:
    """One C++ file as torch's extensions build it, warnings as errors; with CUDA's runtime where `cuda`."""
    includes = [*torch_includes(), f"-I{sysconfig.get_paths()['include']}"]
    defines = ["-DTORCH_TARGET_VERSION=0x020a000000000000"] if route == "stable_abi" else []
    if cuda:
        defines.append("-DUSE_CUDA")
        if route == "torch_library":  # see test_host_code_compiles
            stub = tmp_path / "stub/c10/cuda/impl/cuda_cmake_macros.h"
            stub.parent.mkdir(parents=True, exist_ok=True)
            stub.write_text("#pragma once\n")
            includes.append(f"-I{tmp_path / 'stub'}")
    compiler = [NVCC, "-x", "c++", "-Xcompiler", "-Wall,-Werror"] if cuda else ["g++", "-Wall", "-Werror"]
    result = subprocess.run(
        [*compiler, "-std=c++20", *defines, *includes, "-c", str(source), "-o", str(tmp_path / "host.o")],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, f"{source}\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("route", ["torch_library", "stable_abi"])
def test_custom_kernels_host_and_skeleton_compile(tmp_path, route):
    """ops.cpp's host functions (every shape of custom op: mutating, Tensor!?, several outputs, strided)
    and a skeleton, with g++ -Wall -Werror."""
    from .test_cpp_user import custom_package

    csrc = write_csrc(custom_package(route), tmp_path / "repo")
    for source in ("ops.cpp", "rotate.cpp"):
        compile_host(csrc / source, tmp_path, route)


@needs_nvcc
@pytest.mark.parametrize("route", ["torch_library", "stable_abi"])
def test_custom_kernels_cuda_host_and_skeleton_compile(tmp_path, route):
    """cuda/ops.cpp (guard, stream) as the host compiler builds it, and a .cu skeleton with nvcc."""
    from .test_cpp_user import custom_package

    csrc = write_csrc(custom_package(route), tmp_path / "repo")
    compile_host(csrc / "cuda/ops.cpp", tmp_path, route, cuda=True)
    defines = ["-DTORCH_TARGET_VERSION=0x020a000000000000"] if route == "stable_abi" else []
    # The skeleton includes torch's headers (kopgen's kernels.cu does not), which want C++20.
    flags = [flag.replace("c++17", "c++20") for flag in nvcc_flags()]
    result = subprocess.run(
        [NVCC, *flags, *defines, *torch_includes(), "-c", str(csrc / "cuda/transposed.cu"),
         "-o", str(tmp_path / "skeleton.o")],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- a normalisation's backward kernel summing gradients over the rows (column sums) on the CPU

# rms_norm and layer_norm with a weight and a bias, whose formulas recompute their statistics (the
# compiled routes save none): their backward kernels sum w's (and b's) gradient over the rows.
COLUMN_SUMS = """\
kopgen: 1
package: kcols
defaults:
  registration: ROUTE
  backends: {cpu: cpp, cuda: cuda}
  dtypes: [bfloat16, float32, float64]
ops:
  - schema: "rms_norm(Tensor x, Tensor w, float eps=1e-6) -> Tensor"
    normalize: {stats: {rstd: "rsqrt(mean(x * x) + eps)"}, compute: "x * rstd * w"}
    tests: {shapes: [{x: [4, 10], w: [10]}]}
    backward:
      x: "torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (grad * w - x * (grad * w * x).mean(-1, keepdim=True) / ((x * x).mean(-1, keepdim=True) + eps))"
      w: "grad * x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)"
""" + EVERYTHING[EVERYTHING.index('  - schema: "affine_norm'):EVERYTHING.index('  - schema: "add_norm_')]

# Run against the installed package: every backward kernel's outputs against autograd through the
# reference in float64, on rows that take several parts of torch's threads (5000 rows of 24: parts of
# at least kGrain / 24 rows), long rows, no rows, leading dimensions, and the inputs the kernel does
# not sum over the rows (w with rows of its own, or of one column: summed after, in torch); the same
# bits from a second call at a thread count; and autograd's gradients, which call the kernel.
COLUMN_SUMS_CHECK = """\
import torch
import kcols
import kcols.reference as reference

ops = torch.ops.kcols
torch.manual_seed(0)
checked = 0
for threads in (1, 2, 3):
    torch.set_num_threads(threads)
    for x_shape, w_shape in [((5000, 24), (24,)), ((0, 24), (24,)), ((7, 9000), (9000,)), ((3, 4, 24), (24,)),
                             ((3, 4, 24), (1, 1, 24)), ((5000, 24), (5000, 24)), ((6, 24), (1,)), ((6, 1), (1,))]:
        x = torch.randn(x_shape, dtype=torch.float64)
        grad = torch.randn(x_shape, dtype=torch.float64)
        w = torch.randn(w_shape, dtype=torch.float64)
        b = torch.randn(w_shape, dtype=torch.float64)
        for name, args in [("rms_norm", (x, w)), ("affine_norm", (x, w, b))]:
            inputs = [a.clone().requires_grad_() for a in args]
            want = torch.autograd.grad(getattr(reference, name)(*inputs, 1e-5), inputs, grad)
            kernel = getattr(ops, f"{name}_backward")
            got = kernel(grad, *args, 1e-5)
            assert [g.shape for g in got] == [a.shape for a in args], (name, x_shape, w_shape)
            for g, wanted in zip(got, want, strict=True):
                torch.testing.assert_close(g, wanted, msg=f"{name} {x_shape} {w_shape} threads {threads}")
            assert all(torch.equal(g, again) for g, again in zip(got, kernel(grad, *args, 1e-5))), name
            inputs = [a.clone().requires_grad_() for a in args]
            through = torch.autograd.grad(getattr(ops, name)(*inputs, 1e-5), inputs, grad)
            for g, wanted in zip(through, want, strict=True):
                torch.testing.assert_close(g, wanted, msg=f"autograd {name} {x_shape} {w_shape}")
            # In float32 and bfloat16 against the reference on the same values: a total rounded once
            # (summed in float32), or, where it is summed after, each of its terms (sqrt(terms) ulps).
            terms = x.numel() // max(w.numel(), 1)
            for dtype, ulp in ((torch.float32, 1e-6), (torch.bfloat16, 8e-3)):
                low = [a.to(dtype) for a in (grad, *args)]
                inputs = [a.double().requires_grad_() for a in low[1:]]
                wanted = torch.autograd.grad(getattr(reference, name)(*inputs, 1e-5), inputs, low[0].double())
                for g, want_low in zip(kernel(*low, 1e-5)[1:], wanted[1:], strict=True):
                    assert g.dtype == dtype
                    torch.testing.assert_close(g.double(), want_low, atol=4 * ulp * (1 + terms**0.5), rtol=2 * ulp)
            checked += 1
print("checked", checked)
"""


@pytest.mark.slow
@pytest.mark.parametrize("route", ["torch_library", "stable_abi"])
def test_backward_kernels_sum_columns_on_the_cpu(tmp_path, route):
    """The C++ norms loop sums w's and b's gradients over the rows: the generated suite (the backward
    kernel against autograd through the reference, gradcheck), then COLUMN_SUMS_CHECK's shapes and threads."""
    spec = tmp_path / "kcols.yaml"
    spec.write_text(COLUMN_SUMS.replace("ROUTE", route))
    repo = generate(spec, tmp_path / "repo")
    site = tmp_path / "site"
    installed_suite_passes(repo, site, "-k", "not compile and not export", at_least=50)
    ran = subprocess.run([sys.executable, "-P", "-c", COLUMN_SUMS_CHECK], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, check=False)
    assert ran.returncode == 0 and "checked 48" in ran.stdout, ran.stdout + ran.stderr
