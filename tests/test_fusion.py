"""Fusion under torch.compile (kopgen/lang/fusion.py): an op whose kernel is kopgen's own is traced as its
PyTorch reference, so Inductor compiles `op(a, b, c).relu() * 2` into one kernel; its own backward formula
stays, and torch.export keeps the op by name. One package with an op per Python route, one compile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from kopgen import load_spec
from kopgen.lang import fusion

from .conftest import EXAMPLES, ROOT

SPEC = """\
kopgen: 1
package: kfuse
description: One pointwise op per Python route, and an out= op
defaults:
  backends: {cpu: triton, cuda: triton}
  dtypes: [float32]
ops:
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    registration: custom_op
    compute: "a * b + c"
    backward: {a: "grad * b", b: "grad * a"}
  - schema: "muladd_library(Tensor a, Tensor b, float c) -> Tensor"
    registration: library
    compute: "a * b + c"
    backward: {a: "grad * b", b: "grad * a"}
  - schema: "muladd_triton(Tensor a, Tensor b, float c) -> Tensor"
    registration: triton_op
    compute: "a * b + c"
    backward: {a: "grad * b", b: "grad * a"}
  - schema: "muladd_out(Tensor a, Tensor b, float c, Tensor(a!) out) -> ()"
    registration: custom_op
    compute: {out: "a * b + c"}
"""

# Each op followed by the epilogue `.relu() * 2`, chained: one kernel only if every op is traced as its reference.
SCRIPT = """\
import json, re, torch
import kfuse
from torch._inductor.utils import run_and_get_code

def chain(a, b):
    x = kfuse.muladd(a, b, 0.5).relu() * 2
    x = kfuse.muladd_library(x, b, 0.25).relu() * 2
    return kfuse.muladd_triton(x, b, -0.5).relu() * 2

a, b = torch.randn(1000), torch.randn(1000)
got, codes = run_and_get_code(torch.compile(chain, fullgraph=True), a, b)
code = "\\n".join(codes)
kernels = re.findall(r"^(\\w+) = async_compile\\.(?:cpp_pybinding|triton)\\(", code, re.M)
calls = re.findall(r"torch\\.ops\\.kfuse\\.\\w+", code)
torch.testing.assert_close(got, chain(a, b))

# Gradients through the compiled graph (aot_eager: the same AOTAutograd trace, without codegen).
leaves = [a.clone().requires_grad_(), b.clone().requires_grad_()]
want = torch.autograd.grad(chain(*leaves).sum(), leaves)
compiled = torch.compile(chain, backend="aot_eager", fullgraph=True)
for x, y in zip(torch.autograd.grad(compiled(*leaves).sum(), leaves), want):
    torch.testing.assert_close(x, y)

class Chain(torch.nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        kfuse.muladd_out(a, b, 1.0, out)
        return chain(a, b) + out

program = torch.export.export(Chain(), (a, b))
exported = [str(n.target) for n in program.graph.nodes if n.op == "call_function" and "kfuse" in str(n.target)]
decomposed = program.run_decompositions()
kept = [str(n.target) for n in decomposed.graph.nodes if n.op == "call_function" and "kfuse" in str(n.target)]
print(json.dumps({"kernels": kernels, "calls": calls, "exported": exported, "kept": kept}))
"""


def test_only_kopgens_own_functional_kernels_are_traced_as_their_reference():
    """A `kernel: custom` op's reference need not match the user's kernel; an op writing an argument
    reaches Inductor as auto_functionalized, which keeps the kernel."""
    traced = {op.name: fusion.traced_as_reference(op) for op in load_spec(EXAMPLES / "triton_op.yaml").ops}
    assert traced == {"muladd": True, "muladd_backward": True, "sincos": True, "muladd_out": False, "rowsum": True}
    assert not any(fusion.traced_as_reference(op) for op in load_spec(EXAMPLES / "custom.yaml").ops)


@pytest.mark.slow
def test_compiled_op_and_epilogue_are_one_kernel_and_export_keeps_the_op(tmp_path):
    spec = tmp_path / "kfuse.yaml"
    spec.write_text(SPEC)
    repo = tmp_path / "repo"
    env = {**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{ROOT}"}
    subprocess.run([sys.executable, "-m", "kopgen", "new", str(spec), "-o", str(repo)], check=True, env=env)
    # A cache of its own: AOTAutograd's cache key leaves the dispatch rules out (docs/performance.md).
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], env=env, cwd=tmp_path,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["calls"] == [], "Inductor calls the op: it was not traced as its reference"
    assert len(found["kernels"]) == 1, found["kernels"]
    names = ["kfuse.muladd_out.default", "kfuse.muladd.default", "kfuse.muladd_library.default",
             "kfuse.muladd_triton.default"]
    assert found["exported"] == names
    assert found["kept"] == names[1:], found  # run_decompositions functionalizes the out= op (auto_functionalized)
