"""`kopgen check`'s warnings: the custom kernels' traps kopgen can see without running the kernel."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from kopgen.checks import _evaluate
from kopgen.cli import main
from kopgen.lang.python import sized_by_data
from kopgen.lang.tests import sample_shapes
from kopgen.model import CustomKernel
from kopgen.pipeline import check_spec
from tests.conftest import EXAMPLES

ROOT = Path(__file__).resolve().parent.parent
SPECS = (sorted(EXAMPLES.glob("*.yaml")) + sorted(EXAMPLES.glob("*/kopgen.yaml"))
         + sorted((ROOT / "tests" / "specs").glob("*.yaml")))

TRAPS = """\
kopgen: 1
package: ktrap
defaults:
  backends: {cpu: python}
ops:
  - schema: "rowsum(Tensor x, Tensor out) -> Tensor"
    kernel: custom
    reference: "x.sum(dim=1)"
    fake: {shape: x.shape}
  - schema: "positive(Tensor x, Tensor y_out) -> (Tensor, Tensor)"
    kernel: custom
    reference: "(x.argmax(-1), x > 0)"
    fake:
      - {shape: "x.shape[:-1]", dtype: torch.int64}
      - {shape: x.shape}
"""



def unmarked(name: str) -> str:
    return (f"'{name}' is named like an output but the schema does not mark it mutated: if the kernel writes it, "
            f"write `Tensor! {name}`, or torch may reorder or drop the write (trap 1, undeclared mutation)")


OUT = unmarked("out")
ROWSUM = "fake cannot match the reference: on the test shapes (x: (8, 6), out: (8, 6)) `fake` says the output " \
         "is (8, 6) float32, the reference returns (8,) float32 (trap 2, fake kernel)"
POSITIVE = "fake cannot match the reference: on the test shapes (x: (8, 6), y_out: (8, 6)) `fake` says output 1 " \
           "is (8, 6) float32, the reference returns (8, 6) bool (trap 2, fake kernel)"


@pytest.fixture
def traps(tmp_path) -> Path:
    spec = tmp_path / "traps.yaml"
    spec.write_text(TRAPS)
    return spec


def test_check_warns_at_each_trap_and_exits_0(traps):
    pytest.importorskip("torch")
    result = CliRunner().invoke(main, ["check", str(traps)])
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        f"{traps}:6:38: warning: {OUT}",
        f"{traps}:9:19: warning: {ROWSUM}",  # at fake's shape
        f"{traps}:10:40: warning: {unmarked('y_out')}",
        f"{traps}:15:9: warning: {POSITIVE}",  # at the entry: it gives no dtype
    ]
    assert result.stdout.startswith("ktrap 0.1.0: namespace ktrap, 2 ops")


def test_new_and_update_print_the_warnings_they_can_tell_without_torch(traps, tmp_path):
    """`kopgen new` never imports torch: it gives the naming warnings, not the meta evaluation's."""
    repo = tmp_path / "repo"
    result = CliRunner().invoke(main, ["new", str(traps), "-o", str(repo), "--no-git"])
    assert result.exit_code == 0, result.output
    assert [line.split(": warning: ")[1] for line in result.stderr.splitlines()] == [OUT, unmarked("y_out")]
    assert result.stdout == f"created {repo}\n"
    result = CliRunner().invoke(main, ["update", str(repo)])
    assert result.exit_code == 0, result.output
    # one line further down: the repo's copy starts with the yaml-language-server line
    assert result.stderr.splitlines()[0] == f"{repo / 'kopgen.yaml'}:7:38: warning: {OUT}"
    assert result.stdout == "up to date\n"


def test_a_marked_output_and_a_matching_fake_give_no_warning(traps):
    pytest.importorskip("torch")
    fixed = traps.read_text().replace('"x.sum(dim=1)"', '"x.sum(dim=1, keepdim=True).expand_as(x)"')
    fixed = fixed.replace("- {shape: x.shape}", "- {shape: x.shape, dtype: torch.bool}")
    fixed = fixed.replace("Tensor out", "Tensor other").replace("Tensor y_out", "Tensor y")
    traps.write_text(fixed)
    assert check_spec(traps, run_meta=True)[1] == []


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.name)
def test_no_warning_on_the_examples(spec):
    """Every example's custom op is evaluated (no silent skip) and agrees with its reference."""
    torch = pytest.importorskip("torch")
    package, warnings = check_spec(spec, run_meta=True)
    assert warnings == []
    for op in package.ops:
        if isinstance(op.body, CustomKernel) and op.body.reference is not None:
            evaluated = _evaluate(torch, op, sample_shapes(op, op.shapes[0]), torch.float32)
            # A size the data decides (`dynamic()`) cannot be held by meta tensors: the generated
            # suite checks that fake on FakeTensors (tests/test_end_to_end.py runs it).
            assert evaluated or sized_by_data(op), op.name


def test_fake_is_checked_on_the_shapes_the_relations_give(tmp_path):
    """weight's shape follows input's last dimension: the reference's `.sum(0)` matches `fake` there, and
    would not on the raw test shape (8, 6)."""
    pytest.importorskip("torch")
    spec = tmp_path / "kopgen.yaml"
    spec.write_text("""\
kopgen: 1
package: krel
defaults:
  backends: {cpu: python}
ops:
  - schema: "scaled_colsum(Tensor input, Tensor weight) -> Tensor"
    kernel: custom
    reference: "(input * weight).sum(0)"
    fake: {shape: weight.shape}
    tests:
      args:
        weight: {shape: "(input.shape[-1],)"}
""")
    assert check_spec(spec, run_meta=True)[1] == []
    spec.write_text(spec.read_text().replace("fake: {shape: weight.shape}", "fake: {shape: input.shape}"))
    [warning] = check_spec(spec, run_meta=True)[1]
    assert "(input: (8, 6), weight: (6,))" in str(warning) and "the reference returns (6,)" in str(warning)


def test_adopt_prints_the_warnings_too(traps):
    result = CliRunner().invoke(main, ["adopt", str(traps)])
    assert result.exit_code == 0, result.output
    assert [line.split(": warning: ")[1] for line in result.stderr.splitlines()] == [OUT, unmarked("y_out")]


def test_check_warns_of_torch_names_that_do_not_exist(tmp_path):
    """`torch.frobnicate(x)` in a reference, `torch.sigmod(grad)` and `grad.sigmod()` in backward formulas
    passed check and new alike; the generated tests failed on them (AttributeError)."""
    pytest.importorskip("torch")
    spec = tmp_path / "kopgen.yaml"
    spec.write_text("""\
kopgen: 1
package: knames
defaults:
  backends: {cpu: python}
ops:
  - schema: "f(Tensor x) -> Tensor"
    kernel: custom
    reference: "torch.frobnicate(x).float()"
    fake: {shape: x.shape}
    backward:
      x: "torch.sigmod(grad) + grad.sigmod() + torch.special.expit(grad).sum_to_size(x.shape)"
  - schema: "g(Tensor x) -> Tensor"
    compute: "x * 2"
    backward:
      x: "torch.nn.functional.silu(grad) * x.size(-1) + grad.mT.mT"
""")
    result = CliRunner().invoke(main, ["check", str(spec)])
    assert result.exit_code == 0, result.output
    warnings = [line.split(": ", 1)[0].rsplit(":", 2)[1:] + [line] for line in result.output.splitlines()
                if ": warning: " in line]
    assert [(row, column) for row, column, _ in warnings] == [("8", "23"), ("11", "17"), ("11", "37")], warnings
    assert "torch.frobnicate does not exist in torch" in warnings[0][2]
    assert "torch.sigmod does not exist in torch" in warnings[1][2] and "did you mean 'sigmoid'?" in warnings[1][2]
    assert "'sigmod' is no attribute or method of a Tensor (did you mean 'sigmoid'?)" in warnings[2][2]
