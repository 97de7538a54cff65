"""Generate muladd, install it, run its generated suite; and the seed's Case 1 as a test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from kopgen import generate

from .conftest import EXAMPLES

pytestmark = pytest.mark.slow


def install(tmp_path_factory, example: str):
    """The example's generated repo, installed (pip, no build isolation) into a folder of its own."""
    root = tmp_path_factory.mktemp("e2e")
    repo = generate(EXAMPLES / example, root / "repo")
    site = root / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(repo)],
        check=True,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    return repo, env


@pytest.fixture(scope="module")
def installed_muladd(tmp_path_factory):
    return install(tmp_path_factory, "muladd.yaml")


@pytest.mark.parametrize("example", ["muladd.yaml", "activations.yaml"])
def test_generated_suite_passes(tmp_path_factory, example):
    repo, env = install(tmp_path_factory, example)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"],
        cwd=repo, env=env, capture_output=True, text=True, check=False,
    )
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed and int(passed.group(1)) >= 30  # the CPU half of the suite; CUDA tests skip here


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


def test_case_1_the_gradient_that_vanished_is_back(installed_muladd):
    _, env = installed_muladd
    result = subprocess.run([sys.executable, "-c", CASE_1], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "case 1 ok" in result.stdout
