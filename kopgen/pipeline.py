"""The public API: load -> resolve -> plan -> render -> write, each stage a function."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .bound import generated_path_errors
from .checks import meta_warnings, sample_errors, spec_warnings
from .errors import Diagnostic, Diagnostics, Position, SpecError
from .format import check_format
from .loader import Mapping, load_yaml
from .model import CustomKernel, Package
from .plan import KOPGEN, OutputFile, plan
from .render import render
from .resolve import resolve
from .skeleton import skeleton_files
from .state import STATE_PATH, State, digest
from .writer import OutputError, write_new_repo

__all__ = ["check_spec", "generate", "load_spec", "plan", "render_files", "render_repo"]

SPEC_PATH = "kopgen.yaml"  # the repo's copy of its spec: the input of `kopgen update`, never rewritten
MAX_SPEC_BYTES = 10 * 1024 * 1024  # a spec is a few KB; this stops /dev/zero and runaway files

_NOT_FILES = [  # what a spec path may name instead of a regular file
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
]


def load_spec(path: str | os.PathLike[str]) -> Package:
    """Read and validate a spec file; raise SpecError with every problem found."""
    return load_spec_text(read_spec(path), str(path))


def read_spec(path: str | os.PathLike[str]) -> str:
    """The text of a spec file: a regular UTF-8 file of at most MAX_SPEC_BYTES, else a SpecError."""
    name = str(path)

    def error(message: str, line: int = 1, column: int = 1) -> SpecError:
        return SpecError([Diagnostic(Position(name, line, column), message)])

    try:
        # O_NONBLOCK: opening a FIFO that has no writer returns at once (fstat then refuses it) instead of hanging.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as problem:
        raise error(f"cannot read the spec: {problem.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((kind for test, kind in _NOT_FILES if test(info.st_mode)), "a special file")
            raise error(f"cannot read the spec: it is {kind}, not a file")
        if info.st_size > MAX_SPEC_BYTES:
            raise error(f"the spec is {info.st_size / 2**20:.1f} MB; a spec is at most {MAX_SPEC_BYTES // 2**20} MB")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)  # +1: a file that grew since fstat
    except OSError as problem:
        raise error(f"cannot read the spec: {problem.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SPEC_BYTES:
        raise error(f"the spec is larger than {MAX_SPEC_BYTES // 2**20} MB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as problem:
        line_start = data.rfind(b"\n", 0, problem.start) + 1
        column = len(data[line_start : problem.start].decode("utf-8", errors="replace")) + 1
        line = data.count(b"\n", 0, problem.start) + 1
        raise error(f"the spec is not UTF-8 text: byte 0x{data[problem.start]:02x} ({problem.reason})", line, column) from None
    # universal newlines, as open() in text mode reads; a byte order mark (which some editors write) is no
    # part of the text: the repo's copy of the spec would carry it after its modeline, mid-file
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def check_spec(path: str | os.PathLike[str], run_meta: bool = False) -> tuple[Package, list[Diagnostic]]:
    """Read and validate a spec file (SpecError on errors) and give its warnings: what kopgen can tell of
    the custom kernels' traps from the spec, and with `run_meta` (it imports torch) from evaluating
    `fake` and `reference` on meta tensors."""
    root, package = _load(read_spec(path), str(path))
    return package, sorted(spec_warnings(root, package) + (meta_warnings(root, package) if run_meta else []))


def load_spec_text(text: str, filename: str, stems: dict[str, str] | None = None) -> Package:
    """A spec's model; `stems`: the stems the repo's files were written under (`kopgen update`)."""
    return _load(text, filename, stems)[1]


def _load(text: str, filename: str, stems: dict[str, str] | None = None) -> tuple[Mapping, Package]:
    root = load_yaml(text, filename)
    diagnostics = Diagnostics()
    if not isinstance(root, Mapping):
        diagnostics.error(root.position, "the spec must be a mapping with keys kopgen, package and ops")
        diagnostics.raise_if_any()
    check_format(root, diagnostics)
    diagnostics.raise_if_any()  # semantic checks need a well-formed tree
    package = resolve(root, text, diagnostics, stems or {})
    diagnostics.raise_if_any()
    assert package is not None
    diagnostics.items += sample_errors(root, package)
    # A bound kernel must be none of the files kopgen writes, which only the plan of the whole package knows.
    planned = {f.path: (f.owner, f.context["op"].name if "op" in f.context else None) for f in plan(package)}
    diagnostics.items += generated_path_errors(root, package, planned)
    diagnostics.raise_if_any()
    return root, package


def render_files(package: Package) -> dict[str, tuple[OutputFile, str]]:
    """path -> (planned file, rendered text) for every file kopgen renders itself."""
    return {file.path: (file, render(file, package)) for file in plan(package)}


def render_repo(package: Package) -> dict[str, tuple[str, str]]:
    """path -> (owner, text) for every file of the repo: kopgen's, and the user's skeleton."""
    files = {path: ("user", text) for path, text in skeleton_files(package).items()}
    files.update({path: (file.owner, text) for path, (file, text) in render_files(package).items()})
    return files


def state_of(package: Package, files: dict[str, tuple[str, str]], adopted: list[str] | None = None) -> State:
    """The provenance of a rendering: hashes of kopgen's files, texts of the user's (merge bases), and the
    user's files that were there before `kopgen adopt` (which have no merge base)."""
    adopted = sorted(adopted or [])
    return State(
        spec_sha256=digest(package.repo_spec_text),
        generated={path: digest(text) for path, (owner, text) in files.items() if owner == KOPGEN},
        user_base={path: text for path, (owner, text) in files.items()
                   if owner != KOPGEN and path != SPEC_PATH and path not in adopted},
        adopted=adopted,
        stems={op.name: op.stem for op in package.ops if op.stem != op.name},
    )


def generate(spec: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None) -> Path:
    """Create a new repo for `spec` in `out_dir` (default: the package name); return its path."""
    package = load_spec(spec)
    target = Path(out_dir if out_dir is not None else package.name)
    bound = sorted({b.path for op in package.ops if isinstance(op.body, CustomKernel) for b in op.body.bound})
    if bound and target.absolute() != Path(spec).absolute().parent:
        raise OutputError(f"the spec binds existing kernels ({', '.join(bound)}), which kopgen never copies nor "
                          f"writes: generate the repo around them, in the spec's folder, with `kopgen adopt {spec}`")
    files = render_repo(package)
    texts = {path: text for path, (_, text) in files.items()}
    texts[STATE_PATH] = state_of(package, files).to_json()
    write_new_repo(target, texts)
    return target
