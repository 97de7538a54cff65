"""Generated Python as ruff format lays it out: method chains (kopgen/lang/layout.py's fluent layout):
a long `reference` such as a quantisation's (`(...).round().clamp(-128, 127).to(torch.int8)`) came out
split at its last bracket, which `ruff format --check` in the generated repo's CI refused; and docstrings of
several paragraphs or with invisible characters; and powers."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from kopgen import generate
from kopgen.lang import layout

from .conftest import EXAMPLES

# (statement head, expression): chains in a return, an assignment, call arguments, a tuple, after a
# parenthesized value, behind a unary minus, with a subscript; and chains that must stay as they are
# (one call after the head: split at the bracket; a chain that fits).
CASES = [
    ("return", ("((x / x.abs().amax(-1, keepdim=True).clamp(min=1e-06) * 127.0).round().to(out_dtype), "
               "x.abs().amax(-1, keepdim=True).clamp(min=1e-06) / 127.0)")),
    ("return", ("((input / (input.abs().amax(-1, keepdim=True) / 127.0)).round() + 1.0).clamp(-128, 127)"
               ".to(torch.int8)")),
    ("y =", ("torch.nn.functional.silu(input[..., : input.shape[-1] // 2]).mul(input[..., input.shape[-1] // 2 :])"
            ".sum(-1)")),
    ("return", "foo(x.abs().amax(-1, keepdim=True).clamp(min=1e-06).to(torch.float32).reshape(-1).contiguous(), 1)"),
    ("yyyyyyyyyyyyyyyyyyyyyyyyy =", "torch.nn.functional.silu(input).mul(input[..., 1:]).sum(-1).foo(1)"),
    ("return", "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy.abs().amax(-1, keepdim=True).clamp(min=1e-06)"),
    ("return", "foo(1, x.abs().amax(-1, keepdim=True).clamp(min=1e-06).to(torch.float32).reshape(-1))"),
    ("return", "x.abs().amax(-1, keepdim=True).clamp(min=1e-06).to(torch.float32).reshape(-1) * 2.0 + 1.0"),
    ("return", "fooooooooooooooooooooooooooooooo(aaaaaaaaaaaaaa, bbbbbbbbbbbbbbbb).to(torch.float32)"),
    ("return", "torch.stack(xs).sum(0).mul(w).add(ys[0]).reshape(-1, 1).expand(-1, 4).contiguous()"),
    ("return", "x.abs().amax(-1, keepdim=True).clamp(min=1e-06).to(torch.float32).reshape(-1)[0]"),
    ("zzzzzzzzzzzzzzzzz =", "foo(x.abs().amax(-1, keepdim=True).clamp(min=1e-06).to(torch.float32).reshape(-1))"),
    ("return", ("torch.nn.functional.silu(aaaaaaaaaaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb, ccccccccccc)"
               ".mul(x).sum(-1)")),
    ("return", "-x.abs().amax(-1, keepdim=True).clamp(min=1e-06).to(torch.float32).reshape(-1, 1, 1, 1, 1)"),
    ("return", "x.abs().amax(-1, keepdim=True).clamp(min=1e-06).to(torch.float32)[..., :dddddddddddddd].reshape(-1)"),
    ("return", ("(x.float().pow(2).mean(-1, keepdim=True) + eps).rsqrt().mul(x.float()).mul(weight.float())"
               ".to(x.dtype)")),
    ("out =", ("torch.where(mask, x.abs().amax(-1, keepdim=True).clamp(min=1e-06).to(torch.float32), "
              "y.abs().amax(-1, keepdim=True).clamp(min=1e-06))")),
]


# Powers: ruff writes `x**2` where both operands are simple (names, numbers, dotted names, a negated right
# one), and `-(x**2)` for a unary minus before one; every generated repo with a `**` failed its format check.
CASES += [
    ("a =", "x ** 2"),
    ("b =", "x ** k + y.z ** -w + 2 ** (-x)"),
    ("c =", "(x + 1) ** 2 + f(x) ** 2 + x[0] ** 2 + x ** (1 / 3)"),
    ("d =", "-x ** 2 + (-x) ** 3 + 1.5 ** x - x ** -1"),
    ("e =", "torch.where(x > 0, grad * 3 * x ** 2, -y ** 2.5) ** 2"),
    ("f =", "x ** y ** z + a.b().c ** 2 + 3 ** a.b"),
]


def ruff_format(source: str) -> str:
    result = subprocess.run([sys.executable, "-m", "ruff", "format", "--isolated", "-"], input=source,
                            capture_output=True, text=True, check=True)
    return result.stdout


@pytest.mark.parametrize("head, expression", CASES)
def test_a_statement_with_a_method_chain_is_laid_out_as_ruff_does(head, expression):
    source = "def f():\n    " + layout.statement(f"{head} {expression}", 4) + "\n"
    assert source == ruff_format(source)


def test_a_quantisation_reference_passes_the_generated_repos_ruff_check(tmp_path):
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(
        "kopgen: 1\npackage: kquant\ndefaults: {backends: {cpu: python}}\nops:\n"
        '  - schema: "quant(Tensor input) -> Tensor"\n    kernel: custom\n'
        '    reference: "((input / (input.abs().amax(-1, keepdim=True) / 127.0)).round() + 1.0).clamp(-128, 127)'
        '.to(torch.int8)"\n'
        "    fake: {shape: input.shape, dtype: torch.int8}\n"
    )
    repo = generate(spec, tmp_path / "repo")
    result = subprocess.run([sys.executable, "-m", "ruff", "format", "--check", "--isolated", "--no-cache", "."],
                            cwd=repo, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ".clamp(-128, 127)\n" in (repo / "kquant/reference.py").read_text()


def test_docs_with_paragraphs_trailing_spaces_and_invisible_characters_pass_ruff(tmp_path):
    """A `doc: |` of two paragraphs left four spaces on the blank line (ruff format refused it), and a zero-width
    space in `description` stood as it was (ruff check: PLE2515)."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(
        'kopgen: 1\npackage: kdoc\ndescription: "zero\\u200bwidth and a\\u2028separator  "\nops:\n'
        '  - schema: "scale(Tensor x) -> Tensor"\n    doc: |\n      First paragraph.   \n\n'
        "      Second paragraph, with a tab:\there.\n"
        '    compute: "x * 2"\n'
    )
    repo = generate(spec, tmp_path / "repo")
    for command in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        result = subprocess.run([sys.executable, "-m", "ruff", *command], cwd=repo, capture_output=True, text=True,
                                check=False)
        assert result.returncode == 0, result.stdout + result.stderr
    assert '    """First paragraph.\n\n    Second paragraph, with a tab:\\x09here."""' in (repo / "kdoc/ops.py").read_text()
    assert (repo / "kdoc/__init__.py").read_text().splitlines()[1] == '"""zero\\u200bwidth and a\\u2028separator'


@pytest.mark.parametrize("example", ["muladd", "rows", "norms", "gated", "fused_stable", "triton_op"])
def test_a_long_package_name_passes_the_generated_repos_ruff(example, tmp_path):
    """A package name of 14 characters made the benchmark's `bandwidth(getattr(<package>, op), ...)` line too
    long, and longer ones the op handles, vmap rules, autocast rules and fused backward calls: every repo
    failed its own `ruff format --check`. Checked with a name of 40 characters."""
    text = (EXAMPLES / f"{example}.yaml").read_text()
    text = re.sub(r"(?m)^package: .*$", "package: my_very_long_package_name_of_forty_chars", text)
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(re.sub(r"(?m)^namespace: .*\n", "", text))
    repo = generate(spec, tmp_path / "repo")
    for command in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        result = subprocess.run([sys.executable, "-m", "ruff", *command], cwd=repo, capture_output=True, text=True,
                                check=False)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr
