"""kopgen update and the writer, as an exploratory run of 2026-12-05 broke them: a lone CR, a locale
that is not UTF-8, a write killed before the state, kopgen's unedited kernel under an op gone custom, an
adopted kernel under an op gone `compute`, a spec value that reads as a conflict marker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen import generate, writer
from kopgen.cli import main
from kopgen.state import STATE_PATH

from .test_update import BASE, edit_spec, update
from .test_update_safety import refused


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
    # edited by hand first, it is the user's: it stays as it is
    edit_spec(repo, CUSTOM, '    compute: "a * b + c"\n')
    assert update(repo).exit_code == 0 and "@generated" in kernel.read_text()
    kernel.write_text(kernel.read_text() + "# mine\n")
    edit_spec(repo, '    compute: "a * b + c"\n', CUSTOM)
    update(repo)
    assert kernel.read_text().endswith("# mine\n")


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
