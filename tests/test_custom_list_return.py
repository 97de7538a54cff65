"""`-> Tensor[]` from a `kernel: custom` op: a list as long as its `fake`, on the Python routes."""

from __future__ import annotations

import textwrap

import pytest

from kopgen import generate

from .conftest import ROOT, installed_suite_passes

SPEC = ROOT / "tests/specs/custom_tensor_list_return.yaml"

# What a user writes in kernels/split_stats.py: the two outputs as one list.
KERNEL = textwrap.dedent('''\
    from __future__ import annotations

    import torch
    from torch import Tensor


    def split_stats_python(x: Tensor, scale: float) -> list[Tensor]:
        return [(x * scale).contiguous(), x.to(torch.float32).mean(-1)]  # dense, as `fake` says
''')


def test_list_return_is_a_list_everywhere(tmp_path):
    """The API, kernel, reference and allocator are annotated and return `list[Tensor]`."""
    repo = generate(SPEC, tmp_path / "repo")
    package = repo / "klist"
    assert "def split_stats(x: Tensor, scale: float) -> list[Tensor]:" in (package / "ops.py").read_text()
    assert "return [output.copy_(want) for output, want in zip(outputs, expected, strict=True)]" in (
        package / "kernels/split_stats.py").read_text()
    assert "    return [output.to(dtype) for output, dtype in zip(outputs, dtypes, strict=True)]" in (
        package / "reference.py").read_text()
    assert "    return [\n        torch.empty(x.shape, dtype=x.dtype" in (package / "_support.py").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("registration", ["custom_op", "library"])
def test_list_return_suite_passes(tmp_path, registration):
    """The generated suite passes with a kernel written here, comparing the list element by element."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(SPEC.read_text().replace("defaults:\n", f"defaults:\n  registration: {registration}\n"))
    repo = generate(spec, tmp_path / "repo")
    (repo / "klist/kernels/split_stats.py").write_text(KERNEL)
    result = installed_suite_passes(repo, tmp_path / "site", "-rA", at_least=10)
    assert "PASSED tests/test_split_stats.py::TestSplitStats::test_opcheck" in result.stdout
