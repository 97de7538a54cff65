"""The provenance a generated repo keeps in .kopgen/state.json, and what `kopgen update` reads of it.

One small JSON file: the kopgen version and spec hash of the last generation, the hash of every
file kopgen owns (to notice hand edits), and the text kopgen last rendered for each file the
user owns (the base of the three-way merge that brings template changes into them).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from . import __version__
from .writer import OutputError

STATE_PATH = ".kopgen/state.json"
RECOVER = (
    "`kopgen update --force` regenerates kopgen's files, first backing up every existing one it changes into "
    ".kopgen/backup/N/"
)
_SHA256 = re.compile(r"[0-9a-f]{64}")
# Never in a state kopgen wrote: an update deletes the files of `generated` gone from the render, and must
# not be led by a corrupt state to the spec, the state, the backups or git's own files.
_NEVER_RECORDED = ("kopgen.yaml", STATE_PATH, ".kopgen/backup", ".git")
MAX_NAME_BYTES, MAX_PATH_BYTES = 255, 1024  # no file system takes longer names; kopgen's paths are far shorter
MAX_STATE_BYTES = 256 * 1024 * 1024  # the texts of the user's files: a few hundred KB; this stops /dev/zero


class StateError(OutputError):
    """.kopgen/state.json cannot be read: kopgen no longer knows which files are its own."""

    def __init__(self, reason: str):
        super().__init__(f"{STATE_PATH} is corrupt ({reason}); {RECOVER}")


class NewerKopgenError(OutputError):
    """The repo was last written by a newer kopgen, whose files this one would downgrade or delete."""


def digest(text: str | bytes) -> str:
    return hashlib.sha256(text.encode("utf-8") if isinstance(text, str) else text).hexdigest()


@dataclass
class State:
    kopgen: str = __version__
    spec_sha256: str = ""
    generated: dict[str, str] = field(default_factory=dict)  # kopgen's files: path -> sha256
    user_base: dict[str, str] = field(default_factory=dict)  # the user's files: path -> last rendered text
    # The user's files that stood in the repo before `kopgen adopt` (README.md, ...): kopgen never rendered
    # them, so an update has no merge base for them and leaves them as they are.
    adopted: list[str] = field(default_factory=list)
    # The stems of the ops whose stem is not their name (`scale` of scale_): the names of their files and
    # functions, which an op added later must not take (resolve.with_stems).
    stems: dict[str, str] = field(default_factory=dict)
    # The user's files whose merge left conflict markers: the next update waits until they are resolved
    # (only these: a marker-like line elsewhere is the user's text, or a spec value's).
    conflicts: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        data = {
            "kopgen": self.kopgen,
            "spec_sha256": self.spec_sha256,
            "generated": dict(sorted(self.generated.items())),
            "user_base": dict(sorted(self.user_base.items())),
        }
        if self.adopted:  # only where adopt kept files: other repos' states stay as they were
            data["adopted"] = sorted(self.adopted)
        if self.stems:  # only where an op's stem is not its name
            data["stems"] = dict(sorted(self.stems.items()))
        if self.conflicts:  # only while a merge's markers wait to be resolved
            data["conflicts"] = sorted(self.conflicts)
        return json.dumps(data, indent=1, ensure_ascii=False) + "\n"

    @classmethod
    def read(cls, repo: Path) -> State | None:
        """The state of `repo`, None if it has none; StateError if it is not one kopgen wrote,
        NewerKopgenError if a newer kopgen wrote it (this one would downgrade its files)."""
        path = repo / STATE_PATH
        if not path.exists() and not path.is_symlink():
            return None
        try:
            data = json.loads(_read_regular_file(path).decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
            raise StateError(f"{type(error).__name__}: {error}") from None
        return cls.from_json(data)

    @classmethod
    def from_json(cls, data: object) -> State:
        """Check every field before trusting it (the file may be truncated or edited by hand)."""
        keys = ["kopgen", "spec_sha256", "generated", "user_base"]
        if not isinstance(data, dict):
            raise StateError(f"an object with keys {', '.join(keys)} expected, not a {type(data).__name__}")
        version = data.get("kopgen")
        if not (isinstance(version, str) and _is_version(version)):
            raise StateError(f"kopgen: a version expected, not {version!r:.40}")
        if Version(version) > Version(__version__):  # before the rest: a newer kopgen may keep more
            raise NewerKopgenError(
                f"this repo was last written by kopgen {version}, newer than this kopgen {__version__}: "
                f"update it with kopgen>={version} (an older kopgen would undo the newer one's files)"
            )
        if sorted(set(data) - {"adopted", "stems", "conflicts"}) != sorted(keys):
            raise StateError(f"keys {', '.join(keys)} expected, not {', '.join(map(str, data)) or 'none'}")
        spec_sha256, generated, user_base = (data[key] for key in keys[1:])
        adopted, conflicts = _path_list(data, "adopted"), _path_list(data, "conflicts")
        if not (isinstance(spec_sha256, str) and _SHA256.fullmatch(spec_sha256)):
            raise StateError(f"spec_sha256: a SHA-256 hash expected, not {spec_sha256!r}")
        _check_table("generated", generated, hashes=True)
        _check_table("user_base", user_base, hashes=False)
        stems = data.get("stems", {})
        if not (isinstance(stems, dict) and all(isinstance(v, str) and v.isidentifier() for v in stems.values())):
            raise StateError(f"stems: an object of op names to identifiers expected, not {stems!r:.40}")
        return cls(version, spec_sha256, generated, user_base, adopted, stems, conflicts)


def _path_list(data: dict, name: str) -> list[str]:
    """The state's list `name` of relative paths (none where it is absent), each checked, duplicates dropped."""
    paths = data.get(name, [])
    if not isinstance(paths, list):
        raise StateError(f"{name}: a list expected, not a {type(paths).__name__}")
    for index, path in enumerate(paths):  # each checked before it is hashed or split
        if not isinstance(path, str):
            raise StateError(f"{name}[{index}]: a relative path expected, not {path!r:.40}")
        _check_path(name, path)
    return list(dict.fromkeys(paths))


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except (InvalidVersion, ValueError):  # ValueError: a release number of more than 4300 digits
        return False
    return True


def _check_table(name: str, table: object, hashes: bool) -> None:
    """A JSON object of repo paths to SHA-256 hashes (`hashes`) or to texts."""
    if not isinstance(table, dict):
        raise StateError(f"{name}: an object expected, not a {type(table).__name__}")
    for path, value in table.items():
        _check_path(name, path)  # JSON object keys are always strings
        if not isinstance(value, str) or (hashes and not _SHA256.fullmatch(value)) or not _is_utf8(value):
            kind = "a SHA-256 hash" if hashes else "a text"
            raise StateError(f"{name}[{path!r}]: {kind} expected, not {value!r:.40}")


def _check_path(name: str, path: str) -> None:
    """A relative POSIX path inside the repo that the file system can take (no NUL, UTF-8)."""
    parts = path.split("/")
    if (path.startswith("/") or "\\" in path or "\0" in path or not _is_utf8(path)
            or any(part in ("", ".", "..") for part in parts)):
        raise StateError(f"{name}: {path!r:.80} is not a relative path inside the repo")
    if len(path.encode()) > MAX_PATH_BYTES or any(len(part.encode()) > MAX_NAME_BYTES for part in parts):
        raise StateError(f"{name}: {path!r:.80}... is longer than a file system takes a path or file name")
    folded = path.casefold()  # .GIT is .git where the file system ignores case
    if any(folded == place or folded.startswith(f"{place}/") for place in _NEVER_RECORDED):
        raise StateError(f"{name}: {path!r} is no file of kopgen's or yours that kopgen records")


def _is_utf8(text: str) -> bool:
    """Whether `text` can be written as UTF-8: JSON's \\ud800 escapes give lone surrogates, which cannot."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _read_regular_file(path: Path) -> bytes:
    """The bytes of `path`, a regular file of at most MAX_STATE_BYTES; an OSError for anything else
    (a FIFO would block the read, /dev/zero never end it)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO without a writer: no hang
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError("not a regular file")
        if info.st_size > MAX_STATE_BYTES:
            raise OSError(f"{info.st_size / 2**20:.0f} MB, more than {MAX_STATE_BYTES // 2**20} MB")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_STATE_BYTES + 1)  # +1: a file that grew since fstat
    finally:
        os.close(fd)
    if len(data) > MAX_STATE_BYTES:
        raise OSError(f"more than {MAX_STATE_BYTES // 2**20} MB")
    return data
