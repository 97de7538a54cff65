"""A spec's text where generated code quotes it, and where `kopgen check` runs it, as an exploratory run
of 2026-12-05 broke them: a statistic's newline or comment in a generated comment, a reference that gives
no Tensor. (The refused ones are tests/bad_specs: a torch function passed as a value, device= strings.)"""

from __future__ import annotations

import py_compile

from click.testing import CliRunner

from kopgen.cli import main

RMS = """\
kopgen: 1
package: kinj
defaults: {{registration: {registration}, backends: {{cpu: {cpu}}}}}
ops:
  - schema: "rms(Tensor x, float eps=1e-6) -> Tensor"
    normalize:
      stats: {{rstd: {stat}}}
      compute: "x * rstd"
"""


def test_a_statistics_newline_stays_inside_its_generated_comment(tmp_path):
    """`# rstd = ... \\` then a live line `- exp(eps)` in the Triton kernel: the text was printed as written."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(RMS.format(registration="custom_op", cpu="triton",
                               stat='"rsqrt(mean(x * x) + eps) \\\\\\n        - exp(eps)"'))
    result = CliRunner().invoke(main, ["new", str(spec), "-o", str(tmp_path / "repo"), "--no-git"])
    assert result.exit_code == 0, result.output
    kernel = tmp_path / "repo/kinj/kernels/rms.py"
    lines = kernel.read_text().splitlines()
    assert "        # rstd = rsqrt(mean(x * x) + eps) - exp(eps)" in lines
    assert not any(line.strip().startswith("- exp(eps)") for line in lines)
    py_compile.compile(str(kernel), doraise=True)


def test_a_statistics_comment_and_backslash_stay_out_of_the_cpp_comment(tmp_path):
    """`// rstd = ... # \\` continued the C++ comment into the next line of code."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(RMS.format(registration="torch_library", cpu="cpp", stat='"rsqrt(mean(x * x) + eps) # \\\\"'))
    result = CliRunner().invoke(main, ["new", str(spec), "-o", str(tmp_path / "repo"), "--no-git"])
    assert result.exit_code == 0, result.output
    comments = [line.strip() for path in (tmp_path / "repo/kinj/csrc").rglob("*") if path.is_file()
                for line in path.read_text().splitlines() if "// rstd" in line]
    assert comments == ["// rstd = rsqrt(mean(x * x) + eps)"], comments


def test_check_of_a_reference_that_gives_no_tensor_is_no_traceback(tmp_path):
    spec = tmp_path / "kopgen.yaml"
    spec.write_text('kopgen: 1\npackage: kbook\nops:\n  - schema: "f(Tensor x) -> Tensor"\n    kernel: custom\n'
                    '    reference: "x.size(0)"\n    fake: {shape: x.shape}\n')
    result = CliRunner().invoke(main, ["check", str(spec)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0, result.output
