"""The seed's three traps, planted in a user's custom kernel on each route that takes one: the generated
suite fails on each with a message that names it.

Each route's package is generated once; the traps are planted by rewriting the user's kernel file (and,
for backward, kopgen.yaml followed by `kopgen update`) between runs of the few tests that catch them.
Python routes run from the repo itself (no build), so a rewritten kernel needs no reinstall.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen import generate
from kopgen.cli import main

from .conftest import run_suite

pytestmark = pytest.mark.slow

# Routes whose `kernel: custom` runs today (torch_library and stable_abi: not yet). On CPU each runs
# the user's `python` kernel; triton_op needs its CUDA kernel in Triton, which stays a skeleton here.
ROUTES = ["custom_op", "library", "triton_op"]

SPEC = """\
kopgen: 1
package: ktraps
defaults:
  registration: {route}
  backends: {{cpu: python, cuda: triton}}
  dtypes: [float32, float64]
ops:
  - schema: "pairsum(Tensor x) -> Tensor"
    doc: Sums adjacent pairs along the last dimension.
    kernel: custom
    reference: "x.unflatten(-1, (-1, 2)).sum(-1)"
    fake: {{shape: "x.shape[:-1] + (x.shape[-1] // 2,)"}}
    backward:
      x: "grad.repeat_interleave(2, -1)"
"""

# The user's CPU kernel, with {body} ending it, in place of the skeleton's `pairsum_python`.
KERNEL = '''def pairsum_python(x: Tensor) -> Tensor:
    out = _support.pairsum_output(x)
    out.copy_(x.unflatten(-1, (-1, 2)).sum(-1))
{body}
'''

TRAPS = {
    # trap 1: the kernel scales its input in place, and the schema says `Tensor x`, not `Tensor! x`
    "writes_input": ("    x.mul_(2)\n    return out", "matches_reference",
                     "trap 1 (undeclared mutation): the kernel wrote 'x', which the schema does not mark `Tensor!`"),
    "opcheck_sees_the_write": ("    x.mul_(2)\n    return out", "opcheck",
                               "trap 1 (undeclared mutation): the kernel writes an argument that the schema does not"),
    # trap 2: a kernel that returns its output transposed (shape), or in the transposed layout (strides)
    "transposed_shape": ("    return out.transpose(-1, -2).contiguous()", "matches_reference",
                         "trap 2 (fake kernel): output 0's shape: fake says (8, 3), the kernel returned (3, 8)"),
    "transposed_layout": ("    return out.transpose(-1, -2).contiguous().transpose(-1, -2)", "matches_reference",
                          "trap 2 (fake kernel): output 0's strides: fake says (3, 1), the kernel returned (1, 8)"),
    "opcheck_sees_the_layout": ("    return out.transpose(-1, -2).contiguous().transpose(-1, -2)", "opcheck",
                                "trap 2 (fake kernel): the fake kernel's outputs differ from the kernel's"),
}


@pytest.fixture(scope="module", params=ROUTES)
def repo(request, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp(request.param)
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.format(route=request.param))
    return generate(spec, folder / "repo")


def suite(repo: Path, select: str):
    """The generated suite's tests that `select` names, with the repo's package on the path."""
    result = run_suite(repo, {**os.environ, "PYTHONPATH": str(repo)}, "-k", select)
    print(result.stdout[-4000:])
    return result


def plant(repo: Path, body: str) -> None:
    path = repo / "ktraps/kernels/pairsum.py"
    text = path.read_text()
    path.write_text(text[: text.index("def pairsum_python(")] + KERNEL.format(body=body))


@pytest.mark.parametrize("trap", TRAPS)
def test_a_planted_trap_fails_the_suite_naming_it(repo, trap):
    body, select, message = TRAPS[trap]
    plant(repo, "    return out")  # the right kernel passes what catches the trap
    assert suite(repo, select).returncode == 0
    plant(repo, body)
    result = suite(repo, select)
    assert result.returncode == 1
    assert message in result.stdout


def respec(repo: Path, old: str, new: str) -> None:
    """Change kopgen.yaml and run `kopgen update`, as the user does."""
    spec = repo / "kopgen.yaml"
    spec.write_text(spec.read_text().replace(old, new))
    result = CliRunner().invoke(main, ["update", str(repo)])
    assert result.exit_code == 0, result.output


def test_a_wrong_backward_fails_gradcheck_naming_the_trap(repo):
    plant(repo, "    return out")
    right = 'x: "grad.repeat_interleave(2, -1)"'
    respec(repo, right, 'x: "grad.repeat_interleave(2, -1) * 2"')
    try:
        result = suite(repo, "gradcheck")
        assert result.returncode == 1
        assert "trap 3 (backward): gradcheck failed for 'x': the backward formula disagrees with finite differences" \
            in result.stdout
        result = suite(repo, "backward_matches_reference")
        assert "trap 3 (backward): the gradient of 'x' differs from autograd through the reference" in result.stdout
    finally:
        respec(repo, 'x: "grad.repeat_interleave(2, -1) * 2"', right)


def test_a_missing_backward_is_loud(repo):
    """Without `backward:` kopgen registers an autograd formula that raises: never the seed's silent zero
    gradient. The suite checks that it raises (and passes); a missing formula for one input is a spec error."""
    plant(repo, "    return out")
    backward = '    backward:\n      x: "grad.repeat_interleave(2, -1)"\n'
    respec(repo, backward, "")
    try:
        result = suite(repo, "backward")
        assert result.returncode == 0
        assert "1 passed" in result.stdout  # test_backward_raises_a_clear_error
        text = (repo / "ktraps/_registration.py").read_text()
        assert "ktraps::pairsum is not differentiable: its spec has no backward formulas" in text
    finally:
        fake = '    fake: {shape: "x.shape[:-1] + (x.shape[-1] // 2,)"}\n'
        respec(repo, fake, fake + backward)
