"""`kopgen update`: bring a generated repo in line with its edited kopgen.yaml.

kopgen's files are rewritten whole, unless the user edited one by hand (its hash differs from
the one recorded at the last generation) or a file kopgen never wrote stands at the path: then
nothing is written unless --force, which first copies those files into a new folder
.kopgen/backup/N/ (one per update, never reused). The user's files get a three-way merge
(`git merge-file`): base, what kopgen rendered last time (kept in .kopgen/state.json); theirs,
the new render; ours, the file on disk.

Everything is read and checked before anything is written: a corrupt state, a state of a newer
kopgen, a folder where a file goes, a file of the user's to merge that is not UTF-8 stop the
update with one message. Writes are atomic per file and the state is written last, so an update
stopped at any point leaves every file old or new, and the next `kopgen update` finishes the job.
"""

from __future__ import annotations

import difflib
import errno
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from . import __version__
from .errors import Diagnostic, Position, SpecError
from .pipeline import SPEC_PATH, load_spec_text, render_repo, state_of
from .pipeline import read_spec as read_spec_file
from .plan import KOPGEN
from .skeleton import PROJECT_FILES
from .state import STATE_PATH, State, StateError, digest
from .writer import OutputError, inside, replace_file

BACKUP_DIR = ".kopgen/backup"
YOURS, NEW_RENDER = "yours", "new kopgen render"  # the merge's labels: its conflict markers' lines
CONFLICT_START, CONFLICT_END = f"<<<<<<< {YOURS}", f">>>>>>> {NEW_RENDER}"


@dataclass
class UpdatePlan:
    writes: dict[str, str] = field(default_factory=dict)  # path -> new text
    created: list[str] = field(default_factory=list)  # the writes where no file stands yet
    deletes: list[str] = field(default_factory=list)  # kopgen's files of removed ops
    hand_edited: list[str] = field(default_factory=list)  # kopgen's files the user changed
    yours: list[str] = field(default_factory=list)  # files kopgen never wrote (or the user's), in the way of a write
    conflicts: list[str] = field(default_factory=list)  # user files whose merge left markers
    kept: list[str] = field(default_factory=list)  # user files of removed ops: kept, never deleted
    # kept files whose op is still there, its kernel now at another path (the package renamed, another route)
    moved: dict[str, str] = field(default_factory=dict)
    # hand-edited kernels of kopgen's (in hand_edited) whose op went `kernel: custom`: a skeleton goes there
    now_custom: list[str] = field(default_factory=list)
    crlf: list[str] = field(default_factory=list)  # merged user files written with CRLF line ends, as they were
    unresolved: list[str] = field(default_factory=list)  # user files still holding an earlier merge's markers
    state: State | None = None  # what .kopgen/state.json says afterwards
    corrupt_state: bool = False  # replaced with --force: backed up too

    @property
    def changes(self) -> bool:
        return bool(self.writes or self.deletes or self.hand_edited or self.yours or self.corrupt_state)

    @property
    def overwrites(self) -> list[str]:
        """Files of the user's (hand-edited or never kopgen's) the update replaces or deletes: only with --force."""
        return sorted(self.hand_edited + self.yours + ([STATE_PATH] if self.corrupt_state else []))


def read_file(repo: Path, path: str) -> str | bytes | None:
    """repo/path as text; its bytes if it is not UTF-8; None if absent. An OutputError if a folder
    (or any other non-file) is there, or a file stands where one of its folders should be."""
    full = repo / path
    if full.is_file():
        data = full.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return data  # not kopgen's text: a hand edit, compared and backed up as bytes
        # CRLF line ends are merged as LF (a file of them all written back with CRLF: plan.crlf); a lone \r
        # is the user's byte, kept as it is (universal newlines made it a line break).
        return text.replace("\r\n", "\n")
    if full.is_dir():
        raise OutputError(f"{path} is a folder where kopgen writes a file: move it away, then run kopgen update again")
    if full.exists():
        raise OutputError(f"{path} is not a regular file: move it away, then run kopgen update again")
    if _is_loop(full):  # a dangling link is absent: the write goes where it points, if inside the repo
        where = next(p for p in [*reversed(PurePosixPath(path).parents[:-1]), path] if _is_loop(repo / p))
        raise OutputError(f"{where} is a loop of symbolic links: move it away, then run kopgen update again")
    for parent in reversed(PurePosixPath(path).parents[:-1]):
        if (repo / parent).exists() and not (repo / parent).is_dir():
            raise OutputError(f"{parent} is a file where kopgen needs a folder (for {path}): "
                              "move it away, then run kopgen update again")
    return None


def _is_loop(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as error:
        return error.errno == errno.ELOOP
    return False


def _bad_byte(data: bytes) -> tuple[int, int, int]:
    """(line, column, value) of the first byte of `data` that is not UTF-8."""
    start = 0
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        start = error.start
    return data.count(b"\n", 0, start) + 1, start - data.rfind(b"\n", 0, start), data[start]


def read_spec(repo: Path) -> str:
    """kopgen.yaml's text, read as `kopgen new` reads a spec: a regular UTF-8 file within the size limit, in
    the repo. Every problem is a SpecError at FILE:1:1, as `kopgen check` reports a file it cannot read."""
    path = repo / SPEC_PATH

    def error(message: str) -> SpecError:
        return SpecError([Diagnostic(Position(str(path), 1, 1), message)])

    if path.is_symlink():
        link = os.readlink(path)
        try:
            target = path.resolve(strict=True)
        except FileNotFoundError:
            raise error(f"cannot read the spec: it is a symbolic link to {link}, which does not exist") from None
        except (OSError, RuntimeError) as problem:  # RuntimeError: a loop, before Python 3.13
            loop = isinstance(problem, RuntimeError) or problem.errno == errno.ELOOP
            reason = "a loop of symbolic links" if loop else problem.strerror
            raise error(f"cannot read the spec: it is a symbolic link to {link} ({reason})") from None
        if not target.is_relative_to(repo.resolve()):
            raise error(f"cannot read the spec: it is a symbolic link to {target}, outside the repo; kopgen update "
                        f"reads the repo's own {SPEC_PATH}: copy the spec there")
    elif not path.exists():
        raise error(f"cannot read the spec: the repo has no {SPEC_PATH}, which kopgen update regenerates it from: "
                    "restore it")
    return read_spec_file(path)


def plan_update(repo: Path, force: bool = False) -> UpdatePlan:
    """What an update of `repo` would do; reads the repo, writes nothing. With `force`, a corrupt
    state is replaced by an empty one: every existing file of kopgen's that would change counts as the
    user's (backed up, then rewritten), and the user's own files (README, kernel bodies) are kept as they are."""
    old, corrupt = _read_state(repo, force)
    spec_text = read_spec(repo)
    unresolved = [path for path in sorted(old.conflicts) if _has_conflict_markers(read_file(repo, path))]
    if unresolved:  # as git refuses a merge before the last one is resolved: nothing is planned
        return UpdatePlan(state=old, unresolved=unresolved)
    if _unchanged(repo, old, spec_text):
        return UpdatePlan(state=old)
    package = load_spec_text(spec_text, str(repo / SPEC_PATH), stems=old.stems)
    files = render_repo(package)
    # An adopted file of the user's that kopgen renders no more (its op removed) stays adopted, as kept files stay
    # in user_base: the op added back takes it back as it is, never a skeleton in its way.
    kept = [p for p in old.adopted + sorted(old.user_base) if p not in files and (repo / p).exists()]
    adopted = [p for p in old.adopted if (p in files and files[p][0] != KOPGEN) or p in kept]  # kopgen's: not adopted
    plan = UpdatePlan(state=state_of(package, files, adopted=adopted), corrupt_state=corrupt)
    # The stems of ops gone from the spec stay recorded, as their kept kernels do: the op added back takes its
    # file names back, and no newcomer takes them meanwhile (resolve.with_stems).
    present = {op.name for op in package.ops}
    plan.state.stems.update({name: stem for name, stem in old.stems.items() if name not in present})
    for path, (owner, text) in sorted(files.items()):
        if path != SPEC_PATH:  # the input of the update: the user's, never rewritten
            _plan_file(plan, old, path, owner, text, read_file(repo, path))
    for path, recorded in sorted(old.generated.items()):
        if path not in files and (repo / path).is_file():
            disk = read_file(repo, path)
            (plan.hand_edited if digest(disk) != recorded else plan.deletes).append(path)
    plan.kept = sorted(set(kept))
    for path in set(kept) & set(old.user_base) - set(adopted):  # its merge base stays: the op back merges into it
        plan.state.user_base[path] = old.user_base[path]
    skeletons = [p for p in plan.created if files[p][0] != KOPGEN]
    for path in plan.kept:  # a new skeleton of the same name: the same op's kernel, at its new place
        same = [new for new in skeletons if PurePosixPath(new).stem == PurePosixPath(path).stem]
        if same:
            plan.moved[path] = same[0]
    # Texts are read with universal newlines: a user's file that ends every line in CRLF is merged as LF,
    # then written back with CRLF, not rewritten line by line.
    merged = [path for path in plan.writes if path in old.user_base and files[path][0] != KOPGEN]
    plan.crlf = [path for path in merged if _all_crlf((repo / path).read_bytes())]
    return plan


def _has_conflict_markers(disk: str | bytes | None) -> bool:
    """Whether a file holds the markers `merge` leaves (its labels make them kopgen's, not the user's text)."""
    if not isinstance(disk, str):
        return False
    lines = disk.splitlines()
    return CONFLICT_START in lines or CONFLICT_END in lines  # either left: the merge is not resolved


def _all_crlf(data: bytes) -> bool:
    """Whether every line of `data` ends in CRLF (a file of mixed line ends is merged as LF)."""
    return b"\r\n" in data and data.count(b"\r\n") == data.count(b"\n")


def _read_state(repo: Path, force: bool) -> tuple[State, bool]:
    """The recorded state, and whether it was corrupt (and replaced by an empty one, with `force`)."""
    try:
        old = State.read(repo)
    except StateError:
        if not force:
            raise
        read_file(repo, STATE_PATH)  # a folder there: an error now, not after every other file is written
        return State(), True  # kopgen wrote nothing as far as it knows: every file in the way is backed up
    if old is None:
        if not repo.is_dir():
            raise OutputError(f"{repo} is no folder: kopgen update works in a repo that kopgen new made")
        raise OutputError(f"{repo} has no {STATE_PATH}: it was not made by kopgen new (or the file was deleted)")
    return old, False


def _plan_file(plan: UpdatePlan, old: State, path: str, owner: str, text: str, disk: str | bytes | None) -> None:
    """What the update does to one rendered file, given what is on disk and what kopgen recorded."""
    if disk is None:
        # one of the user's that they deleted stays deleted
        if owner == KOPGEN or (path not in old.user_base and path not in old.adopted):
            plan.writes[path] = text
            plan.created.append(path)
    elif disk == text or (path in old.adopted and owner != KOPGEN):  # adopted: the user's before kopgen came
        return
    elif owner == KOPGEN:  # an adopted kernel whose op got `compute` too: the user's file in kopgen's way
        if path in old.generated:
            if digest(disk) != old.generated[path]:
                plan.hand_edited.append(path)
        elif disk != old.user_base.get(path):  # a file kopgen never wrote, or the user's (an op no longer custom)
            plan.yours.append(path)
        plan.writes[path] = text
    elif path in old.user_base:
        _plan_merge(plan, path, base=old.user_base[path], theirs=text, disk=disk)
    elif plan.corrupt_state:
        return  # no merge base is known: the user's file (README, kernel body) stands as it is
    elif path in PROJECT_FILES and path not in old.generated:
        # A project file new to this kopgen (LICENSE, the CI workflow, ...) where the user keeps their own:
        # theirs, as `kopgen adopt` keeps them, never merged into.
        plan.state.adopted = sorted({*plan.state.adopted, path})
        plan.state.user_base.pop(path, None)
    elif path not in old.generated:  # a new skeleton where a file kopgen never wrote stands
        plan.yours.append(path)
        plan.writes[path] = text
    else:  # kopgen's kernel, now a skeleton (the op went `kernel: custom`): kopgen's old kernel left there would
        # call helpers _support no longer has. Edited by hand, it stops the update as any edited file of kopgen's
        # (--force backs it up): the user ports their edits into the skeleton.
        if digest(disk) != old.generated[path]:
            plan.hand_edited.append(path)
            plan.now_custom.append(path)
        plan.writes[path] = text


def _plan_merge(plan: UpdatePlan, path: str, base: str, theirs: str, disk: str | bytes) -> None:
    """A file of the user's: the template's change since the last render merged into it."""
    if base == theirs:
        return  # the template did not change it: the user's version stands
    if isinstance(disk, bytes):
        line, _, value = _bad_byte(disk)
        raise OutputError(f"{path} is not UTF-8 text (byte 0x{value:02x} at line {line}): kopgen update "
                          "merges it as UTF-8; convert it, then run kopgen update again")
    try:
        merged, conflicted = merge(disk, *without_deleted_placeholder(disk, base, theirs))
    except OutputError as error:  # git's message names its scratch copy, not the user's file
        raise OutputError(f"cannot merge {path}: {error}") from None
    if merged != disk:
        plan.writes[path] = merged
    if conflicted:
        plan.conflicts.append(path)
        plan.state.conflicts.append(path)


def _unchanged(repo: Path, state: State, spec_text: str) -> bool:
    """Same spec, same kopgen, every file of kopgen's as it wrote it: nothing to render. A recorded path where no
    regular file stands (deleted, or a folder now) is a change: the full plan says what it means, and a folder
    that is no file kopgen renders is left alone (its entry dropped from the state)."""
    if state.kopgen != __version__ or state.spec_sha256 != digest(spec_text):
        return False
    return all(
        (repo / path).is_file() and digest(read_file(repo, path)) == recorded
        for path, recorded in state.generated.items()
    )


# The first line of a skeleton's placeholder: the statement that throws until the user writes the body
# (Python's raise, C++'s check), which the user deletes, and what its message says.
_PLACEHOLDER = re.compile(r"^[ \t]*(raise NotImplementedError\(|(STD_)?TORCH_CHECK\(false,)")
_PLACEHOLDER_MESSAGE = re.compile(r"has no kernel yet: write the body of |: write its (CPU|CUDA) kernel in ")


def _placeholder(text: str) -> str | None:
    """The skeleton's placeholder statement in `text` (its lines, to where its parentheses close), or None."""
    lines = text.splitlines(keepends=True)
    for start, line in enumerate(lines):
        if _PLACEHOLDER.match(line):
            depth, end = 0, start
            for end in range(start, len(lines)):
                depth += lines[end].count("(") - lines[end].count(")")
                if depth <= 0:
                    break
            block = "".join(lines[start:end + 1])
            if _PLACEHOLDER_MESSAGE.search(block):
                return block
    return None


def without_deleted_placeholder(ours: str, base: str, theirs: str) -> tuple[str, str]:
    """(base, theirs) with the user's lines in place of the skeleton's placeholder, where the user deleted it
    (the raise) or wrote the body in its place (the C++ check), as the skeleton says to: else kopgen's change
    of a line beside it (the allocation under the raise, the signature above the check, when an argument is
    added) touches the user's change, and git merge-file leaves conflict markers."""
    block, new = _placeholder(base), _placeholder(theirs)
    if block is None or new is None or block in ours:  # a new render without one: the plain merge, loud
        return base, theirs
    before, after = base.split(block, 1)
    yours = _between(ours, before.splitlines(keepends=True)[-1:], after.splitlines(keepends=True)[:1])
    return before + yours + after, theirs.replace(new, yours, 1)


def _between(text: str, first: list[str], last: list[str]) -> str:
    """What `text` holds between a line `first` and the line `last` nearest after it, where the two stand
    closest ("" where it has no such pair)."""
    lines = text.splitlines(keepends=True)
    spans = []
    for start in (start for start, line in enumerate(lines) if [line] == first):
        end = next((end for end in range(start + 1, len(lines)) if [lines[end]] == last), None)
        if end is not None:
            spans.append((end - start, start, end))
    _, start, end = min(spans, default=(0, 0, 1))
    return "".join(lines[start + 1:end])


def merge(ours: str, base: str, theirs: str) -> tuple[str, bool]:
    """Three-way merge with `git merge-file`; returns (text, whether conflict markers were left)."""
    git = shutil.which("git")
    if git is None:
        raise OutputError("kopgen update merges your files with `git merge-file`: install git")
    with tempfile.TemporaryDirectory(prefix="kopgen-merge-") as scratch:
        paths = []
        for name, text in (("yours", ours), ("base", base), ("kopgen", theirs)):
            path = Path(scratch) / name
            path.write_text(text, encoding="utf-8", newline="\n")
            paths.append(str(path))
        result = subprocess.run(  # bytes: text mode would turn a lone \r into a line break, or decode by the locale
            [git, "merge-file", "-p", "-L", YOURS, "-L", "last kopgen render", "-L", NEW_RENDER, *paths],
            capture_output=True, check=False,
        )
    if result.returncode < 0 or result.returncode > 127:
        raise OutputError(f"git merge-file failed: {result.stderr.decode('utf-8', 'replace').strip()}")
    return result.stdout.decode("utf-8"), result.returncode > 0


def diff(repo: Path, plan: UpdatePlan, only: list[str] | None = None) -> str:
    """The unified diff of what the update would change (of the files in `only`, if given)."""
    removed = plan.deletes + [path for path in plan.hand_edited if path not in plan.writes]
    chunks = []
    for path, text in sorted({**plan.writes, **dict.fromkeys(removed)}.items()):
        if only is not None and path not in only:
            continue
        old = read_file(repo, path) or ""
        new = f"b/{path}" if text is not None else "/dev/null"
        if isinstance(old, bytes):
            chunks.append(f"Binary files a/{path} and {new} differ\n")  # as git says of a file that is not text
        else:
            chunks += difflib.unified_diff(old.splitlines(True), (text or "").splitlines(True), f"a/{path}", new)
    return "".join(chunks)


def backup(repo: Path, paths: list[str]) -> str:
    """Copy `paths`, bytes as they are, into a new folder .kopgen/backup/N/ (one per update, never
    reused, so no backup overwrites another); return that folder."""
    root = inside(repo, BACKUP_DIR)
    root.mkdir(parents=True, exist_ok=True)
    number = max((int(p.name) for p in root.iterdir() if re.fullmatch("[0-9]+", p.name)), default=0) + 1
    while True:  # mkdir claims the number; an update running beside this one takes the next
        try:
            (root / str(number)).mkdir()
            break
        except FileExistsError:
            number += 1
    for path in paths:
        target = root / str(number) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / path, target)
    return f"{BACKUP_DIR}/{number}/"


def apply_update(repo: Path, plan: UpdatePlan, force: bool = False) -> str | None:
    """Write the plan: backups of what it overwrites, then files one by one (each atomically), then
    the state. Returns the backup folder, if there was anything to back up."""
    if plan.overwrites and not force:
        raise OutputError(f"refusing to overwrite your changes to {', '.join(plan.overwrites)} (see --force)")
    for path in [*plan.writes, *plan.deletes, *plan.hand_edited, STATE_PATH]:  # all checked before anything is written
        inside(repo, path)
    saved = backup(repo, plan.overwrites) if plan.overwrites else None
    for path, text in sorted(plan.writes.items()):
        replace_file(repo, path, text.replace("\n", "\r\n") if path in plan.crlf else text)
    for path in plan.deletes + [p for p in plan.hand_edited if p not in plan.writes]:
        (repo / path).unlink(missing_ok=True)
    if plan.state is not None and read_file(repo, STATE_PATH) != plan.state.to_json():
        replace_file(repo, STATE_PATH, plan.state.to_json())
    return saved
