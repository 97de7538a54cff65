"""Write a generated repo so that a failure midway leaves nothing behind.

A new folder is written as a staging folder beside the target and renamed into place
only when complete. An existing empty folder is kept (it may be the shell's current
folder, `-o .`): the staging folder goes inside it, and its entries move out of it
when complete.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path, PurePosixPath

from .render import templates_dir


class OutputError(Exception):
    """The output folder cannot be used (exists and is not empty, inside kopgen, ...): a usage error."""


class WriteError(OutputError):
    """Writing failed (no permission, a full disk, another process in the way); nothing was left behind."""


def write_new_repo(target: Path, files: dict[str, str]) -> None:
    """Create the repo `files` at `target`, a new or empty folder; on any failure leave everything as it was."""
    try:
        _check_target(target)
        if target.is_dir():
            _fill_empty_folder(target, files)
        else:
            _create_folder(target, files)
    except OSError as error:
        raise WriteError(f"cannot write {target}: {error.strerror or error}; nothing was written") from None


def _check_target(target: Path) -> None:
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise OutputError(f"{target} exists and is not a folder")
    if target.is_dir() and any(target.iterdir()):
        raise OutputError(f"{target} is not empty; kopgen new only writes into a new or empty folder")
    check_not_in_kopgen(target)


def check_not_in_kopgen(target: Path) -> None:
    # A repo written into kopgen's own templates would be copied into every later repo.
    for folder in (Path(__file__).resolve().parent, templates_dir().resolve()):
        if target.resolve().is_relative_to(folder):
            raise OutputError(f"{target} is inside kopgen's installation ({folder}); write the repo elsewhere")


def _create_folder(target: Path, files: dict[str, str]) -> None:
    parent = target.absolute().parent
    missing = [folder for folder in (parent, *parent.parents) if not folder.exists()]
    stage = None
    try:
        for folder in reversed(missing):
            folder.mkdir(exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.kopgen-", dir=parent))
        stage.chmod(_created_mode(0o777))  # mkdtemp's 0700 would become the repo's
        _write_all(stage, files)
        try:
            os.rename(stage, target)  # atomic; fails if another process filled the target meanwhile
        except OSError as error:
            if target.exists():
                raise WriteError(f"{target} was created by another process meanwhile; nothing was written") from error
            raise
    except BaseException:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        for folder in missing:  # innermost first
            _remove_if_empty(folder)
        raise


def _fill_empty_folder(target: Path, files: dict[str, str]) -> None:
    stage = Path(tempfile.mkdtemp(prefix=".kopgen-", dir=target))
    moved: list[Path] = []
    try:
        _write_all(stage, files)
        # Another `kopgen new` on this folder leaves its own stage or files here: then only one may go on.
        if os.listdir(target) != [stage.name]:
            raise WriteError(f"{target} was changed by another process meanwhile; nothing was written")
        for entry in sorted(os.listdir(stage), key=_state_last):
            os.rename(stage / entry, target / entry)
            moved.append(target / entry)
        stage.rmdir()
    except BaseException:
        for path in moved:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _state_last(path: str) -> tuple[bool, str]:
    """Sorted with kopgen's state (.kopgen/) last: a repo whose writing was killed midway has no state,
    which `kopgen new` or `adopt` then writes again, not one that update takes for the user's deletions."""
    return PurePosixPath(path).parts[0] == ".kopgen", path


def write_into_existing(target: Path, files: dict[str, str]) -> None:
    """Add `files`, none of which exists yet, to the existing folder `target`: all of them or, on any
    failure, none (the files and folders made so far are removed again). Written into a staging folder
    first, then linked into place one by one; a link never replaces a file another process put there."""
    stage = Path(tempfile.mkdtemp(prefix=".kopgen-", dir=target))
    made: list[Path] = []  # files and folders, in the order they were made
    try:
        _write_all(stage, files)
        for relative in sorted(files, key=_state_last):
            path = inside(target, relative)
            missing = [folder for folder in path.parents if not folder.exists()]
            for folder in reversed(missing):
                folder.mkdir()
                made.append(folder)
            os.link(stage / relative, path)  # FileExistsError if someone wrote it meanwhile
            made.append(path)
        shutil.rmtree(stage)
    except BaseException as error:
        for path in reversed(made):  # innermost first: each folder is empty again when its turn comes
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink(missing_ok=True)
        shutil.rmtree(stage, ignore_errors=True)
        if isinstance(error, OSError):
            raise WriteError(f"cannot write into {target}: {error.strerror or error}; nothing was written") from None
        raise


def _write_all(root: Path, files: dict[str, str]) -> None:
    for relative, text in sorted(files.items()):
        write_file(root, relative, text)


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def _created_mode(mode: int) -> int:
    """`mode` less the process's umask: what mkdir and open give a new folder or file."""
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def inside(root: Path, relative: str) -> Path:
    """root/relative, resolved; an OutputError if it leaves `root` (`..`, a symbolic link) or cannot be
    resolved (a loop of symbolic links)."""
    try:
        path, top = (root / relative).resolve(), root.resolve()
    except (OSError, RuntimeError) as error:  # RuntimeError: a symbolic link loop, before Python 3.13
        loop = isinstance(error, RuntimeError) or error.errno == errno.ELOOP
        reason = "a loop of symbolic links" if loop else error.strerror or str(error)
        raise OutputError(f"cannot resolve {relative} ({reason}): move it away, then run kopgen again") from None
    if path.is_symlink():  # Python 3.13 resolves a loop without an error, to a link
        raise OutputError(f"cannot resolve {relative} (a loop of symbolic links): move it away, then run kopgen again")
    if not path.is_relative_to(top):
        raise OutputError(f"refusing to write outside the repo: {relative} (a symbolic link, or ..?)")
    return path


def write_file(root: Path, relative: str, text: str) -> None:
    """Write `text` at root/relative, refusing any path that would leave `root`."""
    path = inside(root, relative)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(text)


def replace_file(root: Path, relative: str, text: str) -> None:
    """Replace root/relative with `text` atomically: readers see the old file or the new one."""
    path = inside(root, relative)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        # the file's own mode where it stands (mkstemp's 0600 would replace it), else as open() would make it
        os.fchmod(handle, stat.S_IMODE(path.stat().st_mode) if path.exists() else _created_mode(0o666))
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
