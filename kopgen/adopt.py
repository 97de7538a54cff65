"""`kopgen adopt SPEC` (also `kopgen new --here SPEC`): generate into the folder that holds SPEC, which may
be an existing kernel repo.

Every path kopgen would write is sorted out before anything is written:
- kopgen's own files (headed `@generated`) must not stand there already, unless byte-identical or empty (a
  package's empty __init__.py, which is replaced): another file of that name would be replaced, so adopt
  stops (exit 2) and names each one;
- the user's files that kopgen creates once (README.md, pyproject.toml, .gitignore, kernel skeletons)
  are kept byte-identical where they exist, and recorded in the state as adopted: `kopgen update` never
  merges into them, since kopgen never rendered them;
- everything else is written as `kopgen new` writes, all or nothing.

The repo keeps its spec as kopgen.yaml, which `kopgen update` reads. A spec of another name is copied
there (as `kopgen new` copies it) and left as it is; a kopgen.yaml that stands there and says something
else stops adopt, since the two would disagree about the repo.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .pipeline import SPEC_PATH, load_spec_text, read_spec, render_repo, state_of
from .plan import KOPGEN
from .state import STATE_PATH, digest
from .writer import OutputError, check_not_in_kopgen, write_into_existing


class AdoptConflict(OutputError):
    """Files stand where kopgen writes its own: adopt writes nothing."""


@dataclass
class Adoption:
    target: Path
    writes: dict[str, str] = field(default_factory=dict)  # path -> text: files that are not there yet
    kept: list[str] = field(default_factory=list)  # the user's files that stand there: kept as they are
    same: list[str] = field(default_factory=list)  # kopgen's files that stand there byte-identical
    conflicts: list[str] = field(default_factory=list)  # kopgen's files that stand there and differ
    emptied: dict[str, bytes] = field(default_factory=dict)  # kopgen's files that stand there empty: replaced
    spec_copied_from: str | None = None  # the spec's name where it is not kopgen.yaml


def plan_adoption(spec: str | os.PathLike[str]) -> Adoption:
    """What adopting `spec`'s folder writes and keeps; reads the folder, writes nothing."""
    spec = Path(spec)
    target = spec.parent
    check_not_in_kopgen(target)
    if (target / STATE_PATH).exists() or (target / STATE_PATH).is_symlink():
        raise OutputError(f"{target} is a kopgen repo already ({STATE_PATH}): run kopgen update there")
    text = read_spec(spec)
    package = load_spec_text(text, str(spec))
    files = render_repo(package)
    adoption = Adoption(target)
    repo_spec = _standing(target, SPEC_PATH)  # the spec as `kopgen update` will read it
    if spec.name != SPEC_PATH:
        adoption.spec_copied_from = spec.name
        if repo_spec is None:
            adoption.writes[SPEC_PATH] = repo_spec = package.repo_spec_text
        elif repo_spec not in (text.encode(), package.repo_spec_text.encode()):
            raise OutputError(f"{target / SPEC_PATH} stands beside {spec.name} and is another spec: kopgen update "
                              f"reads kopgen.yaml, so adopt the repo with it (or move it away)")
    for path, (owner, rendered) in sorted(files.items()):
        if path == SPEC_PATH:
            continue  # the user's spec, above
        on_disk = _standing(target, path)
        if on_disk is None:
            adoption.writes[path] = rendered
        elif on_disk == rendered.encode():
            adoption.same.append(path)
        elif owner == KOPGEN and isinstance(on_disk, bytes) and not on_disk.strip():
            # An empty file (every kernel repo's package has an __init__.py) holds nothing to keep.
            adoption.emptied[path] = on_disk
            adoption.writes[path] = rendered
        elif owner == KOPGEN:
            adoption.conflicts.append(path)
        else:
            adoption.kept.append(path)
    state = state_of(package, files, adopted=adoption.kept)
    state.spec_sha256 = digest(repo_spec)  # the spec as kopgen update will read it
    adoption.writes[STATE_PATH] = state.to_json()
    return adoption


def _standing(target: Path, path: str) -> bytes | str | None:
    """What stands at target/path: the file's bytes; a description where it is no file (a folder, a link,
    a file where one of its folders goes), which no rendering equals; None where nothing does."""
    full = target / path
    if full.is_symlink():
        return "a symbolic link"
    if full.is_file():
        return full.read_bytes()
    if full.exists():
        return "not a file"
    for parent in PurePosixPath(path).parents[:-1]:
        if (target / parent).exists() and not (target / parent).is_dir():
            return "a file where a folder goes"
    return None


def adopt(spec: str | os.PathLike[str]) -> Adoption:
    """Generate the repo of `spec` into the folder that holds it; AdoptConflict (nothing written) where
    files stand where kopgen's own go."""
    adoption = plan_adoption(spec)
    if adoption.conflicts:
        raise AdoptConflict(
            f"files stand where kopgen writes its own, and differ from them: {', '.join(adoption.conflicts)}; "
            "nothing was written. Move them away (kopgen writes these files whole), then run kopgen adopt again"
        )
    try:
        for path in adoption.emptied:  # write_into_existing adds files that are not there
            (adoption.target / path).unlink()
        write_into_existing(adoption.target, adoption.writes)
    except BaseException:
        for path, data in adoption.emptied.items():  # nothing written: the empty files back as they were
            if not (adoption.target / path).exists():
                (adoption.target / path).write_bytes(data)
        raise
    return adoption
