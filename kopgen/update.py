"""`kopgen update`: bring a generated repo in line with its edited kopgen.yaml.

kopgen's files are rewritten whole, unless the user edited one by hand (its hash differs from
the one recorded at the last generation): then nothing is written unless --force, which keeps
a backup. The user's files get a three-way merge (`git merge-file`): base, what kopgen rendered
last time (kept in .kopgen/state.json); theirs, the new render; ours, the file on disk.

Writes are atomic per file and the state is written last, so an update stopped at any point
leaves every file old or new, and the next `kopgen update` finishes the job.
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__
from .pipeline import SPEC_PATH, load_spec, render_repo, state_of
from .plan import KOPGEN
from .state import STATE_PATH, State, digest
from .writer import OutputError, inside, replace_file

BACKUP_DIR = ".kopgen/backup"


@dataclass
class UpdatePlan:
    writes: dict[str, str] = field(default_factory=dict)  # path -> new text
    deletes: list[str] = field(default_factory=list)  # kopgen's files of removed ops
    hand_edited: list[str] = field(default_factory=list)  # kopgen's files the user changed
    conflicts: list[str] = field(default_factory=list)  # user files whose merge left markers
    kept: list[str] = field(default_factory=list)  # user files of removed ops: kept, never deleted
    state: State | None = None  # what .kopgen/state.json says afterwards

    @property
    def changes(self) -> bool:
        return bool(self.writes or self.deletes or self.hand_edited)


def read_text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def plan_update(repo: Path) -> UpdatePlan:
    """What an update of `repo` would do; reads the repo, writes nothing."""
    old = State.read(repo)
    if old is None:
        raise OutputError(f"{repo} has no {STATE_PATH}: it was not made by kopgen new (or the file was deleted)")
    spec_text = read_text(repo / SPEC_PATH)
    if spec_text is None:
        raise OutputError(f"{repo} has no {SPEC_PATH}")
    if _unchanged(repo, old, spec_text):
        return UpdatePlan(state=old)
    package = load_spec(repo / SPEC_PATH)
    files = render_repo(package)
    plan = UpdatePlan(state=state_of(package, files))
    for path, (owner, text) in sorted(files.items()):
        if path == SPEC_PATH:
            continue  # the input of the update: the user's, never rewritten
        disk = read_text(repo / path)
        if owner == KOPGEN:
            if disk == text:
                continue
            if disk is not None and path in old.generated and digest(disk) != old.generated[path]:
                plan.hand_edited.append(path)
            plan.writes[path] = text
        elif disk is None:
            if path not in old.user_base:  # new (a new op's kernel skeleton); one the user deleted stays deleted
                plan.writes[path] = text
        else:
            base = old.user_base.get(path)
            if base is None or base == text:
                continue  # the template did not change it: the user's version stands
            merged, conflicted = merge(ours=disk, base=base, theirs=text)
            if merged != disk:
                plan.writes[path] = merged
            if conflicted:
                plan.conflicts.append(path)
    for path, recorded in sorted(old.generated.items()):
        disk = read_text(repo / path)
        if path not in files and disk is not None:
            (plan.hand_edited if digest(disk) != recorded else plan.deletes).append(path)
    plan.kept = [path for path in sorted(old.user_base) if path not in files and (repo / path).exists()]
    return plan


def _unchanged(repo: Path, state: State, spec_text: str) -> bool:
    """Same spec, same kopgen, every file of kopgen's as it wrote it: nothing to render."""
    if state.kopgen != __version__ or state.spec_sha256 != digest(spec_text):
        return False
    return all(
        (text := read_text(repo / path)) is not None and digest(text) == recorded
        for path, recorded in state.generated.items()
    )


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
        result = subprocess.run(
            [git, "merge-file", "-p", "-L", "yours", "-L", "last kopgen render", "-L", "new kopgen render", *paths],
            capture_output=True, text=True, check=False,
        )
    if result.returncode < 0 or result.returncode > 127:
        raise OutputError(f"git merge-file failed: {result.stderr.strip()}")
    return result.stdout, result.returncode > 0


def diff(repo: Path, plan: UpdatePlan, only: list[str] | None = None) -> str:
    """The unified diff of what the update would change (of the files in `only`, if given)."""
    chunks = []
    for path, text in sorted(plan.writes.items()):
        if only is not None and path not in only:
            continue
        old = read_text(repo / path) or ""
        chunks += difflib.unified_diff(old.splitlines(True), text.splitlines(True), f"a/{path}", f"b/{path}")
    for path in plan.deletes if only is None else []:
        old = read_text(repo / path) or ""
        chunks += difflib.unified_diff(old.splitlines(True), [], f"a/{path}", "/dev/null")
    return "".join(chunks)


def apply_update(repo: Path, plan: UpdatePlan, force: bool = False) -> None:
    """Write the plan: files one by one (each atomically), then the state."""
    if plan.hand_edited and not force:
        raise OutputError("refusing to overwrite hand-edited files (see --force)")
    for path in [*plan.writes, *plan.deletes, *plan.hand_edited]:  # all checked before anything is written
        inside(repo, path)
    for path in plan.hand_edited:
        if (repo / path).is_file():
            replace_file(repo, f"{BACKUP_DIR}/{path}", (repo / path).read_text(encoding="utf-8"))
    for path, text in sorted(plan.writes.items()):
        replace_file(repo, path, text)
    for path in plan.deletes + [p for p in plan.hand_edited if p not in plan.writes]:
        (repo / path).unlink(missing_ok=True)
    if plan.state is not None and read_text(repo / STATE_PATH) != plan.state.to_json():
        replace_file(repo, STATE_PATH, plan.state.to_json())
