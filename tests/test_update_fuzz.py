"""Property: whatever lines a user adds to a generated repo's files (kopgen's or their own, LF or CRLF),
and however the spec then changes, `kopgen update` (with --force where it refuses) keeps every one of them:
in the file, merged, or in the backup it makes first. A spec the edits break stops the update with a
spec error, and the repo is left as it was.

Derandomized, so that CI sees the same examples every run (KOPGEN_FUZZ_EXAMPLES raises the count)."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kopgen import generate
from kopgen.cli import main

from .test_update import BASE

EXAMPLES = int(os.environ.get("KOPGEN_FUZZ_EXAMPLES", "25"))
SPEC_EDITS = [
    ('compute: "a * b + c"', 'compute: "a * b - c"'),
    ("ops:\n", 'ops:\n  - schema: "mymul(Tensor a, Tensor b) -> Tensor"\n    compute: "a * b"\n'),
    ("package: kwalk", "package: kwalk\ndescription: other words"),
    ("dtypes: [float32, float64]", "dtypes: [float32, float64, bfloat16]"),
    (('  - schema: "pairsum(Tensor x) -> Tensor"\n    kernel: custom\n    reference: "x.unflatten(-1, (-1, 2)).sum(-1)"\n'
      '    fake: {shape: "x.shape[:-1] + (x.shape[-1] // 2,)"}\n'), ""),  # an op removed
    ('kernel: custom\n    reference: "x.unflatten(-1, (-1, 2)).sum(-1)"\n    fake: {shape: "x.shape[:-1] + (x.shape[-1] // 2,)"}',
     'compute: "x * 2"'),  # a custom op becoming kopgen's
    ('compute: "a * b + c"', 'kernel: custom\n    reference: "a * b + c"\n    fake: {shape: a.shape}'),  # and back
    ("registration: custom_op", "registration: library"),
]


def everything(repo: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(repo.rglob("*")) if p.is_file())


def update(repo: Path):
    """kopgen update, then --force where it refuses to overwrite (the user's changes backed up first)."""
    result = CliRunner().invoke(main, ["update", str(repo)])
    if result.exit_code == 1 and "--force" in result.output:
        result = CliRunner().invoke(main, ["update", str(repo), "--force"])
    assert result.exit_code in (0, 1) or "error:" in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_update_keeps_every_line_a_user_added(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("walk")
    spec = root / "kwalk.yaml"
    spec.write_text(BASE)
    repo = generate(spec, root / "repo")
    files = sorted(p for p in repo.rglob("*") if p.is_file() and ".kopgen" not in p.parts and p.name != "kopgen.yaml")
    marks = []
    for k in range(data.draw(st.integers(1, 4))):
        path = data.draw(st.sampled_from(files))
        lines = path.read_text().splitlines(True)
        mark = f"# a line of mine, {k}"
        lines.insert(data.draw(st.integers(0, len(lines))), mark + "\n")
        text = "".join(lines)
        path.write_bytes((text.replace("\n", "\r\n") if data.draw(st.booleans()) else text).encode())
        marks.append(mark)
    for _ in range(data.draw(st.integers(1, 2))):  # one update or two, after spec edits each
        text = (repo / "kopgen.yaml").read_text()
        for old, new in data.draw(st.lists(st.sampled_from(SPEC_EDITS), min_size=1, max_size=3, unique=True)):
            text = text.replace(old, new, 1)
        (repo / "kopgen.yaml").write_text(text)
        update(repo)
        kept = everything(repo)
        assert all(mark in kept for mark in marks), [mark for mark in marks if mark not in kept]
