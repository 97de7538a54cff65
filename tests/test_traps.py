"""The seed's three traps, planted in a user's custom kernels on every route: the generated suite fails on
each with a message that names it.

One package per route holds one op per trap beside `pairsum`, whose kernel and backward are right: the
kernels are written (traps planted) before the suite runs once, over the tests that catch the traps. So a
compiled route builds once. The traps:

- pairsum_writes_input: its kernel also scales `x` in place, and the schema says `Tensor x` (trap 1);
- pairsum_transposed, pairsum_strided: the kernel returns its output transposed (the shape differs from
  `fake`'s), or in the transposed layout (the strides differ) (trap 2). On the compiled routes kopgen
  allocates a skeleton's outputs from `fake`, so these two are functions of the user's bound in the
  op's own signature (`kernel: {source: ...}`), which return their own tensor;
- pairsum_wrong_backward: a right kernel with a backward formula twice too large (trap 3).

The ops without `backward:` (all but pairsum and pairsum_wrong_backward) also show that a missing backward
is loud: kopgen registers an autograd formula that raises, never the seed's silent zero gradient.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen.cli import main

from .conftest import built_once, pip_install, run_suite

pytestmark = pytest.mark.slow

ROUTES = ["custom_op", "library", "triton_op", "torch_library", "stable_abi"]
COMPILED = ("torch_library", "stable_abi")

PAIRSUM = """\
    kernel: {kernel}
    reference: "x.unflatten(-1, (-1, 2)).sum(-1)"
    fake: {{shape: "x.shape[:-1] + (x.shape[-1] // 2,)"}}
"""
SPEC = """\
kopgen: 1
package: ktraps
defaults:
  registration: {route}
  backends: {backends}
  dtypes: [float64]
ops:
  - schema: "pairsum(Tensor x) -> Tensor"
    doc: Sums adjacent pairs along the last dimension.
{pairsum}    backward:
      x: "grad.repeat_interleave(2, -1)"
  - schema: "pairsum_writes_input(Tensor x) -> Tensor"
    doc: pairsum, whose kernel also writes x.
{pairsum}  - schema: "pairsum_transposed(Tensor x) -> Tensor"
    doc: pairsum, whose kernel returns its output transposed.
{transposed}  - schema: "pairsum_strided(Tensor x) -> Tensor"
    doc: pairsum, whose kernel returns its output in the transposed layout.
{strided}  - schema: "pairsum_wrong_backward(Tensor x) -> Tensor"
    doc: pairsum, with a backward formula twice too large.
{wrong_backward}    backward:
      x: "grad.repeat_interleave(2, -1) * 2"
"""


def bound(name: str) -> str:
    return PAIRSUM.format(kernel=f"{{source: {{cpu: csrc/legacy.cpp:{name}}}}}")


def spec(route: str) -> str:
    custom = PAIRSUM.format(kernel="custom")
    if route in COMPILED:
        return SPEC.format(route=route, backends="{cpu: cpp}", pairsum=custom, transposed=bound("pairsum_transposed_host"),
                           strided=bound("pairsum_strided_host"), wrong_backward=bound("pairsum_wrong_backward_host"))
    return SPEC.format(route=route, backends="{cpu: python, cuda: triton}", pairsum=custom, transposed=custom,
                       strided=custom, wrong_backward=custom)


# -- Python routes: each op's CPU launcher (`<op>_python`, in place of the skeleton's), the trap ending it.
PYTHON_KERNEL = '''def {op}_python(x: Tensor) -> Tensor:
    out = _support.{op}_output(x)
    out.copy_(x.unflatten(-1, (-1, 2)).sum(-1))
{end}
'''
PYTHON_ENDS = {
    "pairsum": "    return out",
    "pairsum_writes_input": "    x.mul_(2)\n    return out",
    "pairsum_transposed": "    return out.transpose(-1, -2).contiguous()",
    "pairsum_strided": "    return out.transpose(-1, -2).contiguous().transpose(-1, -2)",
    "pairsum_wrong_backward": "    return out",
}

# -- Compiled routes: the skeletons' bodies (the same code on both ABIs) and the bound functions.
CPP_SUMS = """
  const auto* values = static_cast<const double*>(x.const_data_ptr());
  auto* sums = static_cast<double*>(out.mutable_data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i) {
    sums[i] = values[2 * i] + values[2 * i + 1];
  }
"""
CPP_BODIES = {
    "pairsum": CPP_SUMS,
    "pairsum_writes_input": CPP_SUMS + """\
  auto* written = static_cast<double*>(x.mutable_data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) {
    written[i] *= 2;  // x is `Tensor x`, not `Tensor! x`
  }
""",
}
LEGACY = {  # csrc/legacy.cpp: functions the user had before kopgen, in the op's own signature
    "torch_library": """\
#include <ATen/ATen.h>

namespace ktraps {

at::Tensor pairsum_wrong_backward_host(const at::Tensor& x) {
  return x.unflatten(-1, {-1, 2}).sum(-1);
}

at::Tensor pairsum_transposed_host(const at::Tensor& x) {
  return pairsum_wrong_backward_host(x).transpose(-1, -2).contiguous();
}

at::Tensor pairsum_strided_host(const at::Tensor& x) {
  return pairsum_wrong_backward_host(x).transpose(-1, -2).contiguous().transpose(-1, -2);
}

}  // namespace ktraps
""",
    "stable_abi": """\
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <array>

namespace ktraps {

using torch::stable::Tensor;

// The samples are matrices: each row's adjacent pairs summed.
Tensor pairsum_wrong_backward_host(const Tensor& x) {
  const Tensor dense = torch::stable::contiguous(x);
  const std::array<int64_t, 2> shape = {x.size(0), x.size(1) / 2};
  Tensor out = torch::stable::new_empty(x, shape);
  const auto* values = static_cast<const double*>(dense.const_data_ptr());
  auto* sums = static_cast<double*>(out.mutable_data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i) {
    sums[i] = values[2 * i] + values[2 * i + 1];
  }
  return out;
}

Tensor pairsum_transposed_host(const Tensor& x) {
  return torch::stable::contiguous(torch::stable::transpose(pairsum_wrong_backward_host(x), 0, 1));
}

Tensor pairsum_strided_host(const Tensor& x) {
  return torch::stable::transpose(pairsum_transposed_host(x), 0, 1);
}

}  // namespace ktraps
""",
}


def write_kernels(repo: Path, route: str) -> None:
    """Do what the user does: write each skeleton's kernel, here with its trap."""
    if route not in COMPILED:
        for op, end in PYTHON_ENDS.items():
            path = repo / f"ktraps/kernels/{op}.py"
            text = path.read_text()
            path.write_text(text[: text.index(f"def {op}_python(")] + PYTHON_KERNEL.format(op=op, end=end))
        return
    for op, body in CPP_BODIES.items():
        path = repo / f"ktraps/csrc/{op}.cpp"
        _, signature = path.read_text().split("namespace ktraps {\n\n", 1)
        signature = signature.split(" {\n", 1)[0]
        path.write_text(f'#include "kernels.h"\n\nnamespace ktraps {{\n\n{signature} {{{body}}}\n\n}}  // namespace ktraps\n')


@dataclass
class Suite:
    """One run of the generated suite: each test's outcome, and each failure's report."""

    outcomes: dict[str, str]  # "TestPairsum.test_opcheck[cpu-torch.float64-normal-False]" -> "PASSED"
    failures: dict[str, str]

    def of(self, op_class: str, test: str) -> dict[str, str]:
        """The outcomes of `op_class`'s `test`, each parametrization."""
        return {name: outcome for name, outcome in self.outcomes.items()
                if name.split("[")[0] == f"{op_class}.{test}"}


def parse(stdout: str) -> Suite:
    outcomes = {f"{cls}.{test}": outcome for outcome, cls, test in
                re.findall(r"^(PASSED|FAILED|SKIPPED|ERROR) \S+::(\w+)::(\S+)", stdout, re.MULTILINE)}
    parts = re.split(r"^_+ (Test\w+\.\S+) _+$", stdout, flags=re.MULTILINE)
    return Suite(outcomes, dict(zip(parts[1::2], parts[2::2], strict=True)))


@pytest.fixture(scope="module", params=ROUTES)
def suite(request, tmp_path_factory) -> tuple[Path, Suite]:
    """The route's package adopted from its spec, its kernels written, and its suite run once over the
    tests that catch the traps (every failure reported: no -x)."""
    return built_once(("test_traps", request.param), lambda: run_the_suite(request.param, tmp_path_factory))


def run_the_suite(route: str, tmp_path_factory) -> tuple[Path, Suite]:
    repo = tmp_path_factory.mktemp(route) / "repo"
    repo.mkdir()
    if route in COMPILED:
        (repo / "csrc").mkdir()
        (repo / "csrc/legacy.cpp").write_text(LEGACY[route])
    (repo / "kopgen.yaml").write_text(spec(route))
    result = CliRunner().invoke(main, ["adopt", str(repo / "kopgen.yaml")])
    assert result.exit_code == 0, result.output
    write_kernels(repo, route)
    path = repo
    if route in COMPILED:
        path = repo.parent / "site"
        pip_install(repo, path)
    # (each test's whole name: `-k backward` would select every test of TestPairsumWrongBackward)
    select = "test_matches_reference or test_opcheck or test_gradcheck or test_backward_"
    result = run_suite(repo, {**os.environ, "PYTHONPATH": str(path)}, "--maxfail=1000", "-rA", "-k", select)
    print(result.stdout[-4000:])
    return repo, parse(result.stdout)


TRAPS = {  # (the op's test class, its test, the message naming the trap)
    "writes_input": ("TestPairsumWritesInput", "test_matches_reference",
                     "trap 1 (undeclared mutation): the kernel wrote 'x', which the schema does not mark `Tensor!`"),
    "opcheck_sees_the_write": ("TestPairsumWritesInput", "test_opcheck",
                               "trap 1 (undeclared mutation): the kernel writes an argument that the schema does not"),
    "transposed_shape": ("TestPairsumTransposed", "test_matches_reference",
                         "trap 2 (fake kernel): output 0's shape: fake says (8, 3), the kernel returned (3, 8)"),
    "opcheck_sees_the_shape": ("TestPairsumTransposed", "test_opcheck",
                               "trap 2 (fake kernel): the fake kernel's outputs differ from the kernel's"),
    "transposed_layout": ("TestPairsumStrided", "test_matches_reference",
                          "trap 2 (fake kernel): output 0's strides: fake says (3, 1), the kernel returned (1, 8)"),
    "opcheck_sees_the_layout": ("TestPairsumStrided", "test_opcheck",
                                "trap 2 (fake kernel): the fake kernel's outputs differ from the kernel's"),
    "wrong_backward": ("TestPairsumWrongBackward", "test_gradcheck",
                       "trap 3 (backward): gradcheck failed for 'x': the backward formula disagrees with finite"),
    "wrong_backward_against_the_reference": ("TestPairsumWrongBackward", "test_backward_matches_reference",
                                             "trap 3 (backward): the gradient of 'x' differs from autograd through"),
}


@pytest.mark.parametrize("trap", TRAPS)
def test_a_planted_trap_fails_the_suite_naming_it(suite, trap):
    _, run = suite
    op_class, test, message = TRAPS[trap]
    failed = [name for name, outcome in run.of(op_class, test).items() if outcome == "FAILED"]
    assert failed, run.of(op_class, test)
    trap_name = message.split(":")[0]  # e.g. "trap 2 (fake kernel)"
    for name in failed:
        assert trap_name in run.failures[name], run.failures[name][-3000:]
    normal = next((name for name in failed if "-normal" in name), failed[0])  # the message in full
    assert message in run.failures[normal], run.failures[normal][-3000:]


def test_the_right_kernel_passes_what_catches_the_traps(suite):
    """pairsum, the same kernel without a trap, passes each test that catches one; and the planted ops fail
    only where a trap is: their other tests pass (pairsum_wrong_backward's forward, for one)."""
    _, run = suite
    for test in ["test_matches_reference", "test_opcheck", "test_gradcheck", "test_backward_matches_reference"]:
        outcomes = run.of("TestPairsum", test)
        assert outcomes and set(outcomes.values()) <= {"PASSED", "SKIPPED"}, outcomes
    trapped = {(op_class, test) for op_class, test, _ in TRAPS.values()}
    unexpected = {name for name, outcome in run.outcomes.items()
                  if outcome in ("FAILED", "ERROR") and tuple(name.split("[")[0].split(".")) not in trapped}
    assert not unexpected


def test_a_missing_backward_is_loud(suite):
    """Without `backward:` the registered autograd formula raises (the suite checks it and passes)."""
    repo, run = suite
    for op_class in ["TestPairsumWritesInput", "TestPairsumTransposed", "TestPairsumStrided"]:
        assert run.of(op_class, "test_backward_raises_a_clear_error") == {
            f"{op_class}.test_backward_raises_a_clear_error": "PASSED"}
    text = (repo / "ktraps/_registration.py").read_text()
    cpp = repo / "ktraps/csrc/ops.cpp"  # torch_library: a C++ Function raises it, its literal split over lines
    text += re.sub(r'"\n *"', "", cpp.read_text()) if cpp.exists() else ""
    assert "ktraps::pairsum_transposed is not differentiable: its spec has no backward formulas" in text
