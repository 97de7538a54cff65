"""Bad specs: every one is reported as FILE:LINE:COL: error: ..., exit 2, nothing written.

The corpus is tests/bad_specs/: NAME.yaml, one per kind of failure, and NAME.expected, its whole
message (snapshot style; `spec.yaml` stands for the file's path), and NAME/, where present, the files
copied beside the spec (the existing kernels a spec binds). Regenerate an expected message
after an intended change with: KOPGEN_UPDATE_BAD_SPECS=1 pytest tests/test_bad_specs.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen.cli import main

CORPUS = Path(__file__).parent / "bad_specs"
SPECS = sorted(CORPUS.glob("*.yaml"))


def test_the_corpus_covers_forty_kinds():
    print(f"bad-spec kinds covered: {len(SPECS)}")
    assert len(SPECS) >= 40
    assert all(spec.with_suffix(".expected").is_file() for spec in SPECS)


@pytest.mark.parametrize("source", SPECS, ids=[spec.stem for spec in SPECS])
def test_bad_spec_is_reported_at_its_node(tmp_path, source):
    spec = tmp_path / "spec.yaml"
    shutil.copyfile(source, spec)
    beside = source.with_suffix("")  # files a spec that binds existing kernels points at, copied beside it
    if beside.is_dir():
        shutil.copytree(beside, tmp_path, dirs_exist_ok=True)
    ours = sorted(["spec.yaml", *(p.name for p in beside.iterdir())] if beside.is_dir() else ["spec.yaml"])
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["new", str(spec), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ours
    message = result.output.strip().replace(str(spec), "spec.yaml")
    assert all(line.startswith("spec.yaml:") and ": error: " in line for line in message.splitlines())
    expected = source.with_suffix(".expected")
    if os.environ.get("KOPGEN_UPDATE_BAD_SPECS"):
        expected.write_text(message + "\n")
    assert message == expected.read_text().strip()
