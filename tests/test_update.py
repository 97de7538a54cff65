"""kopgen update: spec edits reach the repo, the user's lines never get lost."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen import generate
from kopgen import update as update_module
from kopgen.cli import main

from .conftest import cpu_bound, cpu_seconds, slowness

BASE = """\
kopgen: 1
package: kwalk
defaults:
  registration: custom_op
  backends: {cpu: python}
  dtypes: [float32, float64]
ops:
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    compute: "a * b + c"
    backward:
      a: "grad * b"
      b: "grad * a"
  - schema: "pairsum(Tensor x) -> Tensor"
    kernel: custom
    reference: "x.unflatten(-1, (-1, 2)).sum(-1)"
    fake: {shape: "x.shape[:-1] + (x.shape[-1] // 2,)"}
"""

MY_TEST = '''\
import torch

import kwalk


def test_mine():
    assert torch.equal(kwalk.muladd(torch.ones(2), torch.ones(2), 1.0), torch.full((2,), 2.0))
'''


def update(repo: Path, *flags: str):
    return CliRunner().invoke(main, ["update", str(repo), *flags])


def suite(repo: Path, *args: str) -> str:
    """The repo's suite from its sources; the AOTInductor and wheel tests (a C++ compile; a build, a venv
    and the suite again) are test_end_to_end's."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "--ignore=tests/test_aoti.py",
         "--ignore=tests/test_wheel.py", *args],
        cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return result.stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    spec = tmp_path / "kwalk.yaml"
    spec.write_text(BASE)
    return generate(spec, tmp_path / "repo")


def edit_spec(repo: Path, old: str, new: str) -> None:
    spec = repo / "kopgen.yaml"
    text = spec.read_text()
    assert old in text
    spec.write_text(text.replace(old, new))


def test_check_is_a_drift_gate(repo):
    assert update(repo, "--check").exit_code == 0
    edit_spec(repo, 'compute: "a * b + c"', 'compute: "a * b - c"')
    result = update(repo, "--check")
    assert result.exit_code == 1
    assert "would update kwalk/reference.py" in result.output
    assert "a * b - c" not in (repo / "kwalk/reference.py").read_text()  # --check writes nothing


def test_dry_run_prints_the_diff_and_writes_nothing(repo):
    edit_spec(repo, 'compute: "a * b + c"', 'compute: "a * b - c"')
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    result = update(repo, "--dry-run")
    assert result.exit_code == 0
    assert "-    return (a * b + c).to(dtype)\n+    return (a * b - c).to(dtype)" in result.output
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()} == before


def test_unchanged_spec_rewrites_nothing(repo):
    stamps = {p: p.stat().st_mtime_ns for p in repo.rglob("*") if p.is_file()}
    time.sleep(0.01)
    result = update(repo)
    assert result.exit_code == 0 and result.output.strip() == "up to date"
    assert {p: p.stat().st_mtime_ns for p in repo.rglob("*") if p.is_file()} == stamps


@pytest.mark.slow
def test_a_walk_through_spec_edits_keeps_every_hand_edit(repo):
    """Add an op, an argument, a backward; change the route; remove an op. Between the steps
    the user edits README, writes the custom kernel and a test of their own; all survive, and
    the generated suite passes after each step (torch.compile tests at the last one)."""
    readme = repo / "README.md"
    readme.write_text(readme.read_text() + "\nMy notes: keep these.\n")
    (repo / "tests/test_mine.py").write_text(MY_TEST)
    kernel = repo / "kwalk/kernels/pairsum.py"
    kernel.write_text(kernel.read_text().replace(
        '    """The PyTorch reference as a kernel, written into outputs allocated as `fake` describes."""\n',
        '    """The PyTorch reference as a kernel, written into outputs allocated as `fake` describes."""\n'
        "    # my edit: checked by the user\n",
    ))
    user_lines = ["My notes: keep these.", "# my edit: checked by the user"]

    def step(old: str, new: str, *suite_args: str) -> str:
        edit_spec(repo, old, new)
        result = update(repo)
        assert result.exit_code == 0, result.output
        assert update(repo, "--check").exit_code == 0  # and now up to date
        assert all(line in readme.read_text() + kernel.read_text() for line in user_lines)
        assert (repo / "tests/test_mine.py").read_text() == MY_TEST
        suite(repo, *suite_args)
        return result.output

    # add an op
    step("ops:\n", 'ops:\n  - schema: "mymul(Tensor a, Tensor b) -> Tensor"\n    compute: "a * b"\n', "-k", "not compile")
    assert (repo / "tests/test_mymul.py").exists()
    # add an argument with a default
    step('"mymul(Tensor a, Tensor b) -> Tensor"\n    compute: "a * b"',
         '"mymul(Tensor a, Tensor b, float s=2.0) -> Tensor"\n    compute: "a * b * s"', "-k", "not compile")
    assert "s: float = 2.0" in (repo / "kwalk/ops.py").read_text()
    # add a backward
    step('compute: "a * b * s"\n', 'compute: "a * b * s"\n    backward:\n      a: "grad * b * s"\n      b: "grad * a * s"\n',
         "-k", "not compile")
    assert "_mymul_backward" in (repo / "kwalk/_registration.py").read_text()
    # change the route
    step("registration: custom_op", "registration: library", "-k", "not compile")
    assert "_lib.define(" in (repo / "kwalk/_registration.py").read_text()
    # remove an op: its generated files go, the user's kernel stays
    output = step(BASE[BASE.index('  - schema: "pairsum'):], "")
    assert not (repo / "tests/test_pairsum.py").exists()
    assert kernel.exists() and "kept kwalk/kernels/pairsum.py" in output


def test_an_op_removed_then_added_back_takes_the_kept_kernel_back(repo):
    """The kept kernel of a removed op stood in the way of its op's return: "files kopgen did not write
    stand where it writes", and --force the only way on, which put the skeleton over the user's kernel."""
    kernel = repo / "kwalk/kernels/pairsum.py"
    kernel.write_text(kernel.read_text() + "# MY LINE\n")
    entry = BASE[BASE.index('  - schema: "pairsum'):]
    edit_spec(repo, entry, "")
    result = update(repo)
    assert result.exit_code == 0 and "kept kwalk/kernels/pairsum.py" in result.output, result.output
    edit_spec(repo, "ops:\n", "ops:\n" + entry)
    result = update(repo)
    assert result.exit_code == 0, result.output
    assert "created tests/test_pairsum.py" in result.output and "updated kwalk/ops.py" in result.output
    assert kernel.read_text().endswith("# MY LINE\n") and not (repo / ".kopgen/backup").exists()
    assert (repo / "tests/test_pairsum.py").exists() and update(repo, "--check").exit_code == 0


def test_an_op_added_beside_an_in_place_one_never_takes_its_files(tmp_path):
    """`neg` added beside `neg_` (stem `neg`: csrc/neg.cpp, neg_cpu) took neg_'s names: neg_'s kernel became a
    new skeleton csrc/neg_inplace.cpp, and neg's skeleton was merged into the user's kernel of neg_. The
    stems the files were written under are kept in the state: the newcomer is `neg_functional`."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text("kopgen: 1\npackage: kstem\ndefaults: {registration: torch_library, backends: {cpu: cpp}}\n"
                    'ops:\n  - schema: "neg_(Tensor! x) -> ()"\n    kernel: custom\n    reference: {x: "-x"}\n')
    repo = generate(spec, tmp_path / "repo")
    kernel = repo / "kstem/csrc/neg.cpp"
    kernel.write_text(kernel.read_text() + "// my kernel of neg_\n")
    (repo / "kopgen.yaml").write_text(spec.read_text() + '  - schema: "neg(Tensor x) -> Tensor"\n    kernel: custom\n'
                                      '    reference: "-x"\n    fake: {shape: x.shape}\n')
    result = update(repo)
    assert result.exit_code == 0, result.output
    assert "created kstem/csrc/neg_functional.cpp" in result.output and "neg_inplace" not in result.output
    assert kernel.read_text().endswith("// my kernel of neg_\n")
    header = (repo / "kstem/csrc/kernels.h").read_text()
    assert "void neg_cpu(at::Tensor& x);" in header and "void neg_functional_cpu(const at::Tensor& x, at::Tensor& out);" in header
    assert update(repo, "--check").exit_code == 0
    # A new repo of both ops names them as before: the in-place one steps aside.
    fresh = generate(repo / "kopgen.yaml", tmp_path / "fresh")
    assert (fresh / "kstem/csrc/neg_inplace.cpp").exists() and (fresh / "kstem/csrc/neg.cpp").exists()


def test_a_renamed_package_says_where_the_custom_kernel_goes_now(repo):
    """After the package was renamed, update said the custom kernel's op "is gone from kopgen.yaml" (it
    was not) and wrote a new skeleton at the new path without a word."""
    kernel = repo / "kwalk/kernels/pairsum.py"
    kernel.write_text(kernel.read_text() + "# MY LINE\n")
    edit_spec(repo, "package: kwalk\n", "package: kwalk2\n")
    result = update(repo)
    assert result.exit_code == 0, result.output
    assert ("kept kwalk/kernels/pairsum.py (yours): its op's kernel is now kwalk2/kernels/pairsum.py, a new "
            "skeleton: move your code there") in result.output
    assert kernel.read_text().endswith("# MY LINE\n")


def test_conflict_leaves_markers_and_exits_1(repo):
    readme = repo / "README.md"
    text = readme.read_text()
    line = next(line for line in text.splitlines() if line.startswith("PyTorch operators"))
    readme.write_text(text.replace(line, line + " Mine too."))  # the line kopgen is about to change
    edit_spec(repo, "ops:\n", 'ops:\n  - schema: "mymul(Tensor a, Tensor b) -> Tensor"\n    compute: "a * b"\n')
    result = update(repo)
    assert result.exit_code == 1
    assert "README.md" in result.output and "<<<<<<< markers" in result.output
    merged = readme.read_text()
    assert "<<<<<<< yours" in merged and ">>>>>>> new kopgen render" in merged and "Mine too." in merged
    # Until the markers are gone, update and update --check say so (they said "up to date", exit 0),
    # and write nothing, even with a spec edited again.
    edit_spec(repo, 'compute: "a * b"', 'compute: "a * b * 2"')
    for flags in ((), ("--check",), ("--force",)):
        result = update(repo, *flags)
        assert result.exit_code == 1, (flags, result.output)
        assert "conflicts of the last kopgen update are not resolved in README.md" in result.output
    assert readme.read_text() == merged and "a * b * 2" not in (repo / "kwalk/reference.py").read_text()
    # One marker left is no resolution either.
    readme.write_text("\n".join(line for line in merged.splitlines() if not line.startswith(("<<<", "==="))))
    assert update(repo).exit_code == 1
    readme.write_text("\n".join(line for line in merged.splitlines() if not line.startswith(("<<<", "===", ">>>"))))
    result = update(repo)
    assert result.exit_code == 0, result.output
    assert "a * b * 2" in (repo / "kwalk/reference.py").read_text() and "Mine too." in readme.read_text()


def test_hand_edited_generated_file_stops_the_update(repo):
    ops = repo / "kwalk/ops.py"
    ops.write_text(ops.read_text() + "# my hack\n")
    edit_spec(repo, 'compute: "a * b + c"', 'compute: "a * b - c"')
    result = update(repo)
    assert result.exit_code == 1
    assert "kwalk/ops.py" in result.output and "+# my hack" not in result.output
    assert "-# my hack" in result.output  # the diff shows what would be lost
    assert ops.read_text().endswith("# my hack\n")
    assert "a * b + c" in (repo / "kwalk/reference.py").read_text()  # nothing written
    result = update(repo, "--force")
    assert result.exit_code == 0, result.output
    assert "# my hack" not in ops.read_text()
    assert (repo / ".kopgen/backup/1/kwalk/ops.py").read_text().endswith("# my hack\n")


def test_an_interrupted_update_leaves_old_or_new_files_and_the_next_finishes(repo, tmp_path, monkeypatch):
    edit_spec(repo, "ops:\n", 'ops:\n  - schema: "mymul(Tensor a, Tensor b) -> Tensor"\n    compute: "a * b"\n')
    clean = tmp_path / "clean"
    subprocess.run(["cp", "-r", str(repo), str(clean)], check=True)
    assert update(clean).exit_code == 0
    expected = {p.relative_to(clean): p.read_bytes() for p in clean.rglob("*") if p.is_file()}
    before = {p.relative_to(repo): p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    real = update_module.replace_file
    writes = len(update_module.plan_update(repo).writes) + 1  # the files, then the state
    for stop_at in range(writes):
        for path in [p for p in repo.rglob("*") if p.is_file() and p.relative_to(repo) not in before]:
            path.unlink()  # back to the repo before any update
        for relative, content in before.items():
            (repo / relative).write_bytes(content)
        calls = []

        def failing(root, relative, text, calls=calls, stop_at=stop_at):
            if len(calls) == stop_at:
                raise OSError("disk full")
            calls.append(relative)
            real(root, relative, text)

        monkeypatch.setattr(update_module, "replace_file", failing)
        result = update(repo)
        assert result.exit_code != 0
        for path in (p for p in repo.rglob("*") if p.is_file()):
            relative = path.relative_to(repo)
            assert path.read_bytes() in (before.get(relative), expected.get(relative)), relative
        monkeypatch.setattr(update_module, "replace_file", real)
    assert update(repo).exit_code == 0
    assert {p.relative_to(repo): p.read_bytes() for p in repo.rglob("*") if p.is_file()} == expected


def test_bad_spec_in_update_is_reported_at_its_node(repo):
    edit_spec(repo, 'compute: "a * b + c"', 'compute: "a * b + d"')
    result = update(repo)
    assert result.exit_code == 2
    assert re.search(r"kopgen\.yaml:\d+:\d+: error: unknown name 'd'", result.output)


def test_noop_update_of_50_ops_takes_under_a_second_of_cpu(tmp_path):
    ops = "".join(f'  - schema: "op{i}(Tensor a, Tensor b) -> Tensor"\n    compute: "a * b + {i}"\n' for i in range(50))
    spec = tmp_path / "k50.yaml"
    spec.write_text("kopgen: 1\npackage: k50\ndefaults:\n  backends: {cpu: python}\nops:\n" + ops)
    repo = generate(spec, tmp_path / "repo")
    timings = []
    for _ in range(3):
        result, cpu = cpu_seconds([sys.executable, "-m", "kopgen", "update", str(repo)])
        timings.append(cpu)
        assert result.returncode == 0 and result.stdout.strip() == "up to date", result.stderr
    print(f"no-op update of 50 ops: best of 3 {min(timings):.3f} s of CPU, slowness {slowness():.2f}")
    assert min(timings) < cpu_bound(1.0)  # 0.42 s on a quiet machine with the other core busy


def test_update_never_writes_through_a_symlink_out_of_the_repo(repo, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("not yours\n")
    readme = repo / "README.md"
    readme.unlink()
    readme.symlink_to(outside)  # the merge would write README.md: through the link, outside the repo
    edit_spec(repo, "ops:\n", 'ops:\n  - schema: "mymul(Tensor a, Tensor b) -> Tensor"\n    compute: "a * b"\n')
    result = update(repo)
    assert result.exit_code == 2 and "outside the repo" in result.output
    assert outside.read_text() == "not yours\n"


def test_an_argument_added_to_a_written_triton_kernel_merges_cleanly(tmp_path):
    """The skeleton's `raise` (which its user deletes) stood right above the output allocation, which kopgen
    rewrites when an argument is added: git merge-file saw the two changes touch and left conflict markers in
    the most common update of all. The merge now leaves the deleted placeholder out of base and kopgen's side."""
    from .conftest import EXAMPLES, write_pairsum_kernel

    spec = tmp_path / "kopgen.yaml"
    spec.write_text((EXAMPLES / "custom.yaml").read_text())
    repo = generate(spec, tmp_path / "repo")
    kernel = repo / "kcustom/kernels/pairsum.py"
    write_pairsum_kernel(kernel)
    edit_spec(repo, '"pairsum(Tensor x) -> Tensor"', '"pairsum(Tensor x, float scale=1.0) -> Tensor"')
    result = update(repo)
    assert result.exit_code == 0, result.output
    text = kernel.read_text()
    assert "<<<<<<<" not in text and "raise NotImplementedError" not in text and "pairs = 2 * offsets" in text
    assert "out = _support.pairsum_output(x, scale)" in text


def test_an_argument_added_to_a_written_cpp_kernel_merges_cleanly(tmp_path):
    """The C++ skeleton's check (which its user replaces with the body) stood right under the signature,
    which kopgen rewrites when an argument is added: conflict markers, as in the Triton skeleton. A placeholder
    the user kept is merged as before."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text("kopgen: 1\npackage: kf\ndefaults:\n  registration: torch_library\n  backends: {cpu: cpp}\nops:\n"
                    '  - schema: "twice(Tensor x) -> Tensor"\n    kernel: custom\n    reference: "x * 2"\n'
                    "    fake: {shape: x.shape}\n")
    repo = generate(spec, tmp_path / "repo")
    kernel = repo / "kf/csrc/twice.cpp"
    text = kernel.read_text()
    kernel.write_text(re.sub(r"  TORCH_CHECK\(false, .*\);\n", "  out.copy_(x * 2);\n", text))
    edit_spec(repo, '"twice(Tensor x) -> Tensor"', '"twice(Tensor x, float s=2.0) -> Tensor"')
    result = update(repo)
    assert result.exit_code == 0, result.output
    text = kernel.read_text()
    assert "<<<<<<<" not in text and "out.copy_(x * 2);" in text and "TORCH_CHECK" not in text
    assert "void twice_cpu(const at::Tensor& x, double s, at::Tensor& out) {" in text
    kept = "void f(int a) {\n  TORCH_CHECK(false, \"k::f: write its CPU kernel in k/csrc/f.cpp\");\n}\n"
    assert update_module.without_deleted_placeholder(kept, kept, kept.replace("int a", "int a, int b")) == (
        kept, kept.replace("int a", "int a, int b"))
    # a new render without a placeholder (another kind of file): the plain merge, which never drops the body
    written, gone = kept.replace("TORCH_CHECK", "body(); // TORCH_CHECK"), "void f(int a, int b) {\n}\n"
    assert update_module.without_deleted_placeholder(written, kept, gone) == (kept, gone)


def test_the_generated_suite_compiles_without_torchs_autograd_cache(repo):
    """torch's AOTAutograd cache keys a graph by the graph, not by how its ops are registered: after a route
    change (triton_op to custom_op here, by hand), the inductor tests loaded a graph from before that called
    the op's `_<op>_cpu`, now gone ("'_OpNamespace' 'ktri' object has no attribute '_square_cpu'"). An Inductor
    compile of each route to show it costs too much here; the generated conftest turns the cache off."""
    conftest = (repo / "tests/conftest.py").read_text()
    assert "    from torch._functorch import config\n\n    config.enable_autograd_cache = False\n" in conftest
