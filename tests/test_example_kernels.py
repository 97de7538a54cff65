"""The example kernel repos' kernels (examples/llm, examples/llm_stable, examples/llm_triton),
written for kopgen's custom-kernel conventions (docs/format.md), each tested on its own against a
float64 PyTorch reference: the C++ CPU kernels built into one small extension (and the stable-ABI
one into another), the Triton kernels run in Triton's interpreter inside the package kopgen
generates around them, the CUDA kernels compiled by nvcc for sm_90 (object files only: nothing
CUDA runs here). tests/test_examples_adopted.py runs the repos' generated suites.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CSRC = EXAMPLES / "llm" / "kllm" / "csrc"  # csrc/<op>.cpp, csrc/cuda/<op>.cu: where kopgen's skeletons go
STABLE_CSRC = EXAMPLES / "llm_stable" / "kllm_stable" / "csrc"
TRITON = EXAMPLES / "llm_triton"
NVCC = shutil.which("nvcc")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]

# Test-only registrations around the kernels' own functions (kopgen generates the real ones):
# a functional op allocates its outputs here, as kopgen's host function will.
ATEN_BINDINGS = """
#include <ATen/ATen.h>
#include <torch/library.h>
{includes}

TORCH_LIBRARY(kllm_examples, m) {{
  m.def("silu_and_mul(Tensor(a!) out, Tensor input) -> ()", [](at::Tensor out, const at::Tensor& input) {{
    kllm::silu_and_mul_cpu(out, input);
  }});
  m.def("rms_norm(Tensor input, Tensor weight, float epsilon) -> Tensor",
        [](const at::Tensor& input, const at::Tensor& weight, double epsilon) {{
          at::Tensor out = at::empty_like(input);
          kllm::rms_norm_cpu(input, weight, epsilon, out);
          return out;
        }});
  m.def("rms_norm_backward(Tensor grad, Tensor input, Tensor weight, float epsilon) -> (Tensor, Tensor)",
        [](const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, double epsilon) {{
          at::Tensor grad_input = at::empty_like(input);
          at::Tensor grad_weight = at::empty_like(weight);
          kllm::rms_norm_backward_cpu(grad, input, weight, epsilon, grad_input, grad_weight);
          return std::make_tuple(grad_input, grad_weight);
        }});
  m.def("rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, "
        "Tensor cos_sin_cache, bool is_neox) -> ()",
        [](const at::Tensor& positions, at::Tensor query, const std::optional<at::Tensor>& key,
           int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {{
          kllm::rotary_embedding_cpu(positions, query, key, head_size, cos_sin_cache, is_neox);
        }});
  m.def("static_scaled_fp8_quant(Tensor(a!) result, Tensor input, Tensor scale) -> ()",
        [](at::Tensor result, const at::Tensor& input, const at::Tensor& scale) {{
          kllm::static_scaled_fp8_quant_cpu(result, input, scale);
        }});
}}
"""
ATEN_SOURCES = ["silu_and_mul", "rms_norm", "rms_norm_backward", "rotary_embedding", "static_scaled_fp8_quant"]

STABLE_BINDINGS = """
#include <torch/csrc/stable/library.h>
#include "{source}"

namespace {{
void fused_add_rms_norm(torch::stable::Tensor input, torch::stable::Tensor residual,
                        torch::stable::Tensor weight, double epsilon) {{
  kllm_stable::fused_add_rms_norm_cpu(input, residual, weight, epsilon);
}}
}}  // namespace

STABLE_TORCH_LIBRARY(kllm_stable_examples, m) {{
  m.def("fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float epsilon) -> ()");
}}
STABLE_TORCH_LIBRARY_IMPL(kllm_stable_examples, CPU, m) {{
  m.impl("fused_add_rms_norm", TORCH_BOX(&fused_add_rms_norm));
}}
"""


def build(name: str, source: str, tmp_path_factory, flags: list[str]) -> None:
    """Builds and loads a library of operators (`load`, not `load_inline`, which would add
    torch/extension.h: slower to compile, and refused beside the stable ABI)."""
    from torch.utils.cpp_extension import load

    directory = tmp_path_factory.mktemp(name)
    path = directory / f"{name}.cpp"
    path.write_text(source)
    load(name, sources=[str(path)], extra_cflags=["-O1", "-Wall", "-Werror", *flags],
         build_directory=str(directory), is_python_module=False)


@pytest.fixture(scope="module")
def aten_ops(tmp_path_factory):
    """The five ATen CPU kernels in one translation unit: one compile of ATen's headers."""
    includes = "\n".join(f'#include "{CSRC / name}.cpp"' for name in ATEN_SOURCES)
    build("kllm_examples", ATEN_BINDINGS.format(includes=includes), tmp_path_factory, [])
    return torch.ops.kllm_examples


@pytest.fixture(scope="module")
def stable_ops(tmp_path_factory):
    """The stable-ABI kernel in its own extension: it must not see ATen's headers."""
    source = STABLE_BINDINGS.format(source=STABLE_CSRC / "fused_add_rms_norm.cpp")
    build("kllm_stable_examples", source, tmp_path_factory, ["-DTORCH_TARGET_VERSION=0x020a000000000000"])
    return torch.ops.kllm_stable_examples


@pytest.fixture(scope="module")
def triton_kernels(tmp_path_factory):
    """The Triton kernel modules, imported inside the package kopgen generates around them (they
    use its `_support`), under another name, without running its __init__ (no ops registered)."""
    from kopgen.adopt import adopt

    repo = tmp_path_factory.mktemp("llm_triton") / "repo"
    shutil.copytree(TRITON, repo)
    adopt(repo / "kopgen.yaml")
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


def nvcc(source: Path, out: Path, defines: list[str]) -> subprocess.Popen:
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS, include_paths

    command = [NVCC, *COMMON_NVCC_FLAGS, "-std=c++20", "-O3", "-arch=sm_90", *defines,
               *(f"-I{path}" for path in include_paths()), "-c", str(source), "-o", str(out)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit)")
def test_cuda_kernels_compile(tmp_path):
    """Every example .cu compiles for sm_90: the ATen ones as one translation unit (ATen's headers
    parsed once), the stable-ABI one on its own, both at once."""
    stable = STABLE_CSRC / "cuda" / "fused_add_rms_norm.cu"
    sources = [*sorted((CSRC / "cuda").glob("*.cu")), stable]
    assert len(sources) == 6
    aten = tmp_path / "aten_kernels.cu"
    aten.write_text("".join(f'#include "{source}"\n' for source in sources if source != stable))
    runs = [nvcc(aten, tmp_path / "aten.o", []),
            nvcc(stable, tmp_path / "stable.o", ["-DUSE_CUDA", "-DTORCH_TARGET_VERSION=0x020a000000000000"])]
    outputs = [run.communicate()[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
