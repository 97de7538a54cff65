"""The example kernel repos' kernels (examples/llm, examples/llm_stable, examples/llm_triton),
written on kopgen's declarations for them (csrc/kernels.h, docs/format.md), each tested on its own
against a float64 PyTorch reference: the C++ CPU kernels built inside the package `kopgen adopt`
generates around them (its host functions allocate the outputs), the Triton kernels run in Triton's
interpreter inside theirs, the CUDA kernels and the generated CUDA host code compiled by nvcc for
sm_90 (object files only: nothing CUDA runs here). tests/test_examples_adopted.py runs the repos'
generated suites.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from .conftest import built_once, pip_install
from .test_compiled import nvcc_flags, torch_includes

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NVCC = shutil.which("nvcc")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
STABLE = ["-DTORCH_TARGET_VERSION=0x020a000000000000"]


def adopted(name: str, tmp_path_factory) -> Path:
    """A copy of examples/NAME with kopgen's files around the kernels (`kopgen adopt`)."""
    from kopgen.adopt import adopt

    repo = tmp_path_factory.mktemp(name) / "repo"
    shutil.copytree(EXAMPLES / name, repo)
    adopt(repo / "kopgen.yaml")
    return repo


def installed(name: str, package: str, tmp_path_factory):
    """examples/NAME adopted, built and imported: torch.ops.<package> registered (once a process)."""
    return built_once(("test_example_kernels", name), lambda: build(name, package, tmp_path_factory))


def build(name: str, package: str, tmp_path_factory):
    site = tmp_path_factory.mktemp(f"{name}_site")
    pip_install(adopted(name, tmp_path_factory), site)
    sys.path.insert(0, str(site))
    try:
        importlib.import_module(package)
    finally:
        sys.path.remove(str(site))
    return getattr(torch.ops, package)


@pytest.fixture(scope="module")
def aten_ops(tmp_path_factory):
    """The five torch_library ops of examples/llm."""
    return installed("llm", "kllm", tmp_path_factory)


@pytest.fixture(scope="module")
def stable_ops(tmp_path_factory):
    """The stable-ABI op of examples/llm_stable."""
    return installed("llm_stable", "kllm_stable", tmp_path_factory)


@pytest.fixture(scope="module")
def triton_kernels(tmp_path_factory):
    """The Triton kernel modules, imported inside the package kopgen generates around them (they
    use its `_support`), under another name, without running its __init__ (no ops registered)."""
    repo = adopted("llm_triton", tmp_path_factory)
    package = types.ModuleType("example_kllm_triton")
    package.__path__ = [str(repo / "kllm_triton")]
    sys.modules[package.__name__] = package
    yield lambda name: importlib.import_module(f"{package.__name__}.kernels.{name}")
    for name in [n for n in sys.modules if n.split(".")[0] == package.__name__]:
        del sys.modules[name]


def close(actual, expected, dtype):
    """Half types round the output once (the kernels compute in float32): their tolerance."""
    loose = dtype in (torch.float16, torch.bfloat16)
    torch.testing.assert_close(actual, expected.to(actual.dtype), atol=2e-2 if loose else 1e-5,
                               rtol=2e-2 if loose else 1.3e-6)


# References, computed in float64.


def silu_and_mul_reference(x):
    d = x.shape[-1] // 2
    x = x.double()
    return torch.nn.functional.silu(x[..., :d]) * x[..., d:]


def rms_norm_reference(x, weight, epsilon):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon) * weight.double()


def rms_norm_backward_reference(grad, x, weight, epsilon):
    x = x.double().requires_grad_()
    w = weight.double().requires_grad_()
    return torch.autograd.grad(rms_norm_reference(x, w, epsilon), (x, w), grad.double())


def rotary_reference(positions, x, head_size, cache, is_neox):
    rot = cache.shape[-1]
    half = rot // 2
    heads = x.double().unflatten(-1, (-1, head_size))
    cos = cache.double()[positions, :half].unsqueeze(-2)
    sin = cache.double()[positions, half:].unsqueeze(-2)
    first = torch.arange(0, half) if is_neox else torch.arange(0, rot, 2)
    second = first + (half if is_neox else 1)
    x1, x2 = heads[..., first], heads[..., second]
    out = heads.clone()
    out[..., first] = x1 * cos - x2 * sin
    out[..., second] = x2 * cos + x1 * sin
    return out.flatten(-2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul_cpp(aten_ops, dtype):
    x = torch.randn(3, 5, 2 * 37, dtype=dtype)
    out = torch.empty(3, 5, 37, dtype=dtype)
    aten_ops.silu_and_mul(out, x)
    close(out, silu_and_mul_reference(x), dtype)
    aten_ops.silu_and_mul(torch.empty(0, 4, dtype=dtype), torch.empty(0, 8, dtype=dtype))  # empty: no-op


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul_triton(triton_kernels, dtype):
    module = triton_kernels("silu_and_mul")
    x = torch.randn(3, 5, 2 * 1100, dtype=dtype)  # two column blocks
    out = torch.empty(3, 5, 1100, dtype=dtype)
    module.silu_and_mul_triton(out, x)
    close(out, silu_and_mul_reference(x), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_cpp(aten_ops, dtype):
    x, w = torch.randn(4, 3, 50, dtype=dtype), torch.randn(50, dtype=dtype)
    close(aten_ops.rms_norm(x, w, 1e-5), rms_norm_reference(x, w, 1e-5), dtype)
    grad = torch.randn_like(x)
    grad_input, grad_weight = aten_ops.rms_norm_backward(grad, x, w, 1e-5)
    expected_input, expected_weight = rms_norm_backward_reference(grad, x, w, 1e-5)
    close(grad_input, expected_input, dtype)
    # grad_weight sums 12 rows: one rounding of a larger total.
    torch.testing.assert_close(grad_weight.double(), expected_weight, atol=1e-1, rtol=2e-2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_backward_of_empty_input_is_zero_weight_grad(aten_ops, dtype):
    x, w = torch.empty(0, 6, dtype=dtype), torch.randn(6, dtype=dtype)
    _, grad_weight = aten_ops.rms_norm_backward(torch.empty_like(x), x, w, 1e-5)
    assert grad_weight.eq(0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hidden", [37, 4100])  # one column block, and two
def test_rms_norm_triton(triton_kernels, dtype, hidden):
    forward, backward = triton_kernels("rms_norm"), triton_kernels("rms_norm_backward")
    x, w = torch.randn(3, 2, hidden, dtype=dtype), torch.randn(hidden, dtype=dtype)
    close(forward.rms_norm_triton(x, w, 1e-5), rms_norm_reference(x, w, 1e-5), dtype)
    grad = torch.randn_like(x)
    grad_input, grad_weight = backward.rms_norm_backward_triton(grad, x, w, 1e-5)
    expected_input, expected_weight = rms_norm_backward_reference(grad, x, w, 1e-5)
    close(grad_input, expected_input, dtype)
    torch.testing.assert_close(grad_weight.double(), expected_weight, atol=5e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm_stable(stable_ops, dtype):
    x, residual, w = (torch.randn(4, 3, 50, dtype=dtype), torch.randn(4, 3, 50, dtype=dtype),
                      torch.randn(50, dtype=dtype))
    expected_residual = x + residual  # rounded to dtype, as the kernel stores it
    expected_input = rms_norm_reference(expected_residual, w, 1e-6)
    stable_ops.fused_add_rms_norm(x, residual, w, 1e-6)
    torch.testing.assert_close(residual, expected_residual)
    close(x, expected_input, dtype)


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_embedding_cpp(aten_ops, dtype, is_neox):
    tokens, head_size, rot_dim, max_position = 7, 16, 12, 20  # rot_dim < head_size: a tail kept
    positions = torch.randint(0, max_position, (tokens,))
    query = torch.randn(tokens, 4 * head_size, dtype=dtype)
    key = torch.randn(tokens, 2 * head_size, dtype=dtype)
    cache = torch.randn(max_position, rot_dim, dtype=dtype)
    expected_query = rotary_reference(positions, query, head_size, cache, is_neox)
    expected_key = rotary_reference(positions, key, head_size, cache, is_neox)
    aten_ops.rotary_embedding(positions, query, key, head_size, cache, is_neox)
    close(query, expected_query, dtype)
    close(key, expected_key, dtype)
    query_alone = query.clone()
    aten_ops.rotary_embedding(positions, query_alone, None, head_size, cache, is_neox)  # key absent
    close(query_alone, rotary_reference(positions, query, head_size, cache, is_neox), dtype)


def test_rotary_embedding_cpp_refuses_a_position_outside_the_cache(aten_ops):
    query, cache = torch.randn(2, 8), torch.randn(4, 8)
    with pytest.raises(RuntimeError, match="position 4 is outside"):
        aten_ops.rotary_embedding(torch.tensor([0, 4]), query, None, 8, cache, True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_static_scaled_fp8_quant_cpp(aten_ops, dtype):
    x = torch.randn(5, 300, dtype=dtype) * 300
    x[0, :3] = torch.tensor([1e4, -1e4, float("nan")], dtype=dtype)  # saturated, and NaN kept
    scale = torch.tensor([0.5])
    result = torch.empty(5, 300, dtype=torch.float8_e4m3fn)
    aten_ops.static_scaled_fp8_quant(result, x, scale)
    expected = (x.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert result.float()[0, :2].tolist() == [448.0, -448.0] and result.float()[0, 2].isnan()
    torch.testing.assert_close(result.float(), expected.float(), equal_nan=True, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("classes", [10, 5000])  # one block of classes, and two
def test_cross_entropy_forward_triton(triton_kernels, dtype, classes):
    module = triton_kernels("cross_entropy_forward")
    logits = torch.randn(6, classes, dtype=dtype) * 4
    logits[1, 3] = float("-inf")  # a class that cannot be
    target = torch.randint(0, classes, (6,))
    target[2] = -100
    loss = module.cross_entropy_forward_triton(logits, target, -100)
    expected = torch.nn.functional.cross_entropy(logits.double(), target, ignore_index=-100, reduction="none")
    assert loss.dtype == torch.float32 and loss[2] == 0
    torch.testing.assert_close(loss.double(), expected, atol=1e-4, rtol=1e-5)


def nvcc(source: Path, out: Path, flags: list[str]) -> subprocess.Popen:
    """nvcc as torch's CUDAExtension calls it (test_compiled.py), warnings as errors: C++20 for
    torch's headers. `-x c++` in `flags`: a host file built by nvcc's host compiler."""
    base = [flag.replace("c++17", "c++20") for flag in nvcc_flags()]
    command = [NVCC, *base, *flags, *torch_includes(), "-c", str(source), "-o", str(out)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit)")
def test_cuda_kernels_and_hosts_compile(tmp_path_factory, tmp_path):
    """Every example .cu compiles for sm_90 against kopgen's kernels.h, and so does the generated CUDA host code that calls them (cuda/ops.cpp:
    device guard, stream): the ATen kernels as one translation unit (ATen's headers parsed once),
    the stable-ABI one on its own, all at once; the kernels define what the host code calls."""
    import sysconfig

    aten = adopted("llm", tmp_path_factory) / "kllm/csrc"
    stable = adopted("llm_stable", tmp_path_factory) / "kllm_stable/csrc"
    kernels = sorted(path.name for path in (aten / "cuda").glob("*.cu"))
    assert len(kernels) == 5
    unit = aten / "cuda/all_kernels.cu"  # beside them: each includes "../kernels.h"
    unit.write_text("".join(f'#include "{name}"\n' for name in kernels))
    # The host files, as the host compiler builds them (a CPU build of torch ships c10/cuda
    # without the header its CUDA build generates: test_compiled.py's stub).
    stub = tmp_path / "stub/c10/cuda/impl/cuda_cmake_macros.h"
    stub.parent.mkdir(parents=True)
    stub.write_text("#pragma once\n")
    host = ["-x", "c++", "-DUSE_CUDA", f"-I{sysconfig.get_paths()['include']}"]
    runs = [nvcc(unit, tmp_path / "aten.o", []),
            nvcc(stable / "cuda/fused_add_rms_norm.cu", tmp_path / "stable.o", STABLE),
            nvcc(aten / "cuda/ops.cpp", tmp_path / "aten_host.o", [*host, f"-I{tmp_path / 'stub'}"]),
            nvcc(stable / "cuda/ops.cpp", tmp_path / "stable_host.o", [*host, *STABLE])]
    outputs = [run.communicate()[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0, 0], outputs
    # What the linker would find: each kernel the host code calls is defined by the kernel files (one
    # defined with another signature than kernels.h declares is another overload, another symbol).
    for host, kernels, namespace in [("aten_host.o", "aten.o", "4kllm"), ("stable_host.o", "stable.o", "11kllm_stable")]:
        called = symbols(tmp_path / host, "--undefined-only", f"_ZN{namespace}")
        assert len(called) == (5 if host == "aten_host.o" else 1)
        assert called <= symbols(tmp_path / kernels, "--defined-only", f"_ZN{namespace}")


def symbols(path: Path, which: str, prefix: str) -> set[str]:
    """The (mangled) symbols `nm` lists with `which`, of the names starting with `prefix`."""
    lines = subprocess.run(["nm", which, str(path)], capture_output=True, text=True, check=True).stdout.splitlines()
    return {line.split()[-1] for line in lines if line.split()[-1].startswith(prefix)}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
