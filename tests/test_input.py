"""Hostile input and a hostile environment: what the spec path names, alias bombs, where and how
`kopgen new` writes. Each case ends in one clear line and an exit code, never a traceback, a hang,
or a half-written repo."""

from __future__ import annotations

import errno
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen import writer
from kopgen.cli import main
from kopgen.errors import SpecError
from kopgen.pipeline import load_spec
from kopgen.render import templates_dir

from .conftest import ROOT, cpu_bound

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
MAX_SPEC_BYTES = 10 * 2**20


def limit_memory() -> None:
    """What would fill memory (/dev/zero, an alias bomb) fails at 1 GiB in the child, not on the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))


def run_python(*args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    """`python ARGS` in a process of its own, for what would hang or exhaust this one."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=ENV,
                          check=False, preexec_fn=limit_memory)


# -- the spec path names something that is not a spec file


def test_a_fifo_spec_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    result = run_python("-m", "kopgen", "check", str(fifo), timeout=10)  # opening a FIFO with no writer used to block forever
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"{fifo}:1:1: error: cannot read the spec: it is a pipe (FIFO), not a file\n"


def test_a_device_spec_is_refused_before_reading_it():
    result = run_python("-m", "kopgen", "check", "/dev/zero")  # it used to read until MemoryError
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr == "/dev/zero:1:1: error: cannot read the spec: it is a character device, not a file\n"


def test_a_spec_over_the_size_limit_is_refused(tmp_path):
    spec = tmp_path / "spec.yaml"
    with open(spec, "wb") as handle:
        handle.truncate(MAX_SPEC_BYTES + 1)  # sparse: no 10 MB written to disk
    result = CliRunner().invoke(main, ["check", str(spec)])
    assert result.exit_code == 2
    assert result.output == f"{spec}:1:1: error: the spec is 10.0 MB; a spec is at most 10 MB\n"


def test_update_refuses_a_kopgen_yaml_over_the_size_limit(tmp_path, muladd_spec):
    repo = tmp_path / "repo"
    assert CliRunner().invoke(main, ["new", str(muladd_spec), "-o", str(repo)]).exit_code == 0
    with open(repo / "kopgen.yaml", "ab") as handle:
        handle.truncate(MAX_SPEC_BYTES + 1)
    result = CliRunner().invoke(main, ["update", str(repo)])
    assert result.exit_code == 2
    assert "kopgen.yaml:1:1: error: the spec is 10.0 MB; a spec is at most 10 MB" in result.output


def test_a_folder_given_as_spec_is_one_line(tmp_path):
    with pytest.raises(SpecError, match=r":1:1: error: cannot read the spec: it is a folder, not a file$"):
        load_spec(tmp_path)
    result = CliRunner().invoke(main, ["check", str(tmp_path)])  # click refuses it before kopgen reads it
    assert result.exit_code == 2 and "is a directory" in result.output and "Traceback" not in result.output


def test_a_spec_that_is_not_utf8_is_reported_at_the_byte(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(b"kopgen: 1\npackage: kb\xc3\xa9\xff\n")
    result = CliRunner().invoke(main, ["check", str(spec)])
    assert result.exit_code == 2
    assert result.output == f"{spec}:2:13: error: the spec is not UTF-8 text: byte 0xff (invalid start byte)\n"


def test_a_byte_order_mark_is_left_out_of_the_repos_spec(tmp_path, muladd_spec):
    """An editor's UTF-8 byte order mark opens the spec; the repo's copy starts with kopgen's modeline,
    and the mark must not follow it mid-file (PyYAML's pure-Python loader refuses it there)."""
    import yaml  # kopgen's own dependency
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(b"\xef\xbb\xbf" + Path(muladd_spec).read_bytes())
    result = CliRunner().invoke(main, ["new", str(spec), "-o", str(tmp_path / "repo")])
    assert result.exit_code == 0, result.output
    copy = (tmp_path / "repo" / "kopgen.yaml").read_text()
    assert "\ufeff" not in copy
    assert yaml.load(copy, Loader=yaml.SafeLoader)["package"] == "kbook"


# -- aliases: the node graph of yaml.compose shares nodes; expanding it must stay bounded


LOAD_TIMED = """
import sys, time
from kopgen import SpecError, load_spec
start = time.process_time()  # CPU time: the bound is on kopgen's work, not on a busy machine's scheduling
try:
    load_spec(sys.argv[1])
except SpecError as error:
    print(error)
print(f"{time.process_time() - start:.3f}")
"""


@pytest.mark.parametrize("name", ["alias_bomb", "recursive_alias"])
def test_alias_expansion_is_refused_within_a_second(tmp_path, name):
    spec = tmp_path / "spec.yaml"
    shutil.copyfile(ROOT / "tests" / "bad_specs" / f"{name}.yaml", spec)
    # Its own process: before the limit, expanding these ran for minutes and took gigabytes.
    result = run_python("-c", LOAD_TIMED, str(spec))
    assert result.returncode == 0, result.stderr[-2000:]
    *message, seconds = result.stdout.splitlines()
    assert message and all(line.startswith(f"{spec}:") and ": error: " in line for line in message), result
    assert float(seconds) < cpu_bound(1.0)


# -- where `kopgen new` writes


@pytest.mark.parametrize("output", [".", ""])
def test_new_writes_into_the_current_empty_folder(tmp_path, monkeypatch, muladd_spec, output):
    here = tmp_path / "here"
    here.mkdir()
    inode = here.stat().st_ino
    monkeypatch.chdir(here)
    result = CliRunner().invoke(main, ["new", str(muladd_spec), "-o", output])
    assert result.exit_code == 0, result.output
    assert (here / "kbook" / "ops.py").is_file() and (here / "kopgen.yaml").is_file()
    assert here.stat().st_ino == inode  # the shell's current folder is kept, not replaced
    assert not [p for p in here.iterdir() if "kopgen-" in p.name]  # no stage left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]


@pytest.mark.parametrize("inside", [lambda: templates_dir() / "myrepo", lambda: Path(writer.__file__).parent / "myrepo"],
                         ids=["templates", "package"])
def test_new_refuses_a_folder_inside_kopgen(muladd_spec, inside):
    target = inside()
    try:
        result = CliRunner().invoke(main, ["new", str(muladd_spec), "-o", str(target)])
        created = target.exists()
    finally:
        shutil.rmtree(target, ignore_errors=True)  # the code before the fix writes it
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {target} is inside kopgen's installation")
    assert not created


# -- failures of the environment: one line, exit 1, nothing left behind


def fail_on_third_write(monkeypatch, error: BaseException) -> None:
    original = writer.write_file
    calls = []

    def failing_write(root, relative, text):
        calls.append(relative)
        if len(calls) == 3:
            raise error
        original(root, relative, text)

    monkeypatch.setattr(writer, "write_file", failing_write)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS])
@pytest.mark.parametrize("existing", [False, True], ids=["new_folder", "empty_folder"])
def test_a_write_failure_is_one_line_and_exit_1(tmp_path, muladd_spec, monkeypatch, code, existing):
    target = tmp_path / "repo"
    if existing:
        target.mkdir()
    fail_on_third_write(monkeypatch, OSError(code, os.strerror(code)))
    result = CliRunner().invoke(main, ["new", str(muladd_spec), "-o", str(target)])
    assert result.exit_code == 1
    assert result.output == f"error: cannot write {target}: {os.strerror(code)}; nothing was written\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == (["repo"] if existing else [])


def test_a_read_only_parent_is_one_line_and_exit_1(tmp_path, muladd_spec, monkeypatch):
    # Tests run as root, which ignores permission bits: refuse the staging folder as a read-only parent would.
    original = writer.tempfile.mkdtemp

    def refuse(suffix=None, prefix=None, dir=None):
        if dir is not None and Path(dir) == tmp_path / "a":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), dir)
        return original(suffix, prefix, dir)

    monkeypatch.setattr(writer.tempfile, "mkdtemp", refuse)
    result = CliRunner().invoke(main, ["new", str(muladd_spec), "-o", str(tmp_path / "a" / "repo")])
    assert result.exit_code == 1
    assert result.output == f"error: cannot write {tmp_path / 'a' / 'repo'}: Permission denied; nothing was written\n"
    assert list(tmp_path.iterdir()) == []  # the parent it made is gone too


@pytest.mark.parametrize("existing", [False, True], ids=["new_folder", "empty_folder"])
def test_another_process_filling_the_target_meanwhile_is_a_clean_error(tmp_path, muladd_spec, monkeypatch, existing):
    target = tmp_path / "repo"
    if existing:
        target.mkdir()
    original = writer.write_file

    def write_while_another_kopgen_does(root, relative, text):
        target.mkdir(exist_ok=True)
        (target / "theirs.txt").write_text("theirs")  # between kopgen's check of the target and its rename
        original(root, relative, text)

    monkeypatch.setattr(writer, "write_file", write_while_another_kopgen_does)
    result = CliRunner().invoke(main, ["new", str(muladd_spec), "-o", str(target)])
    assert result.exit_code == 1
    changed = "changed" if existing else "created"
    assert result.output == f"error: {target} was {changed} by another process meanwhile; nothing was written\n"
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["repo", "repo/theirs.txt"]


# -- Ctrl-C: one line, exit 130, nothing left behind


def test_ctrl_c_while_writing_is_one_line_and_exit_130(tmp_path, muladd_spec, monkeypatch):
    fail_on_third_write(monkeypatch, KeyboardInterrupt())
    result = CliRunner().invoke(main, ["new", str(muladd_spec), "-o", str(tmp_path / "repo")])
    assert result.exit_code == 130
    assert result.output == "kopgen: interrupted\n"
    assert list(tmp_path.iterdir()) == []


INTERRUPT_AT_IMPORT = """
import runpy, sys
class CtrlC:  # Ctrl-C pressed while kopgen imports jinja2
    def find_spec(self, name, path=None, target=None):
        if name == "jinja2":
            raise KeyboardInterrupt
sys.meta_path.insert(0, CtrlC())
sys.argv = ["kopgen", "check", "spec.yaml"]
runpy.run_module("kopgen", run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_while_kopgen_starts_is_one_line_and_exit_130():
    result = run_python("-c", INTERRUPT_AT_IMPORT)
    assert (result.returncode, result.stderr) == (130, "kopgen: interrupted\n")


def test_the_kopgen_command_starts_through_the_guarded_entry_point():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'kopgen = "kopgen.__main__:run"' in pyproject
    assert run_python("-m", "kopgen", "--version").stdout == "kopgen, version 0.1.0\n"
