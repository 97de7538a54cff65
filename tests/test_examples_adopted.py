"""The example kernel repos, adopted as a user would: each copied, `kopgen adopt kopgen.yaml` run
in it, the user's files (kernels, README) left byte-identical, the package installed (the C++ ones
built) and its generated suite passing on CPU (Triton's interpreter runs the Triton kernels)."""

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


def adopted(name: str, tmp_path: Path, monkeypatch, kept: int) -> Path:
    """examples/NAME copied and adopted: `kept` files of the user's reported kept, each byte-identical."""
    # A fresh compile cache: AOTAutograd's cache does not key on a custom op's registered backward,
    # so a graph cached by an earlier build of this package (another backward formula) would be reused.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    repo = tmp_path / name
    shutil.copytree(EXAMPLES / name, repo)
    before = hashes(repo)
    result = CliRunner().invoke(main, ["adopt", str(repo / "kopgen.yaml")])
    assert result.exit_code == 0, result.output
    assert len([line for line in result.output.splitlines() if line.startswith("kept ")]) == kept, result.output
    assert {path: digest for path, digest in hashes(repo).items() if path in before} == before
    return repo


def passed(result, test: str) -> bool:
    return f"PASSED tests/{test}" in result.stdout


def test_llm_triton_adopted_passes_its_suite(tmp_path, monkeypatch):
    repo = adopted("llm_triton", tmp_path, monkeypatch, kept=5)  # README.md and the four kernel files
    # silu_and_mul (triton_op, mutating), rms_norm and its fused backward (triton_op), cross_entropy_forward
    # (custom_op): CUDA tests skip here.
    # at_least: the dynamic compile's grown sample keeps out at half of input's width (tests.py's grown_sample)
    result = installed_suite_passes(repo, tmp_path / "site", "-rA", at_least=117)
    for backend in ("aot_eager", "inductor"):
        assert f"PASSED tests/test_silu_and_mul.py::TestSiluAndMul::test_compile_fullgraph[cpu-{backend}-dynamic]" in result.stdout


def test_llm_adopted_builds_and_passes_its_suite(tmp_path, monkeypatch):
    """torch_library, C++ kernels: silu_and_mul and static_scaled_fp8_quant (mutating), rms_norm with its
    fused backward op, rotary_embedding (mutating, with a `Tensor!?` key)."""
    repo = adopted("llm", tmp_path, monkeypatch, kept=10)  # a .cpp and a .cu per op
    result = installed_suite_passes(repo, tmp_path / "site", "-rA", at_least=140)  # 147 here
    for dtype in ("float32", "float16", "bfloat16"):
        # the mutating ops through opcheck, key given and left out, empty and strided samples
        for sample in ("normal", "empty", "noncontiguous", "without_key"):
            assert passed(result, f"test_rotary_embedding.py::TestRotaryEmbedding::test_opcheck[cpu-torch.{dtype}-{sample}-False]")
            assert passed(result, f"test_rotary_embedding.py::TestRotaryEmbedding::test_matches_reference[cpu-torch.{dtype}-{sample}]")
        for sample in ("normal", "empty", "noncontiguous"):
            assert passed(result, f"test_silu_and_mul.py::TestSiluAndMul::test_opcheck[cpu-torch.{dtype}-{sample}-False]")
            # result is float8_e4m3fn whatever the input's dtype
            fp8 = "test_static_scaled_fp8_quant.py::TestStaticScaledFp8Quant"
            assert passed(result, f"{fp8}::test_opcheck[cpu-torch.{dtype}-{sample}-False]")
            assert passed(result, f"{fp8}::test_matches_reference[cpu-torch.{dtype}-{sample}]")
        # rms_norm's gradients through rms_norm_backward, the op's own kernel, also of an empty input
        assert passed(result, f"test_rms_norm.py::TestRmsNorm::test_opcheck[cpu-torch.{dtype}-empty-True]")
    assert passed(result, "test_rms_norm.py::TestRmsNorm::test_gradcheck[cpu-normal]")
    assert passed(result, "test_rms_norm.py::TestRmsNorm::test_backward_matches_reference[cpu]")
    assert passed(result, "test_rms_norm_backward.py::TestRmsNormBackward::test_matches_reference[cpu-torch.float32-empty]")


def test_llm_stable_adopted_builds_and_passes_its_suite(tmp_path, monkeypatch):
    """stable_abi: fused_add_rms_norm writes both input and residual."""
    repo = adopted("llm_stable", tmp_path, monkeypatch, kept=2)
    result = installed_suite_passes(repo, tmp_path / "site", "-rA", at_least=24)
    for dtype in ("float32", "float16", "bfloat16"):
        for sample in ("normal", "empty", "noncontiguous"):
            test = f"test_fused_add_rms_norm.py::TestFusedAddRmsNorm::test_opcheck[cpu-torch.{dtype}-{sample}-False]"
            assert passed(result, test)
