"""The project skeleton of a new repo, rendered by copier from templates/project.

The user's files, created once and theirs afterwards: copier renders pyproject.toml, README.md and
.gitignore; kopgen the CI workflow, ci.sh, the pre-commit configuration and LICENSE (copier's cost per
file). kopgen renders the operator code itself (plan.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import tomli_w

from .model import Package
from .project import Project
from .render import environment, templates_dir

# The ruff whose layout kopgen's Python follows (lang/layout.py, checked against it in kopgen's tests): the
# generated CI and pre-commit pin it, so that a newer ruff's layout never fails a repo that kopgen wrote.
RUFF_VERSION = "0.17.6"

# The skeleton's files around the package (templates/project); a user's own file at one of these paths is kept as
# theirs by `kopgen update` (a repo made before kopgen wrote it), where a file at a kernel skeleton's path stops it.
PROJECT_FILES = frozenset({
    "README.md", "pyproject.toml", "LICENSE", ".gitignore", "ci.sh", ".github/workflows/ci.yml",
    ".pre-commit-config.yaml",
})
# The ones kopgen renders itself, from templates/project_files: copier makes a git call per file it renders
# (_sync_git_index_executable_bit), 15 ms each here, which `kopgen new`'s second would feel.
_RENDERED = {"ci.sh": "ci.sh.j2", ".github/workflows/ci.yml": "ci.yml.j2", ".pre-commit-config.yaml": "pre-commit-config.yaml.j2"}
_RENDERED_ONLY = ("license_text", "ci_pythons", "ruff_version")  # answers only those files read


def toml_value(value: object) -> str:
    """`value` as TOML source (a quoted, escaped string, an array ...), for the template to print."""
    return tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")


# What opens a Markdown block at the start of a line: a heading, quote, list item, thematic break, code fence,
# table, link definition, ordered list item (CommonMark); `<` is escaped everywhere.
_BLOCK_START = re.compile(r"[#>*+=_`~|\[-]|\d{1,9}[.)]")


def readme_paragraph(text: str) -> str:
    """`text` as one paragraph of plain text in the README: its whitespace (line breaks included) collapsed to
    spaces, a block marker at its start, every `<` and `\\` escaped, so that no description opens a block or an HTML
    element that runs past it (an unclosed code fence, HTML comment or `<details>` would take the README's rest)."""
    line = " ".join(text.split()).replace("\\", "\\\\").replace("<", "\\<")
    start = _BLOCK_START.match(line)
    return line if start is None else f"{line[:start.end() - 1]}\\{line[start.end() - 1:]}"


def skeleton_answers(package: Package) -> dict[str, object]:
    summary = (package.description.strip().splitlines() or [""])[0]  # package metadata takes one line
    return {
        "package": package.name,
        "namespace": package.namespace,
        "version": package.version,
        "description": readme_paragraph(package.description),
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
        "pins_torch": bool(package.compiled_ops) and not package.stable_abi,  # setup.py writes the dependencies
        **project_answers(package.name, package.project),
    }


def project_answers(name: str, project: Project) -> dict[str, object]:
    """The project keys as the skeleton prints them: TOML values, the LICENSE's text, the CI's Pythons."""
    holders = ", ".join(author.name for author in project.authors) or f"the {name} authors"
    authors = [
        "{" + ", ".join(f"{key} = {toml_value(value)}" for key, value in vars(author).items() if value) + "}"
        for author in project.authors
    ]
    licensed = project.license != "none"
    return {
        "license_toml": toml_value(project.license) if licensed else "",
        "license": project.license if licensed else "",
        "license_text": license_text(project.license, holders) if licensed else "",
        "authors_toml": f"[{', '.join(authors)}]" if authors else "",
        "requires_python_toml": toml_value(f">={project.python}"),
        "repository_toml": toml_value(project.repository) if project.repository else "",
        "repository": project.repository or "",
        "ruff_target": "py" + project.python.replace(".", ""),
        "ci_pythons": "[" + ", ".join(f'"{version}"' for version in project.python_versions) + "]",
        "ruff_version": RUFF_VERSION,
    }


def license_text(license: str, holders: str) -> str:
    """The license's text (templates/licenses/), its copyright line naming the holders; no year, so that
    the same spec gives the same bytes."""
    text = (templates_dir() / "licenses" / f"{license}.txt").read_text(encoding="utf-8")
    return text.replace("COPYRIGHT_HOLDERS", holders)


def skeleton_files(package: Package) -> dict[str, str]:
    """The skeleton as text: path -> content (copier renders it into a scratch folder; kopgen the project files)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kopgen-skeleton-") as scratch:
        render_skeleton(Path(scratch), package)
        root = Path(scratch)
        files = {
            path.relative_to(root).as_posix(): path.read_text(encoding="utf-8")
            for path in sorted(root.rglob("*"))
            if path.is_file()
        }
    answers = skeleton_answers(package)
    for path, template in _RENDERED.items():
        files[path] = environment().get_template(f"project_files/{template}").render(**answers)
    if answers["license_text"]:
        files["LICENSE"] = answers["license_text"]
    return dict(sorted(files.items()))


def render_skeleton(destination: Path, package: Package) -> None:
    import copier  # imported here: it is the slowest import of kopgen, and only `new` needs it

    copier.run_copy(
        str(templates_dir() / "project"),
        str(destination),
        data={key: value for key, value in skeleton_answers(package).items() if key not in _RENDERED_ONLY},
        defaults=True,
        overwrite=True,
        quiet=True,
        unsafe=False,  # the template runs no tasks, so it never needs trust
        vcs_ref=None,
    )
