"""tests/specs/custom_mutating.yaml: `kernel: custom` ops that write their arguments in place (one
with a `Tensor!?`, one that also returns) and one with a `Tensor?` input. Each generated skeleton gets
its Triton kernel written here, in place of the TODO and the placeholder stores; the generated
launcher around it (contiguity, the flag of an optional Tensor, what it returns) stays as kopgen
wrote it, and the generated suite (opcheck on every sample, the optional left out too) passes on
custom_op and on library."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kopgen import generate
from kopgen.lang import tests as lang_tests
from kopgen.pipeline import load_spec

from .conftest import ROOT, installed_suite_passes

SPEC = ROOT / "tests/specs/custom_mutating.yaml"

# What each kernel does after its offsets, in place of the skeleton's TODO and placeholder stores.
KERNELS = {
    "scale_both": """
        x_mask = offsets < x_numel
        x = tl.load(x_ptr + offsets, mask=x_mask).to(COMPUTE_DTYPE)
        tl.store(x_ptr + offsets, (x * alpha).to(x_ptr.dtype.element_ty), mask=x_mask)
        if HAS_y:
            y_mask = offsets < y_numel
            y = tl.load(y_ptr + offsets, mask=y_mask).to(COMPUTE_DTYPE)
            tl.store(y_ptr + offsets, (y * alpha).to(y_ptr.dtype.element_ty), mask=y_mask)
    """,
    "exchange_add": """
        acc_mask = offsets < acc_numel
        acc = tl.load(acc_ptr + offsets, mask=acc_mask)
        x = tl.load(x_ptr + offsets, mask=acc_mask)
        tl.store(out_ptr + offsets, acc, mask=acc_mask)
        total = acc.to(COMPUTE_DTYPE) + x.to(COMPUTE_DTYPE)
        tl.store(acc_ptr + offsets, total.to(acc_ptr.dtype.element_ty), mask=acc_mask)
    """,
    "bias_relu": """
        x = tl.load(x_ptr + offsets, mask=mask).to(COMPUTE_DTYPE)
        if HAS_bias:
            x += tl.load(bias_ptr + offsets, mask=mask).to(COMPUTE_DTYPE)
        out = tl.where(x > 0, x, 0.0)
        tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)
    """,
}


def write_kernels(package: Path) -> None:
    """Each skeleton's TODO and placeholder stores replaced by its kernel, and the launcher's `raise` deleted."""
    for name, body in KERNELS.items():
        path = package / "kernels" / f"{name}.py"
        text = path.read_text()
        start = text.index("    # TODO: load")
        end = text.index("\n\n\n", start)
        text = text[:start] + textwrap.indent(textwrap.dedent(body).strip(), "    ") + text[end:]
        text, raised = re.subn(r"    raise NotImplementedError\(\n.*\n    \)\n", "", text)
        assert raised == 1, path
        path.write_text(text)


def test_samples_cover_the_optional_and_keep_written_arguments_dense():
    """opcheck runs every sample (no opcheck_samples), among them each optional Tensor left out; the
    noncontiguous sample strides only what the kernel may take strided (not a mutated argument it
    indexes flat: the launcher refuses that, naming it)."""
    ops = {op.name: op for op in load_spec(SPEC).ops}
    labels = {name: [s.label for s in lang_tests.samples(op)] for name, op in ops.items()}
    assert "without_y" in labels["scale_both"] and "without_bias" in labels["bias_relu"]
    assert "noncontiguous" not in labels["scale_both"]  # x and y are written, dense: nothing left to stride
    exchange = {s.label: s.args for s in lang_tests.samples(ops["exchange_add"])}
    assert exchange["noncontiguous"] == ("make(8, 6)", "make.strided(8, 6)")
    for op in ops.values():
        assert not any("opcheck_samples" in line for line in lang_tests.op_data(op, load_spec(SPEC)))
    assert "returns=True," in lang_tests.op_data(ops["exchange_add"], load_spec(SPEC))


@pytest.mark.slow
@pytest.mark.parametrize("registration", ["custom_op", "library"])
def test_mutating_and_optional_custom_kernels_pass_their_suite(tmp_path_factory, registration):
    root = tmp_path_factory.mktemp(f"mutating_{registration}")
    spec = root / "kopgen.yaml"
    spec.write_text(SPEC.read_text().replace("registration: custom_op", f"registration: {registration}"))
    repo = generate(spec, root / "repo")
    write_kernels(repo / "kmutate")
    installed_suite_passes(repo, root / "site", at_least=60)


@pytest.mark.slow
def test_tensor_list_arguments_get_samples_and_pass(tmp_path):
    """A required `Tensor[]` and `Tensor?[]` are drawn as lists of the lead's shape (with None in the
    optional one), in every sample, and opcheck takes them (tests/specs/custom_tensor_lists.yaml, the
    reference as its python kernel)."""
    repo = generate(ROOT / "tests/specs/custom_tensor_lists.yaml", tmp_path / "repo")
    assert "[make(0, 6), make(0, 6)],\n            [make(0, 6), None]," in (repo / "tests/test_weighted_sum.py").read_text()
    result = installed_suite_passes(repo, tmp_path / "site", "-rA", at_least=14)
    assert "PASSED tests/test_weighted_sum.py::TestWeightedSum::test_opcheck[cpu-torch.float32-empty-False]" in result.stdout


# ktlc::stack_sum's CPU kernel, flat indexing: right only where every element is dense.
STACK_SUM_CPU = """\
#include "kernels.h"

namespace ktlc {

void stack_sum_cpu(at::TensorList xs, const at::Tensor& w,
                   const c10::List<std::optional<at::Tensor>>& ys, at::Tensor& out) {
  const at::Tensor first = *ys.get(0);
  float* o = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < w.numel(); ++i) {
    float total = first.data_ptr<float>()[i];
    for (const at::Tensor& x : xs) {
      total += x.data_ptr<float>()[i] * w.data_ptr<float>()[i];
    }
    o[i] = total;
  }
}

}  // namespace ktlc
"""


@pytest.mark.slow
def test_a_compiled_kernel_gets_tensor_list_elements_dense_and_on_the_ops_device(tmp_path):
    """The host function checked and densified Tensors only: an element of a Tensor[] on another device
    reached the kernel, a transposed one was read flat (a wrong result the suite did not see: its
    non-contiguous sample strided no element)."""
    repo = generate(ROOT / "tests/specs/custom_tensor_lists_compiled.yaml", tmp_path / "repo")
    assert "[make.strided(8, 6), make.strided(8, 6)]," in (repo / "tests/test_stack_sum.py").read_text()
    (repo / "ktlc/csrc/stack_sum.cpp").write_text(STACK_SUM_CPU)
    installed_suite_passes(repo, tmp_path / "site", at_least=10)
    # Each element on the op's device: a CPU element beside a CUDA lead reaches the CUDA host function (no GPU
    # here; a meta element goes to the fake kernel, as for any Tensor: the dispatcher ranks Meta first).
    host = (repo / "ktlc/csrc/ops.cpp").read_text()
    assert 'check_device("ktlc::stack_sum", "xs", xs, w);\n  check_device("ktlc::stack_sum", "ys", ys, w);' in host
    check = (
        "import torch, ktlc\n"
        "w = torch.ones(2, 3)\n"
        "t = torch.arange(6.0).reshape(3, 2).t()\n"
        "assert torch.equal(ktlc.stack_sum([t, t], w, [w]), 2 * t + 1)\n"
    )
    result = subprocess.run([sys.executable, "-c", check], env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
