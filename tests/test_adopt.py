"""`kopgen adopt`: an existing kernel repo gets kopgen's files around its own, which stay byte-identical.

tests/adopt_tree/ is such a repo: a README of its own, hand-written kernels (kbook/muladd_kernels.py:
PyTorch on CPU, Triton on CUDA, in the op's own signature) and an unrelated file. The spec binds them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
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
    """examples/adopt_muladd, the adoption walk: an extension repo with its own README and C++ and CUDA
    kernels written before kopgen runs (bound on torch_library) is adopted, builds and passes its suite,
    its files byte-identical throughout; a spec change + `kopgen update` then rewrites kopgen's files only."""
    repo = tmp_path / "adopt_muladd"
    shutil.copytree(Path(__file__).parent.parent / "examples" / "adopt_muladd", repo)
    users = hashes(repo)
    del users["kopgen.yaml"]
    assert set(users) == {"README.md", "csrc/muladd.cpp", "csrc/cuda/muladd.cu"}
    result = run("adopt", repo / "kopgen.yaml")
    assert result.exit_code == 0, result.output
    assert "kept README.md (yours, as it was)" in result.output
    assert not (repo / "extension_cpp/csrc/mymuladd.cpp").exists()  # both devices bound: no skeleton
    installed_suite_passes(repo, tmp_path / "site", at_least=10)
    built = hashes(repo)
    assert all(built[path] == digest for path, digest in users.items())

    spec = (repo / "kopgen.yaml").read_text()
    (repo / "kopgen.yaml").write_text(spec.replace("of one shape.", "of one shape (the repo's own kernels)."))
    result = run("update", repo)
    assert result.exit_code == 0, result.output
    after = hashes(repo)
    changed = {path for path in after if built.get(path) != after[path]}
    state = json.loads((repo / ".kopgen/state.json").read_text())
    assert "extension_cpp/ops.py" in changed  # the new doc reaches the Python API
    assert changed <= {*state["generated"], ".kopgen/state.json", "kopgen.yaml"}
    assert set(after) == set(built) and not set(users) & changed
    assert run("update", repo, "--check").exit_code == 0


def test_a_device_not_bound_keeps_its_skeleton(repo):
    spec = SPEC.replace("        cuda: kbook/muladd_kernels.py:muladd_cuda\n", "")
    (repo / "kopgen.yaml").write_text(spec)
    assert run("adopt", repo / "kopgen.yaml").exit_code == 0
    registration = (repo / "kbook/_registration.py").read_text()
    assert "muladd_cpu_kernel,\n" in registration  # the op defined with the bound CPU kernel
    assert '_muladd.register_kernel(("cuda",), muladd_kernels.muladd_triton)' in registration
    assert "def muladd_triton(" in (repo / "kbook/kernels/muladd.py").read_text()


# An existing stable-ABI C++ function, written before kopgen runs, in the op's own signature (stable types).
AXPY_SPEC = """\
kopgen: 1
package: kaxpy
defaults:
  registration: stable_abi
  backends: {cpu: cpp}
  dtypes: [float32, float64]
ops:
  - schema: "axpy(Tensor x, Tensor y, float alpha) -> Tensor"
    doc: alpha * x + y, by our own function.
    kernel:
      source:
        cpu: csrc/axpy.cpp:axpy_cpu
    reference: "alpha * x + y"
    fake: {shape: x.shape}
    backward:
      x: "grad * alpha"
      y: "grad"
"""
AXPY_CPP = """\
// alpha * x + y on the CPU, against the stable ABI only: one binary for every torch >= 2.10.
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/Exception.h>

namespace kaxpy {
namespace {

template <typename scalar_t>
void axpy_loop(const torch::stable::Tensor& x, const torch::stable::Tensor& y, double alpha,
               torch::stable::Tensor& out) {
  const auto* xs = static_cast<const scalar_t*>(x.const_data_ptr());
  const auto* ys = static_cast<const scalar_t*>(y.const_data_ptr());
  auto* result = static_cast<scalar_t*>(out.mutable_data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i) {
    result[i] = static_cast<scalar_t>(alpha * xs[i] + ys[i]);
  }
}

}  // namespace

torch::stable::Tensor axpy_cpu(const torch::stable::Tensor& x, const torch::stable::Tensor& y,
                               double alpha) {
  STD_TORCH_CHECK(x.numel() == y.numel() && x.scalar_type() == y.scalar_type(),
                  "axpy: x and y must have one shape and dtype");
  const torch::stable::Tensor x_dense = torch::stable::contiguous(x);
  const torch::stable::Tensor y_dense = torch::stable::contiguous(y);
  torch::stable::Tensor out = torch::stable::empty_like(x_dense);
  if (x.scalar_type() == torch::headeronly::ScalarType::Double) {
    axpy_loop<double>(x_dense, y_dense, alpha, out);
  } else {
    axpy_loop<float>(x_dense, y_dense, alpha, out);
  }
  return out;
}

}  // namespace kaxpy
"""


@pytest.mark.slow
def test_a_bound_stable_abi_function_passes_its_suite(tmp_path):
    """A C++ function in stable types bound on stable_abi: declared in kernels.h with the op's own signature,
    wrapped and registered by kopgen, built into the abi3 module; the suite passes and the file is untouched."""
    repo = tmp_path / "kaxpy"
    (repo / "csrc").mkdir(parents=True)
    (repo / "csrc/axpy.cpp").write_text(AXPY_CPP)
    (repo / "kopgen.yaml").write_text(AXPY_SPEC)
    result = run("adopt", repo / "kopgen.yaml")
    assert result.exit_code == 0, result.output
    assert "torch::stable::Tensor axpy_cpu(\n" in (repo / "kaxpy/csrc/kernels.h").read_text()
    assert "return ::kaxpy::axpy_cpu(x, y, alpha);" in (repo / "kaxpy/csrc/ops.cpp").read_text()
    installed_suite_passes(repo, tmp_path / "site", at_least=10)
    assert (repo / "csrc/axpy.cpp").read_text() == AXPY_CPP


def test_kopgens_files_beside_bound_kernels_pass_ruff(repo):
    """The comment above the bound kernels' imports followed `from . import _support` with no blank line:
    ruff's isort (I001) and ruff format wanted one, so the adopted repo's ci.sh failed."""
    assert run("adopt", repo / "kopgen.yaml").exit_code == 0
    generated = ["kbook/_registration.py", "benchmarks/bench_ops.py"]
    assert "# Existing kernels the spec binds" in (repo / generated[0]).read_text()
    for command in (["check", "--select", "E4,E7,E9,F,I"], ["format", "--check", "--diff"]):
        result = subprocess.run([sys.executable, "-m", "ruff", *command, "--no-cache", "--isolated", *generated],
                                cwd=repo, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr


def test_a_packages_empty_init_files_give_way_to_kopgens(repo):
    """Every Python kernel repo has its package's __init__.py, mostly empty: adopt stopped on it ("files stand
    where kopgen writes its own") and the user had to delete it first. An empty file holds nothing to keep."""
    (repo / "kbook/__init__.py").write_text("\n")
    result = run("adopt", repo / "kopgen.yaml")
    assert result.exit_code == 0, result.output
    assert "@generated by kopgen" in (repo / "kbook/__init__.py").read_text() and "wrote kbook/__init__.py" in result.output
    (repo / ".kopgen/state.json").unlink()
    (repo / "kbook/__init__.py").write_text("VERSION = 1\n")  # one with code is still the user's to move
    result = run("adopt", repo / "kopgen.yaml")
    assert result.exit_code == 2 and "kbook/__init__.py" in result.output


ROTARY_SPEC = """\
kopgen: 1
package: kvl
defaults:
  registration: torch_library
  backends: {cpu: cpp}
ops:
  - schema: "rotary_embedding(Tensor positions, Tensor! query, Tensor!? key, int head_size) -> ()"
    kernel:
      source:
        cpu: csrc/pos_encoding.cpp:rotary_embedding
    reference: {query: "query * 2", key: "key * 2"}
"""


@pytest.mark.parametrize("parameters, warned", [
    # vLLM's own: another overload than kernels.h's, so kopgen's call of it failed at import (undefined symbol)
    ("torch::Tensor& positions, torch::Tensor& query, std::optional<torch::Tensor> key, int64_t head_size", True),
    (("const torch::Tensor& positions, torch::Tensor& query, const c10::optional<torch::Tensor>& key, "
      "const int64_t head_size"), False),  # other spellings of kernels.h's types
    ("const at::Tensor& positions, at::Tensor& query, const std::optional<at::Tensor>& key", True),
])
def test_a_bound_function_unlike_its_declaration_is_warned_of(tmp_path, parameters, warned):
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc/pos_encoding.cpp").write_text(
        f"#include <torch/all.h>\nnamespace kvl {{\nvoid rotary_embedding({parameters}) {{\n}}\n}}  // namespace kvl\n")
    (tmp_path / "kopgen.yaml").write_text(ROTARY_SPEC)
    result = CliRunner().invoke(main, ["check", str(tmp_path / "kopgen.yaml")])
    assert result.exit_code == 0, result.output
    assert ("warning: rotary_embedding in 'csrc/pos_encoding.cpp' takes" in result.output) is warned, result.output
