"""kopgen update and the writer, as an exploratory run of 2026-12-05 broke them: a lone CR, a locale
that is not UTF-8, a write killed before the state, kopgen's unedited kernel under an op gone custom, an
adopted kernel under an op gone `compute`, a spec value that reads as a conflict marker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen import generate, writer
from kopgen.cli import main
from kopgen.state import STATE_PATH

from .test_update import BASE, edit_spec, update
from .test_update_safety import refused, snapshot


@pytest.fixture
def repo(tmp_path) -> Path:
    spec = tmp_path / "kwalk.yaml"
    spec.write_text(BASE)
    return generate(spec, tmp_path / "repo")


def test_a_lone_carriage_return_of_the_user_stays_one(repo):
    """It became a line break: read and merged in text mode, universal newlines split the user's line."""
    readme = repo / "README.md"
    readme.write_bytes(readme.read_bytes() + b"USER: a\rb\n")
    edit_spec(repo, "ops:\n", 'ops:\n  - schema: "mymul(Tensor a, Tensor b) -> Tensor"\n    compute: "a * b"\n')
    result = update(repo)
    assert result.exit_code == 0, result.output
    merged = readme.read_bytes()
    assert b"USER: a\rb\n" in merged and b"mymul" in merged


def test_a_merge_under_a_locale_that_is_not_utf8_keeps_the_users_text(repo):
    """git merge-file's output was decoded by the locale: a traceback under LC_ALL=C."""
    readme = repo / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "Café ü\n", encoding="utf-8")
    edit_spec(repo, "ops:\n", 'ops:\n  - schema: "mymul(Tensor a, Tensor b) -> Tensor"\n    compute: "a * b"\n')
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    result = subprocess.run([sys.executable, "-m", "kopgen", "update", str(repo)], capture_output=True, env=env,
                            check=False, timeout=300)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert "Café ü\n" in readme.read_text(encoding="utf-8") and "mymul" in readme.read_text(encoding="utf-8")


def test_the_state_is_written_last(tmp_path, monkeypatch):
    """A `kopgen new -o .` or `adopt` killed midway left the state and half the files: update then took the
    missing ones (README, pyproject.toml) for the user's deletions, for good. The state goes last."""
    files = {"README.md": "r\n", STATE_PATH: "{}\n", "a/b.py": "x\n", "z.txt": "z\n"}
    linked: list[str] = []
    link = os.link
    monkeypatch.setattr(os, "link", lambda source, target: (linked.append(Path(target).name), link(source, target)))
    (tmp_path / "existing").mkdir()
    writer.write_into_existing(tmp_path / "existing", files)
    assert linked[-1] == "state.json" and len(linked) == 4
    renamed: list[str] = []
    rename = os.rename
    monkeypatch.setattr(os, "rename", lambda source, target: (renamed.append(Path(target).name), rename(source, target)))
    (tmp_path / "empty").mkdir()
    writer.write_new_repo(tmp_path / "empty", files)
    assert renamed[-1] == ".kopgen", renamed


CUSTOM = '''\
    kernel: custom
    reference: "a * b + c"
    fake: {shape: a.shape}
'''


def test_kopgens_unedited_kernel_becomes_the_skeleton_when_its_op_goes_custom(repo):
    """It stayed, headed `@generated ... do not edit`, calling helpers _support no longer had; no skeleton."""
    kernel = repo / "kwalk/kernels/muladd.py"
    assert "@generated" in kernel.read_text()
    edit_spec(repo, '    compute: "a * b + c"\n', CUSTOM)
    result = update(repo)
    assert result.exit_code == 0, result.output
    assert "@generated" not in kernel.read_text() and "def muladd" in kernel.read_text()
    assert "updated kwalk/kernels/muladd.py" in result.output


def test_kopgens_edited_kernel_stops_the_update_when_its_op_goes_custom(repo):
    """It stayed, edited, `@generated ... do not edit`, calling _support.written_to, gone: AttributeError at the
    first call, and exit 0 from update and --check. As any edited file of kopgen's it would replace, it stops
    the update, named, and --force backs it up before the skeleton goes there."""
    kernel = repo / "kwalk/kernels/muladd.py"
    kernel.write_text(kernel.read_text() + "# tweak\n")
    edited = kernel.read_text()
    edit_spec(repo, '    compute: "a * b + c"\n', CUSTOM)
    before = snapshot(repo)
    output = refused(update(repo, "--check"), 1)
    assert "edited by hand: kwalk/kernels/muladd.py (its op's kernel is now custom" in output, output
    output = refused(update(repo), 1)
    assert ("kwalk/kernels/muladd.py is kopgen's kernel, edited by hand, and its op's kernel is now custom" in output
            and "port your edits into it" in output and "-# tweak" in output), output
    assert snapshot(repo) == before  # nothing written
    result = update(repo, "--force")
    assert result.exit_code == 0, result.output
    assert ("kwalk/kernels/muladd.py is now the skeleton of a custom kernel: port your edits from "
            ".kopgen/backup/1/kwalk/kernels/muladd.py into it") in result.output
    assert (repo / ".kopgen/backup/1/kwalk/kernels/muladd.py").read_text() == edited
    assert "@generated" not in kernel.read_text() and "def muladd" in kernel.read_text()
    assert update(repo, "--check").exit_code == 0


def test_an_adopted_kernel_whose_op_gets_compute_stops_the_update(tmp_path):
    """kopgen never wrote its kernel there, and `--check` said nothing drifted (the path was both adopted
    and kopgen's); the README promises exit 1 naming the file, and --force after a backup."""
    (tmp_path / "kb/kernels").mkdir(parents=True)
    spec = tmp_path / "kopgen.yaml"
    spec.write_text('kopgen: 1\npackage: kb\nops:\n  - schema: "myop(Tensor a, Tensor b) -> Tensor"\n'
                    '    kernel: custom\n    reference: "a * b"\n    fake: {shape: a.shape}\n')
    mine = tmp_path / "kb/kernels/myop.py"
    mine.write_text("# mine\ndef whatever():\n    pass\n")
    assert CliRunner().invoke(main, ["adopt", str(spec)]).exit_code == 0
    spec.write_text(spec.read_text().replace('    kernel: custom\n    reference: "a * b"\n    fake: {shape: a.shape}\n',
                                             '    compute: "a * b"\n'))
    output = refused(update(tmp_path, "--check"), 1)
    assert "kb/kernels/myop.py" in output
    output = refused(update(tmp_path), 1)
    assert "files kopgen did not write stand where it writes: kb/kernels/myop.py" in output
    assert mine.read_text().startswith("# mine")
    result = update(tmp_path, "--force")
    assert result.exit_code == 0, result.output
    assert "@generated" in mine.read_text()
    assert any(p.read_text().startswith("# mine") for p in (tmp_path / ".kopgen/backup").rglob("myop.py"))


def test_unresolved_markers_with_a_broken_spec_are_one_message_not_a_traceback(repo):
    readme = repo / "README.md"
    text = readme.read_text()
    line = next(line for line in text.splitlines() if line.startswith("PyTorch operators"))
    readme.write_text(text.replace(line, line + " Mine too."))
    edit_spec(repo, "ops:\n", 'ops:\n  - schema: "mymul(Tensor a, Tensor b) -> Tensor"\n    compute: "a * b"\n')
    assert update(repo).exit_code == 1  # the conflict
    (repo / "kopgen.yaml").write_text((repo / "kopgen.yaml").read_text() + "  - bad: 1\n")
    for flags in ((), ("--check",), ("--force",)):
        assert "conflicts of the last kopgen update are not resolved" in refused(update(repo, *flags), 1)


def test_a_spec_value_that_reads_as_a_conflict_marker_blocks_nothing(repo):
    """Every file of the user's holding a marker line blocked the update, one the spec put in README too."""
    edit_spec(repo, "package: kwalk\n", 'package: kwalk\ndescription: "<<<<<<< yours"\n')
    for _ in range(2):
        result = update(repo)
        assert result.exit_code == 0, result.output
    assert "\\<" * 7 + " yours" in (repo / "README.md").read_text()  # as text: each `<` escaped


def test_a_file_git_cannot_merge_is_named(repo):
    readme = repo / "README.md"
    readme.write_bytes(readme.read_bytes() + b"nul \x00 byte\n")
    edit_spec(repo, "ops:\n", 'ops:\n  - schema: "mymul(Tensor a, Tensor b) -> Tensor"\n    compute: "a * b"\n')
    output = refused(update(repo), 2)
    assert "cannot merge README.md" in output and b"\x00" in readme.read_bytes()



IN_PLACE = 'kopgen: 1\npackage: kstem\ndefaults: {registration: torch_library, backends: {cpu: cpp}}\nops:\n'
NEG_ = '  - schema: "neg_(Tensor(a!) x) -> ()"\n    kernel: custom\n    reference: {x: "-x"}\n'
NEG = '  - schema: "neg(Tensor x) -> Tensor"\n    kernel: custom\n    reference: "-x"\n    fake: {shape: x.shape}\n'
TWICE = '  - schema: "twice(Tensor x) -> Tensor"\n    compute: "x * 2"\n'  # a spec holds one op at least


def in_place_repo(tmp_path: Path) -> Path:
    """neg_ with its kernel csrc/neg.cpp written by the user."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(IN_PLACE + TWICE + NEG_)
    repo = generate(spec, tmp_path / "repo")
    kernel = repo / "kstem/csrc/neg.cpp"
    kernel.write_text(kernel.read_text() + "// my kernel of neg_\n")
    return repo


def respec(repo: Path, ops: str) -> str:
    """Update the repo to the ops `ops` (beside twice); its output."""
    (repo / "kopgen.yaml").write_text(IN_PLACE + TWICE + ops)
    result = update(repo)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("removed", [NEG_, NEG_ + NEG], ids=["neg_", "both"])
def test_an_in_place_op_added_back_takes_its_kernel_back(tmp_path, removed):
    """Its stem was dropped from the state with the op: neg_ came back as a new skeleton neg_inplace.cpp, its
    kernel neg.cpp "of no op"; both back, neg's skeleton was merged into neg_'s kernel (conflict markers)."""
    repo = in_place_repo(tmp_path)
    assert "created kstem/csrc/neg_functional.cpp" in respec(repo, NEG_ + NEG)
    functional = repo / "kstem/csrc/neg_functional.cpp"
    functional.write_text(functional.read_text() + "// my kernel of neg\n")
    respec(repo, NEG if removed == NEG_ else "")
    output = respec(repo, NEG_ + NEG)
    assert "created kstem/csrc/neg" not in output and "kept" not in output, output
    assert not (repo / "kstem/csrc/neg_inplace.cpp").exists()
    assert (repo / "kstem/csrc/neg.cpp").read_text().endswith("// my kernel of neg_\n")
    assert functional.read_text().endswith("// my kernel of neg\n")
    header = (repo / "kstem/csrc/kernels.h").read_text()
    assert "void neg_cpu(at::Tensor& x);" in header and "neg_functional_cpu(const at::Tensor& x" in header
    assert update(repo, "--check").exit_code == 0


def test_an_op_added_while_an_in_place_one_is_gone_never_takes_its_kernel(tmp_path):
    """neg added while neg_ is gone took neg_'s stem `neg`: its skeleton merged into neg_'s kept kernel, and
    neg_ back was renamed. The newcomer steps aside; neg_ takes its kernel back."""
    repo = in_place_repo(tmp_path)
    respec(repo, "")
    output = respec(repo, NEG)
    assert "created kstem/csrc/neg_functional.cpp" in output and "kept kstem/csrc/neg.cpp" in output, output
    assert (repo / "kstem/csrc/neg.cpp").read_text().endswith("// my kernel of neg_\n")
    output = respec(repo, NEG + NEG_)
    assert "created kstem/csrc/neg" not in output and "kept" not in output, output
    assert (repo / "kstem/csrc/neg.cpp").read_text().endswith("// my kernel of neg_\n")
    assert update(repo, "--check").exit_code == 0


ADOPTED = BASE.replace("package: kwalk", "package: kad").replace(
    '    backward:\n      a: "grad * b"\n      b: "grad * a"\n', "")
PAIRSUM = ADOPTED[ADOPTED.index('  - schema: "pairsum'):]
MY_PAIRSUM = "# my pairsum, before kopgen\ndef pairsum_triton(x):\n    return x.unflatten(-1, (-1, 2)).sum(-1)\n"


@pytest.fixture
def adopted(tmp_path) -> Path:
    """A repo adopted around the user's kernel kad/kernels/pairsum.py."""
    (tmp_path / "kad/kernels").mkdir(parents=True)
    (tmp_path / "kad/kernels/pairsum.py").write_text(MY_PAIRSUM)
    (tmp_path / "kopgen.yaml").write_text(ADOPTED)
    result = CliRunner().invoke(main, ["adopt", str(tmp_path / "kopgen.yaml")])
    assert result.exit_code == 0 and "kept kad/kernels/pairsum.py (yours, as it was)" in result.output
    return tmp_path


def test_an_adopted_kernel_whose_op_is_removed_then_added_back_stays_the_users(adopted):
    """Dropped from the adopted files with its op, unnamed: the op back stopped the update ("files kopgen did not
    write stand where it writes"), and --force put a skeleton over the user's kernel."""
    kernel = adopted / "kad/kernels/pairsum.py"
    edit_spec(adopted, PAIRSUM, "")
    result = update(adopted)
    assert result.exit_code == 0 and "kept kad/kernels/pairsum.py (yours; no op" in result.output, result.output
    edit_spec(adopted, "ops:\n", "ops:\n" + PAIRSUM)
    result = update(adopted)
    assert result.exit_code == 0, result.output
    assert "created tests/test_pairsum.py" in result.output and "pairsum.py" not in result.output.replace(
        "tests/test_pairsum.py", "")
    assert kernel.read_text() == MY_PAIRSUM and not (adopted / ".kopgen/backup").exists()
    assert update(adopted, "--check").exit_code == 0


def test_an_adopted_kernel_of_a_renamed_package_says_where_its_code_goes(adopted):
    edit_spec(adopted, "package: kad\n", "package: kad2\n")
    result = update(adopted)
    assert result.exit_code == 0, result.output
    assert ("kept kad/kernels/pairsum.py (yours): its op's kernel is now kad2/kernels/pairsum.py, a new "
            "skeleton: move your code there") in result.output
    assert (adopted / "kad/kernels/pairsum.py").read_text() == MY_PAIRSUM


ROTARY = """\
kopgen: 1
package: krot
defaults:
  registration: torch_library
  backends: {cpu: cpp}
ops:
  - schema: "rotary(Tensor positions, Tensor! query, int head_size) -> ()"
    kernel: custom
    reference: {query: "query * 2"}
"""


def test_an_argument_added_to_an_op_merges_into_its_written_kernel(tmp_path):
    """The skeleton's last parameter line, `int64_t head_size) {`, stands right above the check the user
    replaced with their body: adding an argument changed that line, and every kernel written conflicted. The
    merge puts the user's lines in place of the check; on another route too, the new signature above them (their
    body is theirs to port: the build says where)."""
    spec = tmp_path / "krot.yaml"
    spec.write_text(ROTARY)
    repo = generate(spec, tmp_path / "repo")
    kernel = repo / "krot/csrc/rotary.cpp"
    body = "  query.mul_(2);  // mine\n"
    kernel.write_text(re.sub(r"  TORCH_CHECK\(false.*\n", body, kernel.read_text()))
    edit_spec(repo, "int head_size)", "int head_size, Tensor? offsets=None)")
    result = update(repo)
    assert result.exit_code == 0, result.output
    assert "int64_t head_size,\n    const std::optional<at::Tensor>& offsets) {\n" + body in kernel.read_text()
    edit_spec(repo, "torch_library", "stable_abi")
    assert update(repo).exit_code == 0
    assert "    const std::optional<torch::stable::Tensor>& offsets) {\n" + body + "}\n" in kernel.read_text()


def test_a_kept_kernel_that_setup_still_compiles_says_so(tmp_path):
    """setup.py compiles every C++ file of the user's in csrc/: the kernel of a renamed op, kept, still builds
    beside the new skeleton, and two definitions of one helper would not link, so update names it."""
    spec = tmp_path / "krot.yaml"
    spec.write_text(ROTARY + ROTARY[ROTARY.index("  - schema"):].replace("rotary(", "other("))
    repo = generate(spec, tmp_path / "repo")
    edit_spec(repo, '"rotary(', '"rope(')
    result = update(repo)
    assert result.exit_code == 0, result.output
    assert ("kept krot/csrc/rotary.cpp (yours; no op of kopgen.yaml has its kernel there now; setup.py still "
            "compiles it: delete it once its code has moved)") in result.output
