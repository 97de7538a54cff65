"""What the generated suite says when a kernel or a backward raises: the failure itself, not a trap's
headline. Before, opcheck's failures were each labelled by the test that saw them (a kernel that raises
read as "trap 1 (undeclared mutation)" and "trap 2 (fake kernel)"), and gradcheck blamed the first input
for a backward formula of another that raised (a gradient of the wrong shape)."""

from __future__ import annotations

import os
import subprocess
import sys

from kopgen import generate

SPEC = """\
kopgen: 1
package: kmsg
defaults:
  registration: library
  backends: {cpu: python}
  dtypes: [float32]
ops:
  - schema: "mulw(Tensor x, Tensor w, Tensor b) -> Tensor"
    compute: "x * w + b"
    backward: {x: "grad * w", w: "grad * x", b: "grad.sum(0)"}
    tests: {shapes: [{x: [8, 6], w: [6], b: [1, 6]}]}
  - schema: "picky(Tensor x) -> Tensor"
    kernel: custom
    reference: "x * 2"
    fake: {shape: x.shape}
"""


def test_a_raising_kernel_and_a_raising_backward_are_said_to_raise(tmp_path):
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(SPEC)
    repo = generate(spec, tmp_path / "repo")
    kernel = repo / "kmsg/kernels/picky.py"  # the user's kernel refuses 8 rows
    text = kernel.read_text()
    body = "    out = _support.picky_output(x)\n"
    assert body in text
    kernel.write_text(text.replace(body, body + '    if x.shape[0] == 8:\n        raise ValueError("picky: 8 rows")\n'))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n0",
         "tests/test_picky.py::TestPicky::test_opcheck", "tests/test_mulw.py::TestMulw::test_gradcheck"],
        cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, capture_output=True, text=True, check=False,
    )
    out = result.stdout
    assert result.returncode == 1, out[-3000:]
    assert "the op raises on this sample, before any trap: ValueError('picky: 8 rows')" in out, out[-3000:]
    assert "trap 1 (undeclared mutation)" not in out
    assert "trap 3 (backward): the backward raises:" in out and "gradcheck failed for 'x'" not in out, out[-3000:]
