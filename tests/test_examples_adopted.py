"""The example kernel repos, adopted as a user would: examples/llm_triton copied, `kopgen adopt
kopgen.yaml` run in it, the user's files (kernels, README) left byte-identical, the package
installed and its generated suite passing on CPU (Triton's interpreter runs the kernels)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen.cli import main

from .conftest import installed_suite_passes

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
def hashes(root: Path) -> dict[Path, str]:
    return {p.relative_to(root): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}


def test_llm_triton_adopted_passes_its_suite(tmp_path, monkeypatch):
    # A fresh compile cache: AOTAutograd's cache does not key on a custom op's registered backward,
    # so a graph cached by an earlier build of this package (another backward formula) would be reused.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    repo = tmp_path / "llm_triton"
    shutil.copytree(EXAMPLES / "llm_triton", repo)
    before = hashes(repo)
    result = CliRunner().invoke(main, ["adopt", str(repo / "kopgen.yaml")])
    assert result.exit_code == 0, result.output
    kept = [line for line in result.output.splitlines() if line.startswith("kept ")]
    assert len(kept) == 5, result.output  # README.md and the four kernel files
    assert {path: digest for path, digest in hashes(repo).items() if path in before} == before
    # silu_and_mul (triton_op, mutating), rms_norm and its fused backward (triton_op), cross_entropy_forward
    # (custom_op): CUDA tests skip here.
    # at_least: the dynamic compile's grown sample keeps out at half of input's width (tests.py's grown_sample)
    result = installed_suite_passes(repo, tmp_path / "site", "-rA", at_least=117)
    for backend in ("aot_eager", "inductor"):
        assert f"PASSED tests/test_silu_and_mul.py::TestSiluAndMul::test_compile_fullgraph[cpu-{backend}-dynamic]" in result.stdout
