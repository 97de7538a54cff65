"""`kopgen new` makes its repo a git repository, as `cargo new` does, unless it lies inside one already."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def init_repository(target: Path) -> str:
    """Run `git init` in `target` where it is not inside a git work tree; return what happened, in words."""
    git = shutil.which("git")
    if git is None:
        return "git is not installed: the repo is not a git repository"
    inside = subprocess.run([git, "rev-parse", "--is-inside-work-tree"], cwd=target, capture_output=True, check=False)
    if inside.returncode == 0:
        return "inside a git repository already: no git init"
    result = subprocess.run([git, "init", "--quiet"], cwd=target, capture_output=True, text=True, check=False)
    if result.returncode != 0:  # the repo is written: a failed init is worth a line, not an error
        return f"git init failed: {result.stderr.strip()}"
    return f"initialized a git repository in {target}"
