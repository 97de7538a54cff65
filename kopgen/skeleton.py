"""The project skeleton of a new repo, rendered by copier from templates/project.

copier renders the user's files (pyproject.toml, README.md, .gitignore): they are created
once and belong to the user afterwards. kopgen renders the operator code itself.
"""

from __future__ import annotations

from pathlib import Path

import tomli_w

from .model import Package
from .render import templates_dir


def toml_value(value: object) -> str:
    """`value` as TOML source (a quoted, escaped string, an array ...), for the template to print."""
    return tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")


def skeleton_answers(package: Package) -> dict[str, object]:
    summary = (package.description.strip().splitlines() or [""])[0]  # package metadata takes one line
    return {
        "package": package.name,
        "namespace": package.namespace,
        "version": package.version,
        "description": package.description,
        # pyproject.toml's values, written by a TOML writer: no spec text can end a string there.
        "name_toml": toml_value(package.name),
        "version_toml": toml_value(package.version),
        "summary_toml": toml_value(summary),
        "include_toml": f"[{toml_value(package.name)}, {toml_value(package.name + '.*')}]",
        "ops": [op.name for op in package.ops],
        "needs_triton": package.needs_triton,
        "needs_interpreter": package.needs_interpreter,
        "needs_extension": bool(package.compiled_ops),
        "needs_cuda": bool(package.cuda_ops),
    }


def skeleton_files(package: Package) -> dict[str, str]:
    """The skeleton as text: path -> content (copier renders it into a scratch folder)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kopgen-skeleton-") as scratch:
        render_skeleton(Path(scratch), package)
        root = Path(scratch)
        return {
            path.relative_to(root).as_posix(): path.read_text(encoding="utf-8")
            for path in sorted(root.rglob("*"))
            if path.is_file()
        }


def render_skeleton(destination: Path, package: Package) -> None:
    import copier  # imported here: it is the slowest import of kopgen, and only `new` needs it

    copier.run_copy(
        str(templates_dir() / "project"),
        str(destination),
        data=skeleton_answers(package),
        defaults=True,
        overwrite=True,
        quiet=True,
        unsafe=False,  # the template runs no tasks, so it never needs trust
        vcs_ref=None,
    )
