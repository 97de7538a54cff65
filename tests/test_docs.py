"""docs/format.md cannot drift from kopgen: every whole spec it shows passes `kopgen check`.

A whole spec is a ```yaml block right after a `<!-- spec: NAME -->` line; every yaml block that
starts with `kopgen:` must be marked so, so none is left out unnoticed. A spec that binds existing
kernels (`source: {DEVICE: PATH:FUNCTION}`) is marked `<!-- spec: NAME, with its source files -->`:
the test writes each PATH beside it, defining FUNCTION, as the user's repo would hold it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen.cli import main

FORMAT_MD = Path(__file__).resolve().parent.parent / "docs" / "format.md"
_BLOCK = re.compile(
    r"(?:<!-- spec: (?P<name>\w+)(?P<sources>, with its source files)? -->\n)?```yaml\n(?P<text>.*?)```", re.DOTALL
)
_SOURCE = re.compile(r"^\s+(?:cpu|cuda): ([\w./-]+):(\w+)$", re.MULTILINE)  # a bound kernel's PATH:FUNCTION


def _blocks() -> list[tuple[str | None, str]]:
    return [(m["name"], m["text"]) for m in _BLOCK.finditer(FORMAT_MD.read_text(encoding="utf-8"))]


def _specs() -> dict[str, str]:
    return {name: text for name, text in _blocks() if name}


def _with_sources() -> set[str]:
    return {m["name"] for m in _BLOCK.finditer(FORMAT_MD.read_text(encoding="utf-8")) if m["sources"]}


def _write_sources(spec_text: str, folder: Path) -> None:
    """Each bound kernel's file, declaring its function: kopgen reads the file for it, `check` builds nothing."""
    paths = _SOURCE.findall(spec_text)
    assert paths, "a spec marked `with its source files` binds none"
    for path, function in paths:
        file = folder / path
        file.parent.mkdir(parents=True, exist_ok=True)
        python = path.endswith(".py")
        file.write_text(f"def {function}(*args): ...\n" if python else f"at::Tensor {function}();\n", encoding="utf-8")


def test_every_whole_spec_is_marked_and_names_are_unique():
    names = [name for name, _ in _blocks() if name]
    assert len(names) == len(set(names)), names
    unmarked = [text.splitlines()[0] for name, text in _blocks() if not name and text.startswith("kopgen:")]
    assert unmarked == [], "a whole spec without `<!-- spec: NAME -->` before it"


@pytest.mark.parametrize("name", sorted(_specs()))
def test_spec_in_docs_passes_kopgen_check(name, tmp_path):
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(_specs()[name], encoding="utf-8")
    if name in _with_sources():
        _write_sources(_specs()[name], tmp_path)
    result = CliRunner().invoke(main, ["check", str(spec)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith(f"from {spec}"), result.output  # the plan
    assert ": warning: " not in result.output, result.output  # the docs' specs show no trap


def test_a_bound_spec_without_its_files_fails(tmp_path):
    """The files the test writes are what makes the bound spec pass: without them it is an error."""
    (name,) = _with_sources()
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(_specs()[name], encoding="utf-8")
    result = CliRunner().invoke(main, ["check", str(spec)])
    assert result.exit_code == 2 and "does not exist in the spec's folder" in result.output, result.output
