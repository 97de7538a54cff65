"""The generated code and tests: Triton launches on the tensors' GPU, tests of specs with several
test shapes, the resized sample of the dynamic-shape compiles, custom skeletons whose outputs
differ in shape; and two generated suites run with warnings as errors."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import re
from pathlib import Path

import pytest
import torch

from kopgen import generate
from kopgen.lang import tests, triton
from kopgen.pipeline import load_spec, load_spec_text, render_repo

from .conftest import EXAMPLES, ROOT, run_suite

SPECS = ROOT / "tests/specs"
SEVERAL_SHAPES = SPECS / "several_shapes.yaml"
CUSTOM_TWO_SHAPES = SPECS / "custom_two_shapes.yaml"
# The specs with an op that launches Triton kernels on CUDA.
TRITON_ON_CUDA = [
    spec
    for spec in [*sorted(EXAMPLES.glob("*.yaml")), CUSTOM_TWO_SHAPES]
    if any(op.uses_compiled_triton for op in load_spec(spec).ops)
]


def rendered(spec: Path, path: str) -> str:
    return render_repo(load_spec(spec))[path][1]


def launches(function: ast.FunctionDef) -> list[ast.Call]:
    """The Triton launches of a launcher: `kernel[grid](...)`, or `_support.launch(kernel, grid, ...)`."""
    return [
        node
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
        and (
            isinstance(node.func, ast.Subscript)
            or ast.unparse(node.func) == "_support.launch"
        )
    ]


def guarded(function: ast.FunctionDef) -> set[ast.Call]:
    """The calls made inside `with _support.device_guard(...)`, and those of `_support.launch`, which enters
    the tensors' GPU itself (before its first launch and its direct launcher alike)."""
    calls = {node for node in ast.walk(function) if isinstance(node, ast.Call) and ast.unparse(node.func) == "_support.launch"}
    for node in ast.walk(function):
        if isinstance(node, ast.With) and any(ast.unparse(item.context_expr).startswith("_support.device_guard(") for item in node.items):
            calls |= {call for statement in node.body for call in ast.walk(statement) if isinstance(call, ast.Call)}
    return calls


@pytest.mark.parametrize("spec", TRITON_ON_CUDA, ids=lambda spec: spec.stem)
def test_triton_launchers_launch_on_the_tensors_gpu(spec):
    """Triton launches on the current GPU: every CUDA launcher enters its tensors' GPU first."""
    package = load_spec(spec)
    files = render_repo(package)
    for op in package.ops:
        if not op.uses_compiled_triton:
            continue
        module = ast.parse(files[f"{package.name}/kernels/{op.name}.py"][1])
        # The launcher, a triton_op's `<op>_launch`, which it calls with the kernel to run, and a saving
        # normalisation's `_<launcher>`, which the launcher and the one that saves the statistics call.
        names = {triton.launcher(op), f"{op.name}_launch", f"_{triton.launcher(op)}"}
        functions = [node for node in module.body if isinstance(node, ast.FunctionDef) and node.name in names]
        calls = [call for function in functions for call in launches(function)]
        assert calls, op.name
        assert set(calls) <= set().union(*map(guarded, functions)), f"{op.name}: {[ast.unparse(call) for call in calls]}"


def test_device_guard_enters_the_gpu_of_the_tensor_unless_current(tmp_path, monkeypatch):
    path = tmp_path / "_support.py"
    # Custom Triton kernels launch under device_guard; kopgen's own go through _support.launch.
    path.write_text(rendered(EXAMPLES / "custom.yaml", "kcustom/_support.py"))
    spec = importlib.util.spec_from_file_location("kbook_support", path)
    support = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(support)
    device_guard = support.device_guard
    assert isinstance(device_guard(torch.ones(2)), contextlib.nullcontext)  # CPU: no guard

    class OnGpu:  # a CUDA tensor as device_guard sees one, on a machine without a GPU
        is_cuda = True

        def __init__(self, index: int):
            self.index = index

        def get_device(self) -> int:
            return self.index

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert isinstance(device_guard(OnGpu(0)), contextlib.nullcontext)  # already current
    guard = device_guard(OnGpu(1))
    assert isinstance(guard, torch.cuda.device) and guard.idx == 1


def op_data(spec: Path, path: str) -> dict[str, ast.expr]:
    """The keyword arguments of the OpData call in a generated tests/test_<op>.py."""
    module = ast.parse(rendered(spec, path))
    call = next(node for node in ast.walk(module) if isinstance(node, ast.Call) and ast.unparse(node.func) == "OpData")
    return {keyword.arg: keyword.value for keyword in call.keywords}


def load_contract(tmp_path: Path, spec: Path):
    """The generated tests/_contract.py of `spec`, imported."""
    path = tmp_path / "_contract.py"
    path.write_text(rendered(spec, "tests/_contract.py"))
    module_spec = importlib.util.spec_from_file_location("generated_contract", path)
    contract = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(contract)
    return contract


def test_tests_of_several_shapes_name_samples_that_exist():
    """With two test shapes the samples are normal0 and normal1; the checks of one sample take normal0."""
    op = load_spec(SEVERAL_SHAPES).ops[0]
    assert [s.label for s in tests.samples(op)[:2]] == ["normal0", "normal1"]
    data = op_data(SEVERAL_SHAPES, "tests/test_rotate.py")
    labels = {key.value for key in data["samples"].keys}
    asked = [ast.literal_eval(data[name]) for name in ("normal_sample", "backward_sample")]
    asked += ast.literal_eval(data["gradient_samples"])
    assert asked[0] == "normal0" and "normal" not in asked
    assert set(asked) <= labels, set(asked) - labels


def test_ops_on_logs_roots_and_powers_are_tested_on_positive_inputs():
    """Whether an op's tests draw positive inputs follows from the functions its expressions call."""
    package = load_spec_text(
        """
kopgen: 1
package: kpositive
defaults: {backends: {cpu: python}, dtypes: [float32]}
ops:
  - {schema: "plain(Tensor x) -> Tensor", compute: "x * 2 + exp(x)"}
  - {schema: "root(Tensor x) -> Tensor", compute: "where(x > 1, sqrt(x), x)"}
  - {schema: "square(Tensor x) -> Tensor", compute: "x ** 2"}
  - {schema: "logs(Tensor x) -> (Tensor, Tensor)", compute: ["x", "log1p(x)"]}
""",
        "spec.yaml",
    )
    assert {op.name: tests.positive_inputs(op) for op in package.ops} == {
        "plain": False, "root": True, "square": True, "logs": True,
    }


def test_resized_sample_keeps_size_1_dimensions_and_broadcasting(tmp_path):
    """The dynamic-shape compiles grow the normal sample: every size n > 1 becomes n + 2, size-1 dimensions
    stay, so x [4, 5, 6, 8] and cos [5, 1, 8] still broadcast."""
    contract = load_contract(tmp_path, SEVERAL_SHAPES)
    data = op_data(SEVERAL_SHAPES, "tests/test_rotate.py")
    normal = eval(ast.unparse(data["samples"].values[0]))  # lambda make: (...), as generated
    x, cos = normal(contract.Make("cpu", torch.float32, positive=False))
    assert (x.shape, cos.shape) == ((4, 5, 6, 8), (5, 1, 8))
    x, cos = normal(contract.Make("cpu", torch.float32, positive=False, grown=True))
    assert (x.shape, cos.shape) == ((6, 7, 8, 10), (7, 1, 10))
    assert torch.broadcast_shapes(x.shape, cos.shape) == (6, 7, 8, 10)
    strided = contract.Make("cpu", torch.float32, positive=False).strided
    assert [tuple(strided(*shape).shape) for shape in [(3, 4), (5,), ()]] == [(3, 4), (5,), ()]
    assert not any(strided(*shape).is_contiguous() for shape in [(3, 4), (5,)])


def test_custom_skeleton_stores_each_output_under_its_own_mask():
    """Outputs of two shapes: each gets its own size and mask, and the grid covers the largest."""
    text = rendered(CUSTOM_TWO_SHAPES, "ktwo/kernels/pairsum_double.py")
    compile(text, "pairsum_double.py", "exec")
    for name in ("out0", "out1"):
        assert f"    {name}_mask = offsets < {name}_numel\n" in text
        assert f"tl.store({name}_ptr + offsets, {name}.to({name}_ptr.dtype.element_ty), mask={name}_mask)" in text
    assert "n_elements = max(out0.numel(), out1.numel())" in text
    assert re.search(r"\n\s+out0\.numel\(\),\n\s+out1\.numel\(\),\n", text)  # the sizes the kernel is launched with


def test_the_skeletons_output_sizes_and_masks_make_way_for_arguments_of_their_names():
    """`out0_numel` is a kernel parameter of the skeleton above: an argument of that name keeps it, and the
    skeleton's own becomes out0_numel_."""
    text = CUSTOM_TWO_SHAPES.read_text().replace("pairsum_double(Tensor x)", "pairsum_double(Tensor x, int out0_numel)")
    package = load_spec_text(text, "spec.yaml")
    kernel = render_repo(package)["ktwo/kernels/pairsum_double.py"][1]
    compile(kernel, "pairsum_double.py", "exec")
    assert "    out0_mask = offsets < out0_numel_\n" in kernel
    assert re.search(r"\n    out1_ptr,\n    out0_numel,\n    out0_numel_,\n    out1_numel,\n", kernel)


def write_pairsum_double_kernel(path: Path) -> None:
    """What a user does with the skeleton of tests/specs/custom_two_shapes.yaml: write the body, drop the `raise`."""
    text = re.sub(r"    raise NotImplementedError\(\n.*\n    \)\n", "", path.read_text())
    text = text.replace(
        "    out0 = tl.full((BLOCK_SIZE,), 0.0, dtype=COMPUTE_DTYPE)\n",
        "    pairs = 2 * offsets\n"
        "    out0 = tl.load(x_ptr + pairs, mask=out0_mask).to(COMPUTE_DTYPE)"
        " + tl.load(x_ptr + pairs + 1, mask=out0_mask).to(COMPUTE_DTYPE)\n",
    ).replace(
        "    out1 = tl.full((BLOCK_SIZE,), 0.0, dtype=COMPUTE_DTYPE)\n",
        "    out1 = tl.load(x_ptr + offsets, mask=out1_mask).to(COMPUTE_DTYPE) * 2\n",
    )
    assert "raise NotImplementedError" not in text and "out0_mask).to" in text and "out1_mask).to" in text
    path.write_text(text)


def suite_of(spec: Path, root: Path, prepare=None) -> str:
    """The generated suite of a spec of Python kernels, run from its sources; its output, once it passed."""
    repo = generate(spec, root / "repo")
    if prepare:
        prepare(repo)
    result = run_suite(repo, {**os.environ, "PYTHONPATH": str(repo)}, "-rs")
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    return result.stdout


@pytest.mark.slow
def test_suite_of_several_test_shapes_passes(tmp_path):
    """normal0 and normal1 samples, and dynamic-shape compiles on a resized sample that still broadcasts;
    the test on two GPUs skips here."""
    output = suite_of(SEVERAL_SHAPES, tmp_path)
    assert re.search(r"SKIPPED \[\d+\] tests/_contract.py:\d+: needs two CUDA devices", output)
    passed = re.search(r"(\d+) passed", output)
    assert passed and int(passed.group(1)) >= 30


@pytest.mark.slow
def test_suite_of_a_custom_kernel_with_outputs_of_two_shapes_passes(tmp_path):
    suite_of(CUSTOM_TWO_SHAPES, tmp_path, lambda repo: write_pairsum_double_kernel(repo / "ktwo/kernels/pairsum_double.py"))
