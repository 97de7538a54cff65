"""docs/format.md cannot drift from kopgen: every whole spec it shows passes `kopgen check`.

A whole spec is a ```yaml block right after a `<!-- spec: NAME -->` line; every yaml block that
starts with `kopgen:` must be marked so, so none is left out unnoticed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen.cli import main

FORMAT_MD = Path(__file__).resolve().parent.parent / "docs" / "format.md"
_BLOCK = re.compile(r"(?:<!-- spec: (?P<name>\w+) -->\n)?```yaml\n(?P<text>.*?)```", re.DOTALL)

# Specs of issue 14 features that other engineers are building now: each must fail `kopgen check`
# with a spec error (never a traceback) until its part lands, and then be removed from here.
PENDING = {
    "custom_types": "mutating kernel ops with Tensor!? and a return, `reference:` mappings, int[]/str/Generator? "
                    "arguments of kernel ops (A, with C's C++ types)",
    "bound": "kernel: {source: ...} (D)",
}


def _blocks() -> list[tuple[str | None, str]]:
    return [(m["name"], m["text"]) for m in _BLOCK.finditer(FORMAT_MD.read_text(encoding="utf-8"))]


def _specs() -> dict[str, str]:
    return {name: text for name, text in _blocks() if name}


def test_every_whole_spec_is_marked_and_names_are_unique():
    names = [name for name, _ in _blocks() if name]
    assert len(names) == len(set(names)), names
    unmarked = [text.splitlines()[0] for name, text in _blocks() if not name and text.startswith("kopgen:")]
    assert unmarked == [], "a whole spec without `<!-- spec: NAME -->` before it"
    assert set(PENDING) <= set(names), "PENDING names a spec docs/format.md no longer has"


@pytest.mark.parametrize("name", sorted(_specs()))
def test_spec_in_docs_passes_kopgen_check(name, tmp_path):
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(_specs()[name], encoding="utf-8")
    result = CliRunner().invoke(main, ["check", str(spec)])
    if name not in PENDING:
        assert result.exit_code == 0, result.output
        assert result.output.splitlines()[0].endswith(f"from {spec}"), result.output  # the plan
        return
    assert result.exit_code != 0, f"{name} passes kopgen check now: remove it from PENDING"
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert all(f"{spec}:" in line and ": error: " in line for line in result.output.splitlines()), result.output
    pytest.xfail(PENDING[name])
