"""`kernel: custom` on registration triton_op: the user's launcher takes `wrap`, the traced body passes
torch.library.wrap_triton, and the generated suite sees the user's kernels in the compiled graph."""

from __future__ import annotations

import re

import pytest

from kopgen.model import Route
from kopgen.pipeline import generate, load_spec_text
from kopgen.plan import plan
from kopgen.render import render

from .conftest import EXAMPLES, installed_suite_passes, write_pairsum_kernel

# examples/custom.yaml's pairsum, on the triton_op route.
PAIRSUM = (EXAMPLES / "custom.yaml").read_text(encoding="utf-8").replace("registration: custom_op", "registration: triton_op")

SILU_AND_MUL = """\
kopgen: 1
package: ktsilu
defaults:
  registration: triton_op
  backends: {cpu: triton, cuda: triton}
  dtypes: [float32, float64]
ops:
  - schema: "silu_and_mul(Tensor! out, Tensor input) -> ()"
    doc: silu of the first half of input's last dimension times its second half, written into out.
    kernel: custom
    reference:
      out: "torch.nn.functional.silu(input.narrow(-1, 0, input.size(-1) // 2)) * input.narrow(-1, input.size(-1) // 2, input.size(-1) // 2)"
    tests:
      args:
        out: {shape: "input.shape[:-1] + (input.shape[-1] // 2,)"}
"""


def rendered(spec: str, path: str) -> str:
    """One file kopgen renders for `spec`."""
    package = load_spec_text(spec, "kopgen.yaml")
    return next(render(file, package) for file in plan(package) if file.path == path)


def test_the_spec_resolves_on_triton_op():
    assert load_spec_text(PAIRSUM, "kopgen.yaml").ops[0].registration is Route.TRITON_OP


def test_the_body_passes_wrap_triton_to_the_users_launcher(tmp_path):
    repo = generate_text(PAIRSUM, tmp_path)
    registration = (repo / "kcustom/_registration.py").read_text()
    assert "    return pairsum_kernels.pairsum_triton(x, wrap=wrap_triton)\n" in registration
    # Eager CUDA calls run the launcher as it is, inside kopgen's device guard; CPU ones run it bare.
    assert "    with _support.device_guard(x):\n        return pairsum_kernels.pairsum_triton(x)\n" in registration
    assert '_pairsum.register_kernel("cuda", _pairsum_cuda)' in registration
    assert '_pairsum.register_kernel("cpu", pairsum_kernels.pairsum_triton)' in registration
    skeleton = (repo / "kcustom/kernels/pairsum.py").read_text()
    assert "def pairsum_triton(x: Tensor, *, wrap=_identity) -> Tensor:" in skeleton
    assert "    wrap(kernel)[grid](\n" in skeleton
    assert "device_guard" not in skeleton  # kopgen's registration guards the eager CUDA call
    test = (repo / "tests/test_pairsum.py").read_text()
    assert 'kernels_module="kcustom.kernels.pairsum",' in test and "TracedIntoTriton" in test


def test_an_argument_named_wrap_renames_the_launchers_keyword(tmp_path):
    head, ops = PAIRSUM.split("\nops:\n")
    spec = head + "\nops:\n" + re.sub(r"\bx\b", "wrap", ops)
    repo = generate_text(spec, tmp_path)
    assert "def pairsum_triton(wrap: Tensor, *, wrap_=_identity) -> Tensor:" in (repo / "kcustom/kernels/pairsum.py").read_text()
    assert "return pairsum_kernels.pairsum_triton(wrap, wrap_=wrap_triton)" in (repo / "kcustom/_registration.py").read_text()


def test_a_mutating_triton_op_declares_what_it_writes():
    registration = rendered(SILU_AND_MUL, "ktsilu/_registration.py")
    assert '@torch.library.triton_op("ktsilu::silu_and_mul", mutates_args=("out",))' in registration
    assert re.search(r'"ktsilu::_silu_and_mul_cpu",\n.*\n    mutates_args=\("out",\),', registration)
    assert "    return silu_and_mul_kernels.silu_and_mul_triton(out, input, wrap=wrap_triton)\n" in registration
    assert "def _silu_and_mul_cuda(out: Tensor, input: Tensor) -> None:" in registration


def generate_text(spec: str, tmp_path):
    (tmp_path / "kopgen.yaml").write_text(spec)
    return generate(tmp_path / "kopgen.yaml", tmp_path / "repo")


@pytest.mark.slow
def test_a_custom_triton_op_passes_its_suite_and_compiles_into_its_kernel(tmp_path):
    """pairsum with its kernel written, on CPU: the whole suite, and the trace that holds the user's kernel."""
    repo = generate_text(PAIRSUM, tmp_path)
    write_pairsum_kernel(repo / "kcustom/kernels/pairsum.py")
    result = installed_suite_passes(repo, tmp_path / "site", "-rA", at_least=25)
    assert "PASSED tests/test_pairsum.py::TestPairsum::test_compile_traces_into_its_triton_kernels" in result.stdout


@pytest.mark.slow
def test_a_mutating_custom_triton_op_passes_its_suite(tmp_path):
    """silu_and_mul (Tensor! out) with examples/llm_triton's kernel, on CPU: the suite, and the trace."""
    repo = generate_text(SILU_AND_MUL, tmp_path)
    kernel = (EXAMPLES / "llm_triton/kllm_triton/kernels/silu_and_mul.py").read_text()
    (repo / "ktsilu/kernels/silu_and_mul.py").write_text(kernel.replace("kllm_triton::", "ktsilu::"))
    result = installed_suite_passes(repo, tmp_path / "site", "-rA", at_least=17)
    assert "PASSED tests/test_silu_and_mul.py::TestSiluAndMul::test_compile_fullgraph[cpu-inductor-dynamic]" in result.stdout
    assert "PASSED tests/test_silu_and_mul.py::TestSiluAndMul::test_compile_traces_into_its_triton_kernels" in result.stdout
