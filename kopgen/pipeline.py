"""The public API: load -> resolve -> plan -> render -> write, each stage a function."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import Diagnostic, Diagnostics, Position, SpecError
from .format import check_format
from .loader import Mapping, load_yaml
from .model import Package, resolve
from .plan import KOPGEN, OutputFile, plan
from .render import render
from .skeleton import skeleton_files
from .state import STATE_PATH, State, digest
from .writer import write_new_repo

__all__ = ["generate", "load_spec", "plan", "render_files", "render_repo"]

SPEC_PATH = "kopgen.yaml"  # the repo's copy of its spec: the input of `kopgen update`, never rewritten


def load_spec(path: str | os.PathLike[str]) -> Package:
    """Read and validate a spec file; raise SpecError with every problem found."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError([Diagnostic(Position(str(path), 1, 1), f"cannot read the spec: {error}")]) from None
    return load_spec_text(text, str(path))


def load_spec_text(text: str, filename: str) -> Package:
    root = load_yaml(text, filename)
    diagnostics = Diagnostics()
    if not isinstance(root, Mapping):
        diagnostics.error(root.position, "the spec must be a mapping with keys kopgen, package and ops")
        diagnostics.raise_if_any()
    check_format(root, diagnostics)
    diagnostics.raise_if_any()  # semantic checks need a well-formed tree
    package = resolve(root, text, diagnostics)
    diagnostics.raise_if_any()
    assert package is not None
    return package


def render_files(package: Package) -> dict[str, tuple[OutputFile, str]]:
    """path -> (planned file, rendered text) for every file kopgen renders itself."""
    return {file.path: (file, render(file, package)) for file in plan(package)}


def render_repo(package: Package) -> dict[str, tuple[str, str]]:
    """path -> (owner, text) for every file of the repo: kopgen's, and the user's skeleton."""
    files = {path: ("user", text) for path, text in skeleton_files(package).items()}
    files.update({path: (file.owner, text) for path, (file, text) in render_files(package).items()})
    return files


def state_of(package: Package, files: dict[str, tuple[str, str]]) -> State:
    """The provenance of a rendering: hashes of kopgen's files, texts of the user's (merge bases)."""
    return State(
        spec_sha256=digest(package.repo_spec_text),
        generated={path: digest(text) for path, (owner, text) in files.items() if owner == KOPGEN},
        user_base={path: text for path, (owner, text) in files.items() if owner != KOPGEN and path != SPEC_PATH},
    )


def generate(spec: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None) -> Path:
    """Create a new repo for `spec` in `out_dir` (default: the package name); return its path."""
    package = load_spec(spec)
    target = Path(out_dir if out_dir is not None else package.name)
    files = render_repo(package)
    texts = {path: text for path, (_, text) in files.items()}
    texts[STATE_PATH] = state_of(package, files).to_json()
    write_new_repo(target, texts)
    return target
