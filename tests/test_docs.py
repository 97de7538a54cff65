"""docs/format.md cannot drift from kopgen: every whole spec it shows passes `kopgen check`.

A whole spec is a ```yaml block right after a `<!-- spec: NAME -->` line; every yaml block that
starts with `kopgen:` must be marked so, so none is left out unnoticed. A spec that binds existing
kernels (`source: {DEVICE: PATH:FUNCTION}`) is marked `<!-- spec: NAME, with its source files -->`:
the test writes each PATH beside it, defining FUNCTION, as the user's repo would hold it.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kopgen.cli import main
from kopgen.format import (
    AUTOCASTS,
    CPU_KERNELS,
    CUDA_KERNELS,
    DTYPES,
    OP_PROPERTIES,
    REDUCTIONS,
    ROUTES,
    SPEC_SCHEMA,
    TAGS,
)
from kopgen.project import LICENSES

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


# docs/format.md against the JSON Schema (kopgen schema) and the command line: each key table lists exactly the
# schema's keys, says which are required, and every choice of an enum; each command and option is described.

_TICKED = re.compile(r"`([^`]+)`")


def _section(title: str) -> str:
    text = FORMAT_MD.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def _key_rows(title: str) -> dict[str, str]:
    """The rows of the section's `| key | meaning |` table: each key its first cell names -> the row."""
    section = _section(title)
    table = section[section.index("| key | meaning |") :].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[2:]:
        first, rest = line.split(" | ", 1)
        for key in _TICKED.findall(first):
            rows[key] = rest
    return rows


def _choices(row: str, key: str) -> list[str]:
    """`{cpu: triton\\|python\\|cpp, ...}` -> the choices of `key` written in a row."""
    return re.search(rf"{key}: ([\w\\|]+)", row)[1].split("\\|")


@pytest.mark.parametrize(
    "title, schema",
    [
        ("The file", SPEC_SCHEMA),
        ("An op", SPEC_SCHEMA["properties"]["ops"]["items"]),
        ("`tests`", OP_PROPERTIES["tests"]),
    ],
    ids=["file", "op", "tests"],
)
def test_each_key_table_is_the_json_schema(title, schema):
    rows = _key_rows(title)
    assert sorted(rows) == sorted(schema["properties"])
    assert sorted(key for key, row in rows.items() if "(required)" in row) == sorted(schema.get("required", []))
    for key, spec in schema["properties"].items():
        if "default" in spec:
            assert f"`{spec['default']}`" in rows[key] and "default" in rows[key], key


def test_the_choices_in_the_docs_are_the_schema_enums():
    op, file = _key_rows("An op"), _key_rows("The file")
    assert _TICKED.findall(op["registration"]) == ROUTES
    assert _TICKED.findall(op["dtypes"]) == DTYPES
    assert [tag for tag in _TICKED.findall(op["tags"]) if tag != "[]"] == TAGS
    assert sorted(_choices(op["backends"], "cpu")) == sorted(CPU_KERNELS)
    assert sorted(_choices(op["backends"], "cuda")) == sorted(CUDA_KERNELS)
    assert _choices(op["reduce"], "op") == REDUCTIONS
    assert [word for word in _TICKED.findall(op["autocast"]) if word in AUTOCASTS] == AUTOCASTS
    assert [word for word in _TICKED.findall(file["license"]) if word in LICENSES] == LICENSES
    excluded = re.search(r"every key of an op except (.*)\)", file["defaults"])[1]
    defaults = SPEC_SCHEMA["properties"]["defaults"]["properties"]
    assert sorted(_TICKED.findall(excluded)) == sorted(set(OP_PROPERTIES) - set(defaults))
    sample = _section("`tests`").split("`tests: args:`, per argument:")[1]
    assert sorted(key for line in sample.splitlines() if line.startswith("- ") for key in
                  _TICKED.findall(line.split(" (")[0])) == sorted(OP_PROPERTIES["tests"]["properties"]["args"]
                                                                  ["additionalProperties"]["properties"])


def test_every_command_and_option_is_in_the_docs():
    section = _section("The command line")
    for name, command in main.commands.items():
        assert f"| `kopgen {name}" in section, name
        for option in (param for param in command.params if isinstance(param, click.Option)):
            if option.name != "help":
                assert any(f"`{flag}" in section or f"{flag} " in section for flag in option.opts), (name, option.opts)
    assert [int(code) for code in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)] == [0, 1, 2, 130]
