"""The generated C++/CUDA reads as hand-written: lines within 100 characters, and the csrc/ templates
(with setup.py.j2) only print: the decisions and the C++ text are kopgen/lang/cpp.py's."""

from __future__ import annotations

from .conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
CPP_SUFFIXES = (".cpp", ".h", ".cu", ".cuh")
TEMPLATES = ROOT / "templates"
CPP_TEMPLATES = sorted([*(TEMPLATES / "package" / "csrc").rglob("*.j2"), TEMPLATES / "setup.py.j2"])


def test_golden_cpp_lines_fit_in_100_characters():
    sources = [p for p in sorted(GOLDEN.rglob("*")) if p.suffix in CPP_SUFFIXES]
    assert any(p.suffix == ".cuh" for p in sources) and any(p.suffix == ".cu" for p in sources)
    long = [
        f"{path.relative_to(GOLDEN)}:{number}: {len(line)} characters"
        for path in sources
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if len(line) > 100
    ]
    assert not long, "\n".join(long)
