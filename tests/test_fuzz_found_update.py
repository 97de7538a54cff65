"""What fuzzing `kopgen update` found: a kopgen.yaml that cannot be read (a loop of symbolic links, a dangling
link, a device, none at all), loops where kopgen writes, and corrupt states whose fields were used before they
were checked. Each is one clean message, exit 2, and the repo byte for byte as it was."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen import generate
from kopgen.cli import main
from kopgen.state import STATE_PATH

from .test_update import BASE, edit_spec, update
from .test_update_safety import refused, snapshot, state

FLAGS = [(), ("--check",), ("--dry-run",), ("--force",)]


@pytest.fixture
def repo(tmp_path) -> Path:
    spec = tmp_path / "kwalk.yaml"
    spec.write_text(BASE)
    return generate(spec, tmp_path / "repo")


def links(repo: Path) -> dict[str, str]:
    """Every symbolic link of the repo and where it points (snapshot() sees a link only as a non-file)."""
    return {p.relative_to(repo).as_posix(): os.readlink(p) for p in sorted(repo.rglob("*")) if p.is_symlink()}


def unchanged_after(repo: Path, flags_list, code: int = 2) -> list[str]:
    """Run update with each of `flags_list`; each stops with `code` and one line; the repo stays as it was."""
    before, before_links = snapshot(repo), links(repo)
    outputs = []
    for flags in flags_list:
        output = refused(update(repo, *flags), code)
        assert len(output.strip().splitlines()) == 1, output
        outputs.append(output)
    assert snapshot(repo) == before and links(repo) == before_links
    return outputs


# D4: kopgen.yaml that cannot be read is FILE:1:1: error: ..., as `kopgen check` reports it


def _spec_loop(spec: Path) -> None:
    spec.symlink_to(spec.name)


def _spec_chain_loop(spec: Path) -> None:
    spec.symlink_to("other.yaml")
    (spec.parent / "other.yaml").symlink_to(spec.name)


def _spec_dangling(spec: Path) -> None:
    spec.symlink_to("nowhere.yaml")


def _spec_dangling_outside(spec: Path) -> None:
    spec.symlink_to(spec.parent.parent / "nowhere" / "kopgen.yaml")


def _spec_dev_zero(spec: Path) -> None:
    spec.symlink_to("/dev/zero")


def _spec_outside(spec: Path) -> None:
    outside = spec.parent.parent / "outside.yaml"
    outside.write_text("kopgen: 1\n")
    spec.symlink_to(outside)


SPECS = {
    "missing": (lambda spec: None, "the repo has no kopgen.yaml"),
    "a loop to itself": (_spec_loop, "a symbolic link to kopgen.yaml (a loop of symbolic links)"),
    "a loop of two": (_spec_chain_loop, "a symbolic link to other.yaml (a loop of symbolic links)"),
    "dangling": (_spec_dangling, "a symbolic link to nowhere.yaml, which does not exist"),
    "dangling outside": (_spec_dangling_outside, "which does not exist"),
    "/dev/zero": (_spec_dev_zero, "a symbolic link to /dev/zero, outside the repo"),
    "a file outside": (_spec_outside, "outside.yaml, outside the repo"),
}


@pytest.mark.parametrize("break_spec, message", SPECS.values(), ids=SPECS.keys())
def test_a_spec_that_cannot_be_read_is_an_error_at_its_first_line(repo, break_spec, message):
    spec = repo / "kopgen.yaml"
    spec.unlink()
    break_spec(spec)
    for output in unchanged_after(repo, FLAGS):
        assert re.fullmatch(rf"{re.escape(str(spec))}:1:1: error: cannot read the spec: .*\n", output), output
        assert message in output and "write outside" not in output, output


def test_check_and_update_report_a_spec_loop_alike(repo):
    spec = repo / "kopgen.yaml"
    spec.unlink()
    spec.symlink_to(spec.name)
    checked = CliRunner().invoke(main, ["check", str(spec)])
    assert checked.exit_code == 2 and checked.output.startswith(f"{spec}:1:1: error: cannot read the spec: ")
    assert unchanged_after(repo, [()])[0].startswith(f"{spec}:1:1: error: cannot read the spec: ")


# D4, related: a loop of symbolic links where kopgen reads or writes a file (writer.inside's Path.resolve)


def _loop(path: Path) -> None:
    if path.is_dir():
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    else:
        path.unlink()
    path.symlink_to(path.name)


LOOPS = {
    "a file of kopgen's": ("kwalk/ops.py", FLAGS, "kwalk/ops.py is a loop of symbolic links"),
    "a file of the user's": ("README.md", FLAGS, "README.md is a loop of symbolic links"),
    "a folder": ("kwalk/kernels", FLAGS, "kwalk/kernels is a loop of symbolic links"),
    "the state, forced": (STATE_PATH, [("--force",)], ".kopgen/state.json is a loop of symbolic links"),
}


@pytest.mark.parametrize("path, flags_list, message", LOOPS.values(), ids=LOOPS.keys())
def test_a_loop_of_symbolic_links_is_a_clean_error(repo, path, flags_list, message):
    _loop(repo / path)
    edit_spec(repo, 'compute: "a * b + c"', 'compute: "a * b - c"')
    for output in unchanged_after(repo, flags_list):
        assert output.startswith("error: ") and message in output, output


def test_a_loop_where_the_backups_go_is_a_clean_error(repo):
    ops = repo / "kwalk/ops.py"
    ops.write_text(ops.read_text() + "# my hack\n")  # --force backs it up
    (repo / ".kopgen/backup").symlink_to("backup")
    edit_spec(repo, 'compute: "a * b + c"', 'compute: "a * b - c"')
    output = unchanged_after(repo, [("--force",)])[0]
    assert "cannot resolve .kopgen/backup (a loop of symbolic links)" in output, output


# D5: every field of .kopgen/state.json checked before it is used


CORRUPT_STATES = {
    "adopted [1]": state(adopted=[1]),
    "adopted [null]": state(adopted=[None]),
    "adopted [[1]]": state(adopted=[[1]]),
    "adopted [{}]": state(adopted=[{}]),
    "adopted [true]": state(adopted=[True]),
    "adopted a str": state(adopted="README.md"),
    "adopted an object": state(adopted={"README.md": ""}),
    "adopted out of the repo": state(adopted=["../README.md"]),
    "adopted a NUL": state(adopted=["READ\0ME.md"]),
    "adopted a lone surrogate": state(adopted=["\udc80.md"]),
    "adopted .git": state(adopted=[".git"]),
    "kopgen a list": state(kopgen=["0.1.0"]),
    "kopgen of 5000 digits": state(kopgen="9" * 5000),
    "spec_sha256 null": b'{"kopgen": "0.1.0", "spec_sha256": null, "generated": {}, "user_base": {}}',
    "user_base a list": state(user_base=[]),
    "user_base a lone surrogate": state(user_base={"README.md": "caf\udce9\n"}),
    "user_base key a lone surrogate": state(user_base={"\udce9.md": ""}),
    "user_base a backup": state(user_base={".kopgen/backup/1/README.md": ""}),
    "generated a NUL": state(generated={"kwalk/\0.py": "0" * 64}),
    "generated a name too long": state(generated={"a" * 300: "0" * 64}),
    "generated a path too long": state(generated={"/".join(["a" * 200] * 30): "0" * 64}),
    "generated the spec": state(generated={"kopgen.yaml": "0" * 64}),
    "generated the state": state(generated={STATE_PATH: "0" * 64}),
    "generated in .GIT": state(generated={".GIT/config": "0" * 64}),
    "a number": b"1",
    "null": b"null",
}


@pytest.mark.parametrize("content", CORRUPT_STATES.values(), ids=CORRUPT_STATES.keys())
def test_a_corrupt_state_is_one_clear_error(repo, content):
    (repo / STATE_PATH).write_bytes(content)
    edit_spec(repo, 'compute: "a * b + c"', 'compute: "a * b - c"')
    for output in unchanged_after(repo, FLAGS[:3]):
        assert output.startswith("error: .kopgen/state.json is corrupt (") and "kopgen update --force" in output


def test_force_recovers_from_a_state_with_a_bad_adopted_entry(repo):
    (repo / STATE_PATH).write_bytes(state(adopted=[1]))
    edit_spec(repo, 'compute: "a * b + c"', 'compute: "a * b - c"')
    refused(update(repo, "--force"), 0)
    assert "a * b - c" in (repo / "kwalk/reference.py").read_text()
    refused(update(repo, "--check"), 0)


def test_a_state_never_leads_update_to_delete_a_file_of_git(repo):
    """A recorded file gone from the render is deleted when its hash matches: never one of git's own."""
    config, content = repo / ".git/config", b"[core]\n"
    config.parent.mkdir()
    config.write_bytes(content)
    text = (repo / STATE_PATH).read_text()
    recorded = f'"generated": {{\n  ".git/config": "{hashlib.sha256(content).hexdigest()}",'
    (repo / STATE_PATH).write_text(text.replace('"generated": {', recorded, 1))
    edit_spec(repo, 'compute: "a * b + c"', 'compute: "a * b - c"')
    output = unchanged_after(repo, FLAGS[:3])[0]
    assert "'.git/config' is no file of kopgen's" in output, output
    assert config.read_bytes() == content


def make_special(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "/dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.symlink_to(path.name)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "loop"])
def test_a_state_that_is_no_regular_file_is_corrupt_not_a_hang(repo, kind):
    """A FIFO blocked the read and /dev/zero filled the memory; a loop is reported as what it is."""
    make_special(repo / STATE_PATH, kind)
    # first in a process of its own, with a time limit: a regression hangs or eats memory there, not here
    result = subprocess.run([sys.executable, "-m", "kopgen", "update", str(repo)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 2 and ".kopgen/state.json is corrupt" in result.stderr, result.stderr[-2000:]
    for output in unchanged_after(repo, FLAGS[:3]):
        assert output.startswith("error: .kopgen/state.json is corrupt (") and "kopgen update --force" in output
