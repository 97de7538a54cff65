"""Write a generated repo so that a failure midway leaves nothing behind.

Everything is written into a staging folder beside the target, which is renamed into
place only when complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


class OutputError(Exception):
    """The output folder cannot be used (exists and is not empty, not writable, ...)."""


def write_new_repo(target: Path, files: dict[str, str]) -> None:
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise OutputError(f"{target} exists and is not a folder")
    if target.is_dir() and any(target.iterdir()):
        raise OutputError(f"{target} is not empty; kopgen new only writes into a new or empty folder")
    parent = target.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.kopgen-", dir=parent))
    try:
        for relative, text in sorted(files.items()):
            write_file(stage, relative, text)
        if target.is_dir():
            target.rmdir()
        os.rename(stage, target)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def inside(root: Path, relative: str) -> Path:
    """root/relative, resolved; an OutputError if it leaves `root` (`..`, a symbolic link)."""
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()):
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
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
