"""Specs that `kopgen check` accepted but whose generated code did not parse or import (found by fuzzing
the spec format): each is generated here and its Python checked by ruff (syntax, undefined and unused names)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kopgen import generate

SPECS = {
    # A triton_op's schema printed in double quotes around a string default's own double quotes.
    "triton_op_string_default": """\
kopgen: 1
package: kstr
defaults: {registration: triton_op, backends: {cpu: python, cuda: triton}}
ops:
  - schema: 'f(Tensor x, str mode="a") -> Tensor'
    kernel: custom
    reference: "x"
    fake: {shape: x.shape}
""",
    # A triton_op whose schema torch infers from annotations that name Sequence, which was not imported.
    "triton_op_int_list": """\
kopgen: 1
package: kl
defaults: {registration: triton_op, backends: {cpu: python, cuda: triton}}
ops:
  - schema: "f(Tensor x, int[] dims) -> Tensor"
    kernel: custom
    reference: "x"
    fake: {shape: x.shape}
    tests: {args: {dims: {value: [1, 2]}}}
""",
    # Every Tensor of its own dtype: nothing for the reference to upcast (it printed `    = upcast()`).
    "nothing_to_upcast": """\
kopgen: 1
package: kv
defaults: {backends: {cpu: python}}
ops:
  - schema: "f(Tensor x) -> Tensor"
    kernel: custom
    reference: "x * 2"
    fake: {shape: x.shape}
    tests: {args: {x: {dtype: int64}}}
""",
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_generated_python_parses_and_names_what_it_uses(tmp_path, name):
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(SPECS[name])
    repo = generate(spec, tmp_path / "repo")
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "E9,F",
                             str(repo)], capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_op_of_integer_tensors_only_has_no_gradient_to_refuse(tmp_path):
    """Its one Tensor is int64 in every sample: nothing can require grad, so the suite has no
    NotDifferentiable test (it failed asking for an int64 Tensor's gradient)."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(SPECS["nothing_to_upcast"])
    repo = generate(spec, tmp_path / "repo")
    suite = (repo / "tests/test_f.py").read_text()
    assert "NotDifferentiable" not in suite and "class TestF(" in suite
