"""The project around the ops: license, authors, supported Python, repository (spec keys with defaults).

They reach only the user's skeleton (LICENSE, pyproject.toml, the CI workflow, README); each is checked
here at its node, FILE:LINE:COL, before anything is written.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from .errors import Diagnostics
from .loader import Mapping, Scalar, Sequence

LICENSES = ["Apache-2.0", "BSD-3-Clause", "MIT", "none"]  # SPDX identifiers; `none`: no LICENSE file
DEFAULT_LICENSE = "BSD-3-Clause"  # PyTorch's and pytorch/extension-cpp's
OLDEST_PYTHON = (3, 10)  # torch 2.10, the oldest torch kopgen generates for, needs Python 3.10
NEWEST_PYTHON = "3.13"  # the newest Python the generated CI tests beside the oldest one
DEFAULT_PYTHON = "3.10"

_AUTHOR = re.compile(r"^(?P<name>[^<>\s](?:[^<>]*[^<>\s])?)(?:\s+<(?P<email>[^<>\s@]+@[^<>\s@]+\.[^<>\s@]+)>)?$")
_PYTHON = re.compile(r"^3\.(0|[1-9][0-9]?)$")
_URL = re.compile(r"^https?://[^\s/\"'<>]+(/[^\s\"'<>]*)?$")


@dataclass(frozen=True)
class Author:
    name: str
    email: str | None = None


@dataclass(frozen=True)
class Project:
    license: str = DEFAULT_LICENSE
    authors: tuple[Author, ...] = ()
    python: str = DEFAULT_PYTHON  # the oldest Python the package supports, X.Y
    repository: str | None = None

    @property
    def python_versions(self) -> tuple[str, ...]:
        """The Pythons the CI tests: the oldest supported and the newest, once where they are one."""
        return tuple(dict.fromkeys([self.python, max(self.python, NEWEST_PYTHON, key=_version_key)]))


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def resolve_project(root: Mapping, diagnostics: Diagnostics) -> Project:
    """The project keys of a spec that passed check_format (types and the license's enum are checked)."""
    license_node, python_node = root.get("license"), root.get("python")
    authors = tuple(author for node in _items(root.get("authors")) if (author := _author(node, diagnostics)))
    python = python_node.value if isinstance(python_node, Scalar) else DEFAULT_PYTHON
    if not _PYTHON.fullmatch(python):
        diagnostics.error(python_node.value_position, f"python {python!r} must be a Python version X.Y, like "
                                                      f"'{DEFAULT_PYTHON}' (the oldest the package supports)")
    elif _version_key(python) < OLDEST_PYTHON:
        diagnostics.error(python_node.value_position, f"python {python!r} is too old: torch 2.10, the oldest torch "
                                                      f"kopgen generates for, needs Python {DEFAULT_PYTHON} or later")
    repository_node = root.get("repository")
    repository = repository_node.value if isinstance(repository_node, Scalar) else None
    if repository is not None and not _URL.fullmatch(repository):
        diagnostics.error(repository_node.value_position, f"repository {repository!r} must be an http(s) URL, like "
                                                          "https://github.com/you/kbook")
    return Project(
        license=license_node.value if isinstance(license_node, Scalar) else DEFAULT_LICENSE,
        authors=authors,
        python=python,
        repository=repository,
    )


def _items(node: object) -> tuple:
    return node.items if isinstance(node, Sequence) else ()


def _author(node: Scalar, diagnostics: Diagnostics) -> Author | None:
    # Authors become header lines of the wheel's METADATA: a line break would start a header of its own
    # (`Requires-Dist: ...`), so control characters and line or paragraph separators are refused.
    bad = next((c for c in node.value if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
    if bad is not None:
        diagnostics.error(node.value_position, f"author {node.value!r} must not hold a line break or control "
                                               f"character (U+{ord(bad):04X})")
        return None
    match = _AUTHOR.fullmatch(node.value)
    if match is None:
        diagnostics.error(node.value_position, f"author {node.value!r} must be 'Name' or 'Name <email>', like "
                                               "'Ada Lovelace <ada@example.com>'")
        return None
    return Author(match["name"], match["email"])
