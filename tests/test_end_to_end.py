"""Generate the examples, build and install them, run their generated suites; the seed's Case 1 as a test."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import pytest

from kopgen import generate

from .conftest import EXAMPLES, ROOT, built_once, installed_suite_passes, pip_install, run_suite, write_pairsum_kernel

pytestmark = pytest.mark.slow


def on_its_worker(example: str, *values):
    """A test parameter of one installed example: under pytest-xdist (`-n`, `--dist loadgroup`) the tests of
    an example run on one worker, which builds and installs it once."""
    return pytest.param(example, *values, marks=pytest.mark.xdist_group(example))


def install(tmp_path_factory, example: str):
    """The example's generated repo, built and installed (pip, no build isolation) into a folder of its own.

    C++ compiles with -Werror (the generated setup.py adds -Wall): a warning fails the build.
    """
    root = tmp_path_factory.mktemp("e2e")
    repo = generate(EXAMPLES / example, root / "repo")
    site = root / "site"
    start = time.perf_counter()
    pip_install(repo, site)
    print(f"{example}: pip install (cold build) took {time.perf_counter() - start:.1f} s")
    env = {**os.environ, "PYTHONPATH": str(site)}
    return repo, site, env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Each example installed once (a process)."""
    return lambda example: built_once(("test_end_to_end", example), lambda: install(tmp_path_factory, example))


# muladd and fused_stable: their suites run against their wheels in test_the_generated_wheel_check_passes.
@pytest.mark.parametrize(
    "example",
    [on_its_worker(example) for example in ("activations.yaml", "rows.yaml", "norms.yaml", "triton_op.yaml",
                                             "fused.yaml", "gated.yaml")],
)
def test_generated_suite_passes(installed, example):
    repo, site, env = installed(example)
    package = next(p for p in repo.iterdir() if (p / "__init__.py").exists()).name
    where = subprocess.run(
        [sys.executable, "-P", "-c", f"import {package}; print({package}.__file__)"],
        cwd=repo, env=env, capture_output=True, text=True, check=True,
    )
    assert where.stdout.startswith(str(site)), where.stdout  # the built package, not the sources
    result = run_suite(repo, env, aoti=True)
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed and int(passed.group(1)) >= 30  # the CPU half of the suite; CUDA tests skip here


@pytest.mark.parametrize(
    ("example", "package"), [on_its_worker("fused.yaml", "kfused"), on_its_worker("fused_stable.yaml", "kstable")]
)
def test_compiled_kernels_read_broadcast_and_strided_inputs_in_place(installed, example, package):
    """Right values on layouts of 1 to 7 dimensions, and no copy of a broadcast or strided input
    (tests/strided_check.py, which the GPU run uses too)."""
    _, _, env = installed(example)
    script = ROOT / "tests" / "strided_check.py"
    result = subprocess.run(
        [sys.executable, str(script), package], env=env, capture_output=True, text=True, check=False
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.count(": ok") == 3


# Eager's a * b + c, rounded as the compiled CPU kernels must round it on every CPU: in float32, one
# rounding per operation (no FMA), to the tensors' dtype once at the end.
ROUNDS_AS_EAGER = """
import sys
import torch
ops = __import__(sys.argv[1])
torch.manual_seed(0)
for dtype in (torch.float32, getattr(torch, sys.argv[2])):
    for a, b in [(torch.randn(1 << 20), torch.randn(1 << 20)), (torch.randn(512, 1000), torch.randn(1000))]:
        a, b = a.mul(1e3).to(dtype), b.to(dtype)
        a.view(-1)[::7], a.view(-1)[::11] = float("nan"), float("inf")  # NaN stays NaN, inf * 0 too
        want = (a.float() * b.float() + 0.3).to(dtype)
        got = ops.muladd(a, b, 0.3)
        assert torch.equal(got.nan_to_num(), want.nan_to_num()) and torch.equal(got.isnan(), want.isnan()), dtype
print("ok")
"""


@pytest.mark.parametrize(
    ("example", "package", "half"),
    [on_its_worker("fused.yaml", "kfused", "float16"), on_its_worker("fused_stable.yaml", "kstable", "bfloat16")],
)
def test_compiled_cpu_kernels_round_as_eager(installed, example, package, half):
    """Bit for bit eager's float32 result, and its half-precision result rounded once, on dense and
    broadcast inputs: the loops' AVX2 copy (taken on this machine) rounds as the plain one does."""
    _, _, env = installed(example)
    result = subprocess.run([sys.executable, "-P", "-c", ROUNDS_AS_EAGER, package, half], env=env,
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 0 and result.stdout == "ok\n", result.stdout + result.stderr[-3000:]


@pytest.mark.parametrize(
    ("example", "package"), [on_its_worker("muladd.yaml", "kbook"), on_its_worker("fused_stable.yaml", "kstable")]
)
def test_the_generated_wheel_check_passes(installed, example, package):
    """The repo's tests/test_wheel.py where the package imports from its sources (as after ci.sh's editable
    install; here the installed extension is put beside its sources): `python -m build` makes the wheel, whose
    tag, torch requirement and compiled module match the route (stable_abi: no libtorch C++ symbol), and the
    whole suite passes against it in a fresh venv, with warnings as errors as run_suite has them."""
    repo, site, _ = installed(example)
    for module in (site / package).glob("_C*.so"):  # as an in-place build puts it, without compiling it again
        shutil.copy(module, repo / package)
    env = {**os.environ, "PYTHONPATH": str(repo), "CFLAGS": "-Werror"}  # the wheel's C++ compiles as pip_install's
    where = subprocess.run([sys.executable, "-c", f"import {package}; print({package}.__file__)"], cwd=repo, env=env,
                           capture_output=True, text=True, check=True)  # fmt: skip
    assert where.stdout.startswith(str(repo)), where.stdout
    result = run_suite(repo, env, "-rP", "tests/test_wheel.py", wheel=True)
    print(result.stdout[-3000:])
    assert result.returncode == 0 and "3 passed" in result.stdout.splitlines()[-1], result.stdout[-5000:]
    inner = re.search(r"^(\d+) passed", result.stdout, re.MULTILINE)  # first the suite against the wheel, printed
    assert inner and int(inner.group(1)) >= 30, result.stdout[-3000:]


@pytest.mark.xdist_group("fused.yaml")
def test_the_generated_wheel_check_passes_on_torch_library(installed):
    """fused's tests/test_wheel.py but for its fresh-environment run: the wheel `python -m build` makes reuses
    the objects of pip_install's in-tree build (2 passed in 5.3 s here), and its tag (cpXY-cpXY), torch pin
    (==major.minor.*) and libtorch C++ symbols are the generated checks'. The third test, fused's whole suite
    again against the wheel in a new venv, passed by hand (3 passed in 103 s: 379 passed, 354 skipped inside)
    and is left out here: 91 s more for a suite test_generated_suite_passes runs already."""
    repo, site, _ = installed("fused.yaml")
    for module in (site / "kfused").glob("_C*.so"):  # as an in-place build puts it, without compiling it again
        shutil.copy(module, repo / "kfused")
    env = {**os.environ, "PYTHONPATH": str(repo), "CFLAGS": "-Werror"}
    result = run_suite(repo, env, "-rA", "tests/test_wheel.py", "-k", "not fresh_environment", wheel=True)
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert "2 passed, 1 deselected" in result.stdout.splitlines()[-1], result.stdout[-3000:]
    assert "PASSED tests/test_wheel.py::test_the_wheel_holds_the_compiled_module_of_its_route" in result.stdout


# The C++ backward kernel of a split op (gated's fatrelu_and_mul, stable_abi) on layouts the suite's samples do
# not all reach: x's halves read in place through evenly spaced rows, or made dense; grad broadcast; the two
# halves of the one output written by one call, bit for bit the formula's values.
SPLIT_GRADIENT_LAYOUTS = """
import torch
import kgated  # noqa: F401

torch.manual_seed(0)
op = torch.ops.kgated.fatrelu_and_mul_backward


def formula(grad, x, t):
    gate, up = x.chunk(2, -1)
    return torch.cat([torch.where(gate > t, grad * up, 0.0), torch.where(gate > t, grad * gate, 0.0)], -1)


wide = torch.randn(6, 5, 40, dtype=torch.float64)
cases = {
    "dense 3-d": (torch.randn(6, 5, 16), torch.randn(6, 5, 32)),
    "x rows of a wider tensor": (torch.randn(6, 5, 16, dtype=torch.float64), wide[..., 3:35]),
    "x transposed": (torch.randn(5, 32), torch.randn(64, 5).t()),
    "x every other row": (torch.randn(3, 32), torch.randn(6, 64)[::2]),
    "grad expanded": (torch.randn(16).expand(6, 5, 16), torch.randn(6, 5, 32)),
    "grad one row": (torch.randn(1, 16).expand(7, 16), torch.randn(7, 32)),
    "grad expanded inside": (torch.randn(6, 1, 16).expand(6, 5, 16), torch.randn(6, 5, 32)),
    "one row": (torch.randn(16), torch.randn(32)),
    "width 2": (torch.randn(9, 1), torch.randn(9, 2)),
    "empty rows": (torch.randn(0, 8), torch.randn(0, 16)),
    "empty width": (torch.randn(3, 0), torch.randn(3, 0)),
}
for name, (grad, x) in cases.items():
    grad = grad.to(x.dtype)
    got = op(grad, x, 0.1)
    want = formula(grad, x, 0.1)
    assert got.shape == want.shape and got.is_contiguous(), name
    torch.testing.assert_close(got, want, rtol=0, atol=0, msg=name)
    print(f"{name}: ok")
"""


@pytest.mark.xdist_group("gated.yaml")
def test_compiled_split_gradient_writes_both_halves_on_every_layout(installed):
    _, _, env = installed("gated.yaml")
    result = subprocess.run([sys.executable, "-P", "-c", SPLIT_GRADIENT_LAYOUTS], env=env,
                            capture_output=True, text=True, check=False)  # fmt: skip
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.count(": ok") == 11, result.stdout


_PLATFORM = sysconfig.get_platform().replace("-", "_").replace(".", "_")
_CPYTHON = f"cp{sys.version_info.major}{sys.version_info.minor}"
_TORCH = ".".join(importlib.metadata.version("torch").split("+")[0].split(".")[:2])


@pytest.mark.parametrize(
    ("example", "tag", "torch_requirement"),
    [
        on_its_worker("fused.yaml", f"{_CPYTHON}-{_CPYTHON}-{_PLATFORM}", f"torch=={_TORCH}.*"),
    ],
)
def test_each_route_builds_its_kind_of_wheel(installed, example, tag, torch_requirement):
    """pip installed each package from the wheel it built: on TORCH_LIBRARY a wheel per CPython requiring the torch
    it was built against (its major.minor: torch's C++ API changes with each release). The pure and abi3 wheels
    are checked by the generated tests/test_wheel.py (test_the_generated_wheel_check_passes)."""
    _, site, _ = installed(example)
    (info,) = site.glob("*.dist-info")
    assert f"Tag: {tag}\n" in (info / "WHEEL").read_text()
    metadata = (info / "METADATA").read_text().splitlines()
    assert [line for line in metadata if line.startswith("Requires-Dist: torch")] == [f"Requires-Dist: {torch_requirement}"]
    assert "License-Expression: BSD-3-Clause" in metadata and (info / "licenses" / "LICENSE").is_file()


@pytest.mark.xdist_group("fused.yaml")
def test_torch_library_extension_defines_the_ops_in_cpp(installed):
    """The compiled ops come from TORCH_LIBRARY; the Python kernel of the other device is impl'd beside them."""
    _, _, env = installed("fused.yaml")
    script = textwrap.dedent(
        """
        import torch
        import kfused
        for name in ["muladd", "muladd_out", "scale_", "mul", "square"]:
            op = getattr(torch.ops.kfused, name).default
            assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CPU"), name
        print(torch.ops.kfused.muladd.default._schema)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "kfused::muladd(Tensor a, Tensor b, float c) -> Tensor" in result.stdout


@pytest.mark.xdist_group("fused.yaml")
def test_torch_library_autograd_runs_in_cpp(installed):
    """fused's differentiable ops get their autograd from csrc/ops.cpp: the Autograd kernel is registered
    from C++, the graph's nodes are the C++ Functions (a second backward too: square calls mul; rms_norm's
    calls its backward kernel), and no Python function runs in a forward and backward with grad."""
    _, _, env = installed("fused.yaml")
    script = textwrap.dedent(
        """
        import sys
        import torch
        import kfused
        for name in ["muladd", "mul", "square", "rms_norm", "layer_norm", "softmax"]:
            autograd = [line for line in torch._C._dispatch_dump(f"kfused::{name}").splitlines() if "Autograd" in line]
            print(name, autograd)
            assert len(autograd) == 1 and "csrc/ops.cpp" in autograd[0], autograd
        a = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
        b = torch.randn(3, dtype=torch.float64, requires_grad=True)
        calls = []
        sys.setprofile(lambda frame, event, arg: calls.append(frame.f_code.co_filename) if event == "call" else None)
        out = kfused.muladd(a, b, 2.0)
        out.sum().backward()
        sys.setprofile(None)
        assert not [f for f in calls if "kfused" in f and not f.endswith("ops.py")], calls  # only the typed API
        print(out.grad_fn.name())
        assert out.grad_fn.name() == "torch::autograd::CppNode<kfused::autograd::muladd_function>"
        assert torch.allclose(b.grad, a.detach().sum(0))  # summed back to b's shape
        (grad_x,) = torch.autograd.grad(kfused.square(b).sum(), b, create_graph=True)
        assert grad_x.grad_fn.name() == "torch::autograd::CppNode<kfused::autograd::mul_function>"
        assert torch.autograd.gradgradcheck(kfused.square, (b,))
        # a normalisation's: its backward kernel, kfused::rms_norm_backward, called from C++
        x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
        y = kfused.rms_norm(x, b, 1e-6)
        assert y.grad_fn.name() == "torch::autograd::CppNode<kfused::autograd::rms_norm_function>"
        with torch.profiler.profile() as profile:
            y.backward(torch.ones_like(y))
        assert "kfused::rms_norm_backward" in {e.name for e in profile.events()}
        # an optional bias, given or not: the C++ Function, and PyTorch's gradients
        for bias in (torch.randn(3, dtype=torch.float64, requires_grad=True), None):
            y = kfused.layer_norm(x, b, bias, 1e-5)
            assert y.grad_fn.name() == "torch::autograd::CppNode<kfused::autograd::layer_norm_function>"
            inputs = [x, b] if bias is None else [x, b, bias]
            weights = torch.randn_like(y)
            got = torch.autograd.grad(y, inputs, weights)
            expected = torch.autograd.grad(torch.nn.functional.layer_norm(x, (3,), b, bias, 1e-5), inputs, weights)
            assert all(torch.allclose(g, e) for g, e in zip(got, expected)), (got, expected)
        """
    )
    result = subprocess.run([sys.executable, "-P", "-c", script], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hostile_doc_and_description_build_and_pass(tmp_path_factory):
    """Quotes, comment terminators, backslashes and non-ASCII in `doc` and `description`: the
    generated Python, C++ and TOML stay valid, the docstrings read back as written."""
    spec = ROOT / "tests/specs/hostile_text.yaml"
    root = tmp_path_factory.mktemp("hostile")
    repo = generate(spec, root / "repo")
    ops = ast.parse((repo / "khostile/ops.py").read_text(encoding="utf-8"))
    function = next(node for node in ops.body if isinstance(node, ast.FunctionDef) and node.name == "muladd")
    import yaml

    raw = yaml.safe_load(spec.read_text(encoding="utf-8"))
    assert ast.get_docstring(function, clean=False).replace("\n    ", "\n") == raw["ops"][0]["doc"]
    package_doc = ast.get_docstring(ast.parse((repo / "khostile/__init__.py").read_text(encoding="utf-8")), clean=False)
    assert package_doc.startswith(raw["description"].strip())
    installed_suite_passes(repo, root / "site")


def test_custom_kernel_skeleton_names_its_file_then_passes_once_written(tmp_path_factory):
    """A `kernel: custom` op: the suite fails saying which file to write; written, it passes."""
    repo, site, env = install(tmp_path_factory, "custom.yaml")
    result = run_suite(repo, env)
    assert result.returncode != 0
    assert "kcustom::pairsum has no kernel yet: write the body of pairsum_kernel in kcustom/kernels/pairsum.py" in result.stdout

    write_pairsum_kernel(repo / "kcustom/kernels/pairsum.py")
    shutil.rmtree(site)
    pip_install(repo, site)
    result = run_suite(repo, env)
    print(result.stdout[-2000:])
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed and int(passed.group(1)) >= 25


# Hand-written CPU kernels for tests/specs/custom_metadata.yaml, in place of the `python` kernels
# that run the reference: each writes into the output `fake` describes.
METADATA_KERNELS = {
    "argmax_positive": """
    outputs = _support.argmax_positive_output(x)
    torch.argmax(x, -1, out=outputs[0])
    torch.gt(x, 0, out=outputs[1])
    return outputs
""",
    "pairsum": """
    out = _support.pairsum_output(x)
    return torch.add(x[..., 0::2], x[..., 1::2], out=out)
""",
    "transposed": """
    out = _support.transposed_output(x)
    for column in range(x.size(0)):  # the output's columns are contiguous
        out[:, column] = x[column]
    return out
""",
}


def write_metadata_kernels(package: Path) -> None:
    """Replace each `<op>_python` body (the reference copied into the output) by a kernel of its own."""
    for name, body in METADATA_KERNELS.items():
        path = package / "kernels" / f"{name}.py"
        text = path.read_text()
        start = text.index(f"def {name}_python(")
        header = text[start:text.index(":\n", start) + 2]
        path.write_text(text[:start] + header + textwrap.dedent(body).replace("\n", "\n    ").rstrip() + "\n")


def test_custom_kernel_outputs_of_other_dtypes_shapes_and_strides(tmp_path_factory):
    """int64 and bool outputs, a halved last dimension and a transposed output, each as `fake` says:
    hand-written kernels pass the generated suite (opcheck compares fake and real strides)."""
    root = tmp_path_factory.mktemp("metadata")
    repo = generate(ROOT / "tests/specs/custom_metadata.yaml", root / "repo")
    write_metadata_kernels(repo / "kmeta")
    installed_suite_passes(repo, root / "site", at_least=60)


def test_custom_kernel_output_sized_by_the_data(tmp_path_factory):
    """tests/specs/custom_dynamic.yaml: x's positive elements, a size only the data decides (`fake`:
    dynamic()); a hand-written launcher allocates its output and passes the suite, opcheck and the
    dynamic-shape compile included."""
    root = tmp_path_factory.mktemp("dynamic")
    repo = generate(ROOT / "tests/specs/custom_dynamic.yaml", root / "repo")
    path = repo / "kdyn/kernels/positive_values.py"
    text = path.read_text()
    start = text.index("def positive_values_python(")
    path.write_text(text[:start] + "def positive_values_python(x: Tensor) -> Tensor:\n"
                    "    return torch.masked_select(x, x > 0)\n")
    installed_suite_passes(repo, root / "site", at_least=20)


def test_custom_kernel_samples_the_spec_sets(tmp_path_factory):
    """tests/specs/custom_samples.yaml: a per-row cross-entropy whose int64 target in [0, C) keeps its
    dtype in every sample and whose reference passes reduction="none"; its `python` kernel (the
    reference) passes the generated suite, opcheck included."""
    root = tmp_path_factory.mktemp("samples")
    repo = generate(ROOT / "tests/specs/custom_samples.yaml", root / "repo")
    installed_suite_passes(repo, root / "site", at_least=20)


CASE_1 = textwrap.dedent(
    """
    import torch
    import kbook
    from kbook.kernels.muladd import muladd_triton

    torch.manual_seed(0)
    a, b = torch.randn(1000, requires_grad=True), torch.randn(1000)

    # The bare launcher: autograd never sees the kernel, and a.grad is the `+ a` term alone.
    (muladd_triton(a, b, 1.0) + a).sum().backward()
    assert torch.equal(a.grad, torch.ones(1000)), a.grad[:3]

    # The operator: the same loss gives d/da = b + 1 exactly.
    a.grad = None
    (kbook.muladd(a, b, 1.0) + a).sum().backward()
    assert torch.equal(a.grad, b + 1), (a.grad - (b + 1)).abs().max()
    print("case 1 ok")
    """
)


@pytest.mark.xdist_group("muladd.yaml")
def test_case_1_the_gradient_that_vanished_is_back(installed):
    _, _, env = installed("muladd.yaml")
    result = subprocess.run([sys.executable, "-c", CASE_1], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "case 1 ok" in result.stdout


# Hand-written C++ CPU kernels for tests/specs/custom_metadata.yaml on the compiled routes, in the
# convention of csrc/kernels.h: the arguments (dense, as `contiguous:` defaults to), then the outputs
# kopgen allocated as `fake` says. Written for both ABIs: TENSOR and SCALAR name their types.
CPP_KERNELS = {
    "argmax_positive": """
void argmax_positive_cpu(const TENSOR& x, TENSOR& out0, TENSOR& out1) {
  const int64_t cols = x.size(-1);
  int64_t* index = static_cast<int64_t*>(out0.mutable_data_ptr());
  bool* positive = static_cast<bool*>(out1.mutable_data_ptr());
  each_dtype(x, [&](auto* values) {
    for (int64_t row = 0; row < out0.numel(); ++row) {
      index[row] = 0;
      for (int64_t col = 0; col < cols; ++col) {
        const auto value = values[row * cols + col];
        index[row] = value > values[row * cols + index[row]] ? col : index[row];
        positive[row * cols + col] = value > 0;
      }
    }
  });
}
""",
    "pairsum": """
void pairsum_cpu(const TENSOR& x, TENSOR& out) {
  each_dtype(x, [&](auto* values) {
    auto* sums = static_cast<decltype(values)>(out.mutable_data_ptr());
    for (int64_t i = 0; i < out.numel(); ++i) {
      sums[i] = values[2 * i] + values[2 * i + 1];
    }
  });
}
""",
    "transposed": """
void transposed_cpu(const TENSOR& x, TENSOR& out) {
  // out is x.T with strides (1, rows): element (i, j) is at i + j * rows, where x has (j, i)
  std::memcpy(out.mutable_data_ptr(), x.const_data_ptr(), x.numel() * x.element_size());
}
""",
}
CPP_KERNEL_PRELUDE = """\
#include <cstring>

#include "kernels.h"

namespace kmeta {

// Calls `kernel` with x's values as float or double.
template <typename Kernel>
void each_dtype(const TENSOR& x, Kernel&& kernel) {
  if (x.scalar_type() == SCALAR::Double) {
    kernel(static_cast<double*>(const_cast<void*>(x.const_data_ptr())));
  } else {
    kernel(static_cast<float*>(const_cast<void*>(x.const_data_ptr())));
  }
}
"""


def write_cpp_kernels(csrc: Path, route: str) -> None:
    """Do what the user does: replace each skeleton's body by a kernel (the skeleton throws until then)."""
    types = {"torch_library": ("at::Tensor", "c10::ScalarType"),
             "stable_abi": ("torch::stable::Tensor", "torch::headeronly::ScalarType")}[route]
    for name, kernel in CPP_KERNELS.items():
        assert "write its CPU kernel in" in (csrc / f"{name}.cpp").read_text()
        text = CPP_KERNEL_PRELUDE + kernel + "\n}  // namespace kmeta\n"
        (csrc / f"{name}.cpp").write_text(text.replace("TENSOR", types[0]).replace("SCALAR", types[1]))


@pytest.mark.parametrize("route", ["torch_library", "stable_abi"])
def test_custom_cpp_kernels_pass_their_suite(tmp_path_factory, route):
    """tests/specs/custom_metadata.yaml with C++ kernels: the skeletons build and the suite fails naming
    the file to write; with kernels written here (int64 and bool outputs, a halved last dimension, a
    strided output) the generated suite passes, opcheck included."""
    root = tmp_path_factory.mktemp(f"cpp_{route}")
    spec = (ROOT / "tests/specs/custom_metadata.yaml").read_text().replace(
        "backends: {cpu: python, cuda: triton}", f"registration: {route}\n  backends: {{cpu: cpp}}")
    (root / "kopgen.yaml").write_text(spec)
    repo = generate(root / "kopgen.yaml", root / "repo")
    site = root / "site"
    if route == "torch_library":  # once is enough: the skeletons are the same on both
        pip_install(repo, site)
        result = run_suite(repo, {**os.environ, "PYTHONPATH": str(site)}, "-k", "pairsum")
        assert result.returncode != 0
        assert "kmeta::pairsum: write its CPU kernel in kmeta/csrc/pairsum.cpp" in result.stdout
        shutil.rmtree(site)
    write_cpp_kernels(repo / "kmeta/csrc", route)
    installed_suite_passes(repo, site, at_least=60)


# Hand-written C++ CPU kernels for tests/specs/custom_mutating.yaml on the compiled routes: bodies
# only, each put under the signature kopgen wrote in the op's skeleton (the same code on both ABIs).
MUTATING_CPP_KERNELS = {
    "scale_both": """
  each_dtype(x, [&](auto* values) {
    scale(values, x.numel(), alpha);
    if (y.has_value()) {
      scale(static_cast<decltype(values)>(y->mutable_data_ptr()), y->numel(), alpha);
    }
  });
""",
    "exchange_add": """
  each_dtype(acc, [&](auto* values) {
    auto* old = static_cast<decltype(values)>(out.mutable_data_ptr());
    auto* added = static_cast<decltype(values)>(x.mutable_data_ptr());
    for (int64_t i = 0; i < acc.numel(); ++i) {
      old[i] = values[i];
      values[i] += added[i];
    }
  });
""",
    "bias_relu": """
  each_dtype(x, [&](auto* values) {
    auto* result = static_cast<decltype(values)>(out.mutable_data_ptr());
    auto* shift = bias.has_value() ? static_cast<decltype(values)>(bias->mutable_data_ptr()) : nullptr;
    for (int64_t i = 0; i < out.numel(); ++i) {
      const auto value = values[i] + (shift != nullptr ? shift[i] : 0);
      result[i] = value > 0 ? value : 0;
    }
  });
""",
}
MUTATING_CPP_PRELUDE = """\
#include "kernels.h"

namespace kmutate {
namespace {

// Calls `kernel` with the tensor's values as float or double (the spec's dtypes).
template <typename Tensor, typename Kernel>
void each_dtype(const Tensor& tensor, Kernel&& kernel) {
  if (tensor.element_size() == sizeof(double)) {
    kernel(static_cast<double*>(tensor.mutable_data_ptr()));
  } else {
    kernel(static_cast<float*>(tensor.mutable_data_ptr()));
  }
}

template <typename scalar_t>
void scale(scalar_t* values, int64_t n, double alpha) {
  for (int64_t i = 0; i < n; ++i) {
    values[i] = static_cast<scalar_t>(values[i] * alpha);
  }
}

}  // namespace

"""


@pytest.mark.parametrize("route", ["torch_library", "stable_abi"])
def test_mutating_custom_cpp_kernels_pass_their_suite(tmp_path_factory, route):
    """tests/specs/custom_mutating.yaml with C++ kernels: in-place writes of a Tensor! and a Tensor!?
    (with str and int[] arguments), an op that writes its argument and returns, a Tensor? input;
    each kernel under the signature of its skeleton, the generated suite passes, opcheck included."""
    root = tmp_path_factory.mktemp(f"mutating_{route}")
    spec = (ROOT / "tests/specs/custom_mutating.yaml").read_text().replace(
        "registration: custom_op", f"registration: {route}").replace("backends: {cpu: triton}", "backends: {cpu: cpp}")
    (root / "kopgen.yaml").write_text(spec)
    repo = generate(root / "kopgen.yaml", root / "repo")
    for name, body in MUTATING_CPP_KERNELS.items():
        skeleton = (repo / f"kmutate/csrc/{name}.cpp").read_text()
        signature = skeleton.split("namespace kmutate {\n\n", 1)[1].split(" {\n", 1)[0]
        text = MUTATING_CPP_PRELUDE + signature + " {" + body + "}\n\n}  // namespace kmutate\n"
        (repo / f"kmutate/csrc/{name}.cpp").write_text(text)
    installed_suite_passes(repo, root / "site", at_least=40)


ROWSUM_CPP = """\
kopgen: 1
package: kaccurate
ops:
  - schema: "rowsum(Tensor x) -> Tensor"
    registration: torch_library
    backends: {cpu: cpp}
    reduce: {op: sum}
"""


def test_compiled_row_sums_are_as_accurate_as_torchs(tmp_path_factory):
    """A C++ row sum of 65536 float32 elements stays within 10x torch.sum's own error against a float64 sum:
    one running float total drifted 35x as far (5.6e-3), 16 partial totals keep it at about 5x."""
    root = tmp_path_factory.mktemp("rowsum_cpp")
    (root / "kopgen.yaml").write_text(ROWSUM_CPP)
    repo = generate(root / "kopgen.yaml", root / "repo")
    pip_install(repo, root / "site")
    script = textwrap.dedent(
        """
        import torch
        import kaccurate
        torch.manual_seed(0)
        x = torch.randn(256, 65536)
        exact = x.double().sum(-1)
        ours = (kaccurate.rowsum(x).double() - exact).abs().max().item()
        theirs = (x.sum(-1).double() - exact).abs().max().item()
        print(f"max error: ours {ours:.3g}, torch.sum {theirs:.3g}")
        assert ours <= 10 * theirs, (ours, theirs)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(root / "site")}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
