"""The command line: check prints the plan, schema prints JSON, and errors come all at once."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kopgen.cli import main

from .conftest import EXAMPLES

MULADD_PLAN = """\
kbook 0.1.0: namespace kbook, 2 ops from {spec}

kbook::muladd(Tensor a, Tensor b, float c) -> Tensor
  route:    custom_op
  kernels:  cpu: triton (interpreter), cuda: triton
  dtypes:   float32, float64
  tags:     pt2_compliant_tag
  autocast: promote (its floating inputs in the widest of their dtypes)
  backward: a: grad * b
            b: grad * a
  saves:    a (tensor) if a or b needs grad
            b (tensor) if a or b needs grad
            shape of a, b (to sum broadcast gradients back)
  backward kernel: kbook::muladd_backward, one launch for every gradient (then summed to broadcast shapes)
  autograd: Python (torch.library.register_autograd): custom_op is a Python route

kbook::muladd_backward(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)
  route:    custom_op
  kernels:  cpu: triton (interpreter), cuda: triton
  dtypes:   float32, float64
  tags:     pt2_compliant_tag
  autocast: none (no rule: it runs on its inputs as they come)
  computes: the gradients of kbook::muladd (its backward kernel)
"""


def test_check_prints_the_plan_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = str(EXAMPLES / "muladd.yaml")
    result = CliRunner().invoke(main, ["check", spec])
    assert result.exit_code == 0, result.output
    assert result.output == MULADD_PLAN.format(spec=spec)
    assert list(tmp_path.iterdir()) == []


def test_check_shows_results_saved_for_backward():
    result = CliRunner().invoke(main, ["check", str(EXAMPLES / "activations.yaml")])
    assert result.exit_code == 0, result.output
    assert "  saves:    result (tensor) if x needs grad\n            scale (scalar)\n" in result.output
    assert "  saves:    result0 (tensor) if x needs grad\n            result1 (tensor) if x needs grad\n" in result.output


def test_schema_is_the_json_schema_of_the_format():
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["required"] == ["kopgen", "package", "ops"]
    assert schema["properties"]["ops"]["items"]["additionalProperties"] is False
    assert "registration" in schema["properties"]["defaults"]["properties"]


def test_every_error_of_a_spec_is_reported_in_file_order(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "kopgen: 1\n"
        "package: kbook\n"
        "colour: blue\n"
        "ops:\n"
        '  - schema: "f(Tensor a, Tensor b) -> Tensor"\n'
        '    compute: "a * b"\n'
        "    dtypes: [float32, float8]\n"
        "    tests: {atol: -1}\n"
    )
    result = CliRunner().invoke(main, ["check", str(spec)])
    assert result.exit_code == 2
    lines = result.output.replace(str(spec), "spec.yaml").splitlines()
    assert lines == [
        "spec.yaml:3:1: error: unknown key 'colour' in spec",
        (
            "spec.yaml:7:23: error: ops[0].dtypes[1] must be one of float16, bfloat16, float32, float64; "
            "got 'float8' (did you mean 'float64'?)"
        ),
        "spec.yaml:8:19: error: ops[0].tests.atol must be at least 0, not -1",
    ]


def test_a_missing_spec_file_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(main, ["new", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "nope.yaml:1:1: error: cannot read the spec" in result.output


def test_an_expression_python_only_warns_of_is_an_error_with_nothing_else_on_stderr(tmp_path):
    """`2if a` and an invalid escape are SyntaxWarnings to Python's parser, printed on stderr before kopgen's
    own message ("<unknown>:1: SyntaxWarning: invalid decimal literal" came first); now errors at their column."""
    import subprocess
    import sys

    spec = tmp_path / "kw.yaml"
    spec.write_text('kopgen: 1\npackage: kw\ndefaults: {registration: custom_op, backends: {cpu: python}}\nops:\n'
                    '  - schema: "f(Tensor a) -> Tensor"\n    compute: "a * 2if a else a"\n'
                    '  - schema: "g(Tensor a) -> Tensor"\n    normalize:\n      stats: {s: "sum(2if a)"}\n'
                    '      compute: "a * s"\n')
    result = subprocess.run([sys.executable, "-m", "kopgen", "check", str(spec)], capture_output=True, text=True,
                            check=False, timeout=120)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"{spec}:6:19: error: invalid decimal literal",
                                          f"{spec}:9:23: error: invalid decimal literal"], result.stderr
