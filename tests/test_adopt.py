"""`kopgen adopt`: an existing kernel repo gets kopgen's files around its own, which stay byte-identical.

tests/adopt_tree/ is such a repo: a README of its own, hand-written kernels (kbook/muladd_kernels.py:
PyTorch on CPU, Triton on CUDA, in the op's own signature) and an unrelated file. The spec binds them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen.cli import main

from .conftest import installed_suite_passes

TREE = Path(__file__).parent / "adopt_tree"
SPEC = """\
kopgen: 1
package: kbook
ops:
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    doc: Fused a * b + c, with our own kernels.
    backends: {cpu: python, cuda: triton}
    kernel:
      source:
        cpu: kbook/muladd_kernels.py:muladd_cpu
        cuda: kbook/muladd_kernels.py:muladd_cuda
    reference: "a * b + c"
    fake: {shape: a.shape}
"""
USERS = ["README.md", "kbook/muladd_kernels.py", "notes/benchmarks.txt"]


def hashes(root: Path) -> dict[str, str]:
    """Every file under `root` (relative path -> SHA-256 of its bytes)."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def repo(tmp_path) -> Path:
    """A copy of the existing repo, with the spec that binds its kernels."""
    root = tmp_path / "kbook-kernels"
    shutil.copytree(TREE, root)
    (root / "kopgen.yaml").write_text(SPEC)
    return root


def test_adopt_keeps_the_users_files_and_writes_kopgens(repo):
    before = hashes(repo)
    result = run("adopt", repo / "kopgen.yaml")
    assert result.exit_code == 0, result.output
    after = hashes(repo)
    for path in [*USERS, "kopgen.yaml"]:  # byte-identical, the spec too
        assert after[path] == before[path], path
    assert "kept README.md (yours, as it was)" in result.output
    for path in ["kbook/_registration.py", "kbook/ops.py", "tests/test_muladd.py", "pyproject.toml", ".kopgen/state.json"]:
        assert path in after and f"wrote {path}" in result.output
    assert "kbook/kernels/muladd.py" not in after  # both devices are bound: no skeleton
    registration = (repo / "kbook/_registration.py").read_text()
    assert "from .muladd_kernels import muladd_cpu as muladd_cpu_kernel" in registration
    assert '_muladd.register_kernel(("cuda",), muladd_cuda_kernel)' in registration
    state = json.loads((repo / ".kopgen/state.json").read_text())
    assert state["adopted"] == ["README.md"]
    assert not set(USERS) & set(state["generated"])


def test_check_names_the_bound_kernels(repo):
    result = run("check", repo / "kopgen.yaml")
    assert result.exit_code == 0, result.output
    assert ("kernels:  cpu: python (bound: kbook/muladd_kernels.py:muladd_cpu), "
            "cuda: triton (bound: kbook/muladd_kernels.py:muladd_cuda)") in result.output


def test_new_here_is_adopt(repo):
    result = run("new", "--here", repo / "kopgen.yaml")
    assert result.exit_code == 0, result.output
    assert (repo / "kbook/_registration.py").is_file()
    assert run("new", "--here", repo / "kopgen.yaml", "-o", repo / "x").exit_code == 2


def test_a_file_where_kopgen_writes_its_own_stops_adopt(repo):
    (repo / "kbook/ops.py").write_text("# our old Python API\n")
    (repo / "tests").mkdir()
    (repo / "tests/conftest.py").write_text("# our fixtures\n")
    before = hashes(repo)
    result = run("adopt", repo / "kopgen.yaml")
    assert result.exit_code == 2, result.output
    assert "kbook/ops.py" in result.output and "tests/conftest.py" in result.output
    assert "nothing was written" in result.output
    assert hashes(repo) == before
    assert sorted(p.name for p in repo.iterdir()) == sorted(["README.md", "kbook", "kopgen.yaml", "notes", "tests"])


def test_kopgen_update_after_adopt_changes_only_kopgens_files(repo):
    assert run("adopt", repo / "kopgen.yaml").exit_code == 0
    (repo / "README.md").write_text((repo / "README.md").read_text() + "\nA line we added after adopting.\n")
    before = hashes(repo)
    spec = SPEC.replace("    reference:", "    dtypes: [float32, float64]\n    reference:")
    (repo / "kopgen.yaml").write_text(spec)
    result = run("update", repo)
    assert result.exit_code == 0, result.output
    after = hashes(repo)
    changed = {path for path in after if before.get(path) != after[path]}
    state = json.loads((repo / ".kopgen/state.json").read_text())
    assert changed and changed <= {*state["generated"], ".kopgen/state.json", "kopgen.yaml"}
    assert "tests/test_muladd.py" in changed  # the new dtype reaches the generated tests
    assert set(after) == set(before)
    assert run("update", repo, "--check").exit_code == 0


def test_a_spec_named_otherwise_is_copied_to_kopgen_yaml(repo):
    (repo / "kopgen.yaml").rename(repo / "ops.yaml")
    result = run("adopt", repo / "ops.yaml")
    assert result.exit_code == 0, result.output
    assert "kopgen update reads the spec from kopgen.yaml (a copy of ops.yaml)" in result.output
    assert (repo / "ops.yaml").read_text() == SPEC
    assert (repo / "kopgen.yaml").read_text().endswith(SPEC)
    assert run("update", repo, "--check").exit_code == 0


def test_another_kopgen_yaml_beside_the_spec_stops_adopt(repo):
    (repo / "kopgen.yaml").rename(repo / "ops.yaml")
    (repo / "kopgen.yaml").write_text(SPEC.replace("muladd(", "other("))
    before = hashes(repo)
    result = run("adopt", repo / "ops.yaml")
    assert result.exit_code == 2 and "is another spec" in result.output
    assert hashes(repo) == before


def test_a_kopgen_repo_is_updated_not_adopted(repo):
    assert run("adopt", repo / "kopgen.yaml").exit_code == 0
    result = run("adopt", repo / "kopgen.yaml")
    assert result.exit_code == 2 and "run kopgen update there" in result.output


def test_new_elsewhere_refuses_a_spec_that_binds_kernels(repo, tmp_path):
    result = run("new", repo / "kopgen.yaml", "-o", tmp_path / "elsewhere")
    assert result.exit_code == 2 and "kopgen adopt" in result.output
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.slow
def test_the_adopted_repo_with_bound_kernels_passes_its_suite(repo, tmp_path):
    assert run("adopt", repo / "kopgen.yaml").exit_code == 0
    installed_suite_passes(repo, tmp_path / "site", at_least=10)


@pytest.mark.slow
def test_the_adopted_extension_repo_builds_and_passes_its_suite(tmp_path):
    """examples/adopt_muladd: an extension repo whose C++ and CUDA kernels exist before kopgen runs."""
    repo = tmp_path / "adopt_muladd"
    shutil.copytree(Path(__file__).parent.parent / "examples" / "adopt_muladd", repo)
    before = hashes(repo)
    result = run("adopt", repo / "kopgen.yaml")
    assert result.exit_code == 0, result.output
    assert all(hashes(repo)[path] == digest for path, digest in before.items())
    installed_suite_passes(repo, tmp_path / "site", at_least=10)


def test_a_device_not_bound_keeps_its_skeleton(repo):
    spec = SPEC.replace("        cuda: kbook/muladd_kernels.py:muladd_cuda\n", "")
    (repo / "kopgen.yaml").write_text(spec)
    assert run("adopt", repo / "kopgen.yaml").exit_code == 0
    registration = (repo / "kbook/_registration.py").read_text()
    assert "muladd_cpu_kernel,\n" in registration  # the op defined with the bound CPU kernel
    assert '_muladd.register_kernel(("cuda",), muladd_kernels.muladd_triton)' in registration
    assert "def muladd_triton(" in (repo / "kbook/kernels/muladd.py").read_text()
