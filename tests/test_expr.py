"""kopgen.expr: parsing, checking and translating the expressions of an op spec.

The translations are checked by running them: the torch text with eval, the Triton text in
kernels under the CPU interpreter (one subprocess with TRITON_INTERPRET=1), the C++ text in
one program compiled with -Wall -Werror.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from kopgen.expr import (
    ExprError,
    Formula,
    FormulaContext,
    Pointwise,
    parse_formula,
    parse_pointwise,
)

from .conftest import ROOT

ARGS = {"a": "tensor", "b": "tensor", "alpha": "float", "n": "int", "flag": "bool"}
N = 20  # elements: more than one Triton block of 16, so the mask matters
DTYPES = (torch.float32, torch.float64)
FLAGS = (True, False)

# (expression, expected value from a namespace of inputs).  a > 0 (log, sqrt, pow), |b| < 1.4.
CASES = [
    # arithmetic and precedence
    ("a * b + alpha", lambda v: v.a * v.b + v.alpha),
    ("a - b / (a + 1)", lambda v: v.a - v.b / (v.a + 1)),
    ("a - (b - a)", lambda v: v.a - (v.b - v.a)),
    ("(a + b) * (a - b)", lambda v: (v.a + v.b) * (v.a - v.b)),
    ("-a + +b", lambda v: -v.a + v.b),
    ("-(-a) * 2", lambda v: v.a * 2),
    ("a / n + n * b", lambda v: v.a / v.n + v.n * v.b),
    ("-a ** 2", lambda v: -(v.a**2)),
    ("(-b) ** 2", lambda v: v.b**2),
    # powers
    ("a ** 0", lambda v: torch.ones_like(v.a)),
    ("a ** 1 + b ** 3", lambda v: v.a + v.b**3),
    ("a ** -1 + a ** -2", lambda v: 1 / v.a + 1 / v.a**2),
    ("(a - b) ** 8", lambda v: (v.a - v.b) ** 8),
    ("a ** 2.5", lambda v: v.a**2.5),
    ("a ** b", lambda v: v.a**v.b),
    ("2 ** b", lambda v: 2**v.b),
    ("a ** alpha + a ** n", lambda v: v.a**v.alpha + v.a**v.n),
    ("a ** 2 ** 0.5", lambda v: v.a ** (2**0.5)),
    ("pow(a, 3) + pow(a, b)", lambda v: v.a**3 + v.a**v.b),
    # functions of tensors
    ("abs(b)", lambda v: torch.abs(v.b)),
    ("exp(b)", lambda v: torch.exp(v.b)),
    ("log(a)", lambda v: torch.log(v.a)),
    ("log1p(a)", lambda v: torch.log1p(v.a)),
    ("sqrt(a)", lambda v: torch.sqrt(v.a)),
    ("rsqrt(a)", lambda v: torch.rsqrt(v.a)),
    ("sin(b)", lambda v: torch.sin(v.b)),
    ("cos(b)", lambda v: torch.cos(v.b)),
    ("tan(b)", lambda v: torch.tan(v.b)),
    ("tanh(b)", lambda v: torch.tanh(v.b)),
    ("sigmoid(b)", lambda v: torch.sigmoid(v.b)),
    ("relu(b)", lambda v: torch.relu(v.b)),
    ("erf(b)", lambda v: torch.erf(v.b)),
    ("floor(b * 3) + ceil(b * 3)", lambda v: torch.floor(v.b * 3) + torch.ceil(v.b * 3)),
    ("minimum(a, b) + maximum(a, b)", lambda v: torch.minimum(v.a, v.b) + torch.maximum(v.a, v.b)),
    ("minimum(b, alpha) + maximum(alpha, b)",
     lambda v: torch.clamp(v.b, max=v.alpha) + torch.clamp(v.b, min=v.alpha)),
    ("sigmoid(-b) * relu(-b)", lambda v: torch.sigmoid(-v.b) * torch.relu(-v.b)),
    # functions of scalars only, inside a tensor expression
    ("a * exp(alpha) + log(alpha) + log1p(alpha) + sqrt(alpha)",
     lambda v: v.a * math.exp(v.alpha) + math.log(v.alpha) + math.log1p(v.alpha)
     + math.sqrt(v.alpha)),
    ("a * sigmoid(alpha) + rsqrt(alpha) + relu(-alpha) + abs(-alpha)",
     lambda v: v.a / (1 + math.exp(-v.alpha)) + 1 / math.sqrt(v.alpha) + v.alpha),
    ("a + sin(alpha) + cos(alpha) + tan(alpha) + tanh(alpha) + erf(alpha)",
     lambda v: v.a + math.sin(v.alpha) + math.cos(v.alpha) + math.tan(v.alpha)
     + math.tanh(v.alpha) + math.erf(v.alpha)),
    ("a + floor(alpha) + ceil(alpha) + minimum(alpha, n) + maximum(alpha, n) + pow(alpha, n)",
     lambda v: v.a + 0 + 1 + v.alpha + v.n + v.alpha**v.n),
    ("a * alpha ** 2", lambda v: v.a * v.alpha**2),
    # conditions
    ("where(b > 0, a, b)", lambda v: torch.where(v.b > 0, v.a, v.b)),
    ("where(flag, a, 2.0)", lambda v: v.a if v.flag else torch.full_like(v.a, 2.0)),
    ("a if b < 0 else -a", lambda v: torch.where(v.b < 0, v.a, -v.a)),
    ("(a if flag else alpha) * b", lambda v: (v.a if v.flag else v.alpha) * v.b),
    ("where(flag and b > 0, a, 0.0)", lambda v: torch.where((v.b > 0) & v.flag, v.a, 0.0)),
    ("where(not (b > 0) or a < 1, a, b)", lambda v: torch.where((v.b <= 0) | (v.a < 1), v.a, v.b)),
    ("where(a >= 1 and b <= 0 or b == a, 1.0, 0.0) * a",
     lambda v: torch.where((v.a >= 1) & (v.b <= 0), v.a, 0.0)),
    ("where(a != b, a, 0.5)", lambda v: v.a),
    ("where(not flag, a, b)", lambda v: v.b if v.flag else v.a),
    ("where(not flag and not (b > 0), a, b)",
     lambda v: torch.where((v.b <= 0) & (not v.flag), v.a, v.b)),
    ("where(b > 0, 1, 0) + a", lambda v: (v.b > 0).to(v.a.dtype) + v.a),
    ("where(True, a, b) + where(alpha > 0.5, alpha, 1.0)", lambda v: v.a + v.alpha),
    ("where(flag or False, a, b)", lambda v: v.a if v.flag else v.b),
]
IDS = [text for text, _ in CASES]


def inputs(dtype: torch.dtype, flag: bool) -> SimpleNamespace:
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(N, generator=gen, dtype=torch.float64) * 1.5 + 0.5
    b = torch.rand(N, generator=gen, dtype=torch.float64) * 2.8 - 1.4
    return SimpleNamespace(a=a.to(dtype), b=b.to(dtype), alpha=0.75, n=3, flag=flag)


def expected(fn, v: SimpleNamespace) -> torch.Tensor:
    return torch.broadcast_to(torch.as_tensor(fn(v), dtype=v.a.dtype), v.a.shape)


def close(actual, expect: torch.Tensor, tol64: float = 1e-10) -> None:
    actual = torch.broadcast_to(torch.as_tensor(actual).to(expect.dtype), expect.shape)
    tol = 2e-5 if expect.dtype == torch.float32 else tol64
    torch.testing.assert_close(actual, expect, rtol=tol, atol=tol)


@pytest.mark.parametrize(("text", "fn"), CASES, ids=IDS)
def test_torch_translation(text, fn):
    code = parse_pointwise(text, ARGS).to_torch()
    for dtype in DTYPES:
        for flag in FLAGS:
            v = inputs(dtype, flag)
            close(eval(code, {"torch": torch, "math": math, **vars(v)}), expected(fn, v))


# --- Triton: all kernels in one module, run once under the interpreter in a subprocess -------

KERNEL = """
@triton.jit
def k{i}(a_ptr, b_ptr, out_ptr, alpha, n, flag, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    a = tl.load(a_ptr + offs, mask=mask, other=1.0)
    b = tl.load(b_ptr + offs, mask=mask, other=1.0)
    tl.store(out_ptr + offs, {expr}, mask=mask)
"""
RUNNER = """
import sys, torch
sys.path.insert(0, sys.argv[1])
import kernels
outputs = {}
for i in range(kernels.COUNT):
    for dtype in (torch.float32, torch.float64):
        for flag in (True, False):
            a, b = (torch.load(sys.argv[2])[k].to(dtype) for k in "ab")
            out = torch.full_like(a, float("nan"))
            try:
                getattr(kernels, f"k{i}")[(2,)](a, b, out, 0.75, 3, flag, a.numel(), BLOCK=16)
                outputs[i, str(dtype), flag] = out
            except Exception as e:
                outputs[i, str(dtype), flag] = repr(e)
torch.save(outputs, sys.argv[3])
"""


@pytest.fixture(scope="module")
def triton_outputs(tmp_path_factory):
    pytest.importorskip("triton")
    tmp = tmp_path_factory.mktemp("triton")
    kernels = [KERNEL.format(i=i, expr=parse_pointwise(text, ARGS).to_triton())
               for i, (text, _) in enumerate(CASES)]
    source = "import triton\nimport triton.language as tl\n" + "".join(kernels)
    (tmp / "kernels.py").write_text(source + f"\nCOUNT = {len(CASES)}\n")
    (tmp / "runner.py").write_text(RUNNER)
    v = inputs(torch.float64, True)
    torch.save({"a": v.a, "b": v.b}, tmp / "inputs.pt")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    subprocess.run([sys.executable, tmp / "runner.py", tmp, tmp / "inputs.pt", tmp / "out.pt"],
                   env=env, check=True, timeout=300)
    return torch.load(tmp / "out.pt")


@pytest.mark.parametrize(("i", "fn"), [(i, fn) for i, (_, fn) in enumerate(CASES)], ids=IDS)
def test_triton_translation(triton_outputs, i, fn):
    for dtype in DTYPES:
        for flag in FLAGS:
            out = triton_outputs[i, str(dtype), flag]
            assert not isinstance(out, str), f"{parse_pointwise(IDS[i], ARGS).to_triton()}: {out}"
            # Triton passes float scalars as float32, so float64 kernels are not exact.
            close(out, expected(fn, inputs(dtype, flag)), tol64=1e-6)


# --- C++: one program with a template function per case, compiled with -Wall -Werror ---------

CPP_MAIN = """
int main() {
    double a, b, alpha, n, flag;
    while (std::scanf("%lf %lf %lf %lf %lf", &a, &b, &alpha, &n, &flag) == 5) {
CALLS        std::printf("\\n");
    }
}
"""


@pytest.fixture(scope="module")
def cpp_outputs(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("no g++")
    tmp = tmp_path_factory.mktemp("cpp")
    functions = [
        f"template <typename acc_t>\nacc_t f{i}(acc_t a, acc_t b, acc_t alpha, acc_t n, "
        f"acc_t flag) {{\n    return {parse_pointwise(text, ARGS).to_cpp()};\n}}\n"
        for i, (text, _) in enumerate(CASES)]
    # Each function is instantiated for float and double; the double results are compared.
    calls = "".join(
        f"        (void)f{i}<float>(a, b, alpha, n, flag);\n"
        f"        std::printf(\"%.17g \", f{i}<double>(a, b, alpha, n, flag));\n"
        for i in range(len(CASES)))
    # exp_of, the exp the CPU functors call, as csrc/pointwise.h defines it
    header = (ROOT / "tests/golden/fused/kfused/csrc/pointwise.h").read_text()
    exp_of = re.search(r"^inline float exp_of\(float x\).*?^inline double exp_of.*?^\}\n", header, re.DOTALL | re.MULTILINE).group(0)
    # ... and Max and Min, whose combine minimum and maximum call (a NaN in either operand wins)
    extremes = re.search(r"^template <typename acc_t>\nstruct Max \{.*?^struct Min \{.*?^\};\n", header,
                         re.DOTALL | re.MULTILINE).group(0)
    source = "#include <algorithm>\n#include <cmath>\n#include <cstdint>\n#include <cstdio>\n#include <cstring>\n" + (
        "#include <limits>\n\n" + exp_of + "\n" + extremes + "\n" + "\n".join(functions)
        + CPP_MAIN.replace("CALLS", calls))
    (tmp / "exprs.cpp").write_text(source)
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", "-O0", "-o", tmp / "exprs",
                    tmp / "exprs.cpp"], check=True, timeout=120)
    outputs = {}
    for flag in FLAGS:
        v = inputs(torch.float64, flag)
        lines = "".join(f"{x} {y} {v.alpha} {v.n} {int(flag)}\n" for x, y in
                        zip(v.a.tolist(), v.b.tolist(), strict=True))
        run = subprocess.run([tmp / "exprs"], input=lines, capture_output=True, text=True,
                             check=True, timeout=60)
        rows = [[float(x) for x in line.split()] for line in run.stdout.splitlines()]
        outputs[flag] = torch.tensor(rows, dtype=torch.float64).T  # [case, element]
    return outputs


@pytest.mark.parametrize(("i", "fn"), [(i, fn) for i, (_, fn) in enumerate(CASES)], ids=IDS)
def test_cpp_translation(cpp_outputs, i, fn):
    for flag in FLAGS:
        close(cpp_outputs[flag][i], expected(fn, inputs(torch.float64, flag)))


# --- pointwise: text of the translations, names, errors -------------------------------------

@pytest.mark.parametrize(("text", "torch_code", "triton_code", "cpp_code"), [
    ("a * b + alpha", "a * b + alpha", "a * b + alpha", "a * b + alpha"),
    ("(a + b) * 2", "(a + b) * 2", "(a + b) * 2.0", "(a + b) * acc_t(2)"),
    ("a - (b - a)", "a - (b - a)", "a - (b - a)", "a - (b - a)"),
    ("-a ** 2", "-a ** 2", "-(a * a)", "-(a * a)"),
    ("a ** -2", "a ** (-2)", "1.0 / (a * a)", "std::pow(a, -acc_t(2))"),
    ("a ** alpha", "a ** alpha",
     ("tl.where(alpha == 0.0, 1.0, tl.where(tl.floor(alpha * 1.0) == alpha, tl.exp2(alpha * tl.log2(tl.abs(a))) * "
      "tl.where((a < 0.0) | (1.0 / a < 0.0), tl.where(alpha % 2.0 != 0.0, -1.0, 1.0), 1.0), "
      "tl.exp2(alpha * tl.log2(a))))"),
     "std::pow(a, alpha)"),
    ("tanh(a)", "torch.tanh(a)", "2.0 / (1.0 + tl.exp(-2.0 * a)) - 1.0", "std::tanh(a)"),
    ("sigmoid(a + b)", "torch.sigmoid(a + b)", "1.0 / (1.0 + tl.exp(-(a + b)))",
     "acc_t(1) / (acc_t(1) + exp_of(-(a + b)))"),
    ("a * sigmoid(alpha)", "a * (1 / (1 + math.exp(-alpha)))", "a * (1.0 / (1.0 + tl.exp(-alpha)))",
     "a * (acc_t(1) / (acc_t(1) + exp_of(-alpha)))"),
    ("minimum(alpha, a)", "torch.clamp(a, max=alpha)", "tl.minimum(alpha, a, propagate_nan=tl.PropagateNan.ALL)",
     "Min<acc_t>::combine(alpha, a)"),
    ("a if flag else 2.0", "a if flag else 2.0", "tl.where(flag != 0, a, 2.0)",
     "(flag ? a : acc_t(2.0))"),
    ("where(not (a > 0) or b < 1 and flag, a, b)",
     "torch.where(~(a > 0) | ((b < 1) & flag), a, b)",
     "tl.where(((a > 0.0) == 0) | ((b < 1.0) & (flag != 0)), a, b)",
     "(!(a > acc_t(0)) || (b < acc_t(1) && flag) ? a : b)"),
    ("where(not flag, a, b)", "a if not flag else b", "tl.where(flag == 0, a, b)",
     "(!flag ? a : b)"),
])
def test_translation_text(text, torch_code, triton_code, cpp_code):
    p = parse_pointwise(text, ARGS)
    assert (p.to_torch(), p.to_triton(), p.to_cpp()) == (torch_code, triton_code, cpp_code)
    assert p.to_functor("cpu") == cpp_code


@pytest.mark.parametrize(("text", "cuda_code", "cpu_code"), [
    ("exp(a - b)", "exp_for<scalar_t>(a - b)", "exp_of(a - b)"),
    ("a * sigmoid(alpha)", "a * divide_for<scalar_t>(acc_t(1), acc_t(1) + exp_for<scalar_t>(-alpha))",
     "a * (acc_t(1) / (acc_t(1) + exp_of(-alpha)))"),
    ("silu(a) * b", "divide_for<scalar_t>(a, acc_t(1) + exp_for<scalar_t>(-a)) * b",
     "a / (acc_t(1) + exp_of(-a)) * b"),
    ("silu(a + b)", "divide_for<scalar_t>((a + b), acc_t(1) + exp_for<scalar_t>(-(a + b)))",
     "(a + b) / (acc_t(1) + exp_of(-(a + b)))"),
    ("a / b + log(a) + sqrt(b)", "a / b + std::log(a) + std::sqrt(b)", "a / b + std::log(a) + std::sqrt(b)"),
])
def test_a_cuda_functor_takes_exp_and_activations_at_its_storage_precision(text, cuda_code, cpu_code):
    """In CUDA functors exp is exp_for<scalar_t> and the activations' division divide_for<scalar_t>
    (approximate for 16-bit storage, pointwise.cuh), in CPU functors exp_of (vectorized for float,
    pointwise.h) and `/`; the rest is the same C++."""
    p = parse_pointwise(text, ARGS)
    assert p.to_functor("cuda") == cuda_code
    assert p.to_functor("cpu") == p.to_cpp() == cpu_code


@pytest.mark.parametrize(("text", "imports"), [
    ("a * b + alpha", set()),
    ("tanh(a)", {"torch"}),
    ("a * sigmoid(alpha)", {"math"}),
    ("where(a > 0, exp(alpha), a)", {"torch", "math"}),
    ("a ** 2", set()),
])
def test_pointwise_records_the_modules_its_torch_translation_calls(text, imports):
    """reference.py imports what its expressions call into, as recorded while they were translated."""
    assert parse_pointwise(text, ARGS).imports == imports


@pytest.mark.parametrize(("text", "calls"), [
    ("a * b + alpha", set()),
    ("sqrt(a) + exp(b)", {"sqrt", "exp"}),
    ("a ** 2", {"pow"}),  # `**` counts as pow: the generated tests pick positive inputs for both
    ("where(flag, log(a), b) if a > 0 else minimum(a, b)", {"where", "log", "minimum"}),
])
def test_pointwise_records_the_functions_it_calls(text, calls):
    """The generated tests choose their inputs by the functions an expression calls, recorded while it was checked."""
    assert parse_pointwise(text, ARGS).calls == calls


def test_names_in_first_use_order():
    assert parse_pointwise("b * a + b + alpha", ARGS).names == ("b", "a", "alpha")
    assert parse_pointwise("a if flag else b", ARGS).names == ("a", "flag", "b")
    p = parse_pointwise("a * 2", ARGS)
    assert p == Pointwise("a * 2", ("a",), (), "", "", "", "")  # translations do not take part in ==


@pytest.mark.parametrize(("text", "message", "line", "column"), [
    ("a + bb", "unknown name 'bb' (did you mean 'b'?)", 0, 4),
    ("a * zzz", "unknown name 'zzz'; the arguments are a, b, alpha, n, flag", 0, 4),
    ("(a +\n  bb)", "unknown name 'bb' (did you mean 'b'?)", 1, 2),
    ("a and b", "'and' needs boolean operands (comparisons or bool arguments)", 0, 0),
    ("a + (b > 0)", "'+' needs numbers, not booleans (use where(cond, x, y))", 0, 5),
    ("sigmoid(flag)", "sigmoid() needs numbers, not booleans (use where(cond, x, y))", 0, 8),
    ("a > 0", ("the expression computes a boolean; use where(cond, x, y) to turn it into a "
              "number"), 0, 0),
    ("alpha * 2", "the expression must use a tensor argument (a, b)", 0, 0),
    ("where(a, a, b)", ("the condition of where() must be a boolean (a comparison or a bool "
                       "argument)"), 0, 6),
    ("a if alpha else b", ("the condition of 'if' must be a boolean (a comparison or a bool "
                          "argument)"), 0, 5),
    ("a < b < 1", "chained comparisons are not allowed; write 'a < b and b < c'", 0, 0),
    ("exp(a, b)", "exp() takes 1 argument, got 2", 0, 0),
    ("exp(x=a)", "keyword arguments are not allowed", 0, 4),
    ("a % 2", "operator '%' is not allowed; use + - * / ** or and/or/not", 0, 0),
    ("~a", "operator '~' is not allowed; use 'not'", 0, 0),
    ("a.real", "attributes are not allowed in a pointwise expression", 0, 0),
    ("a.sum()", "only the built-in functions can be called, like exp(x)", 0, 0),
    ("torch.exp(a)", "only the built-in functions can be called, like exp(x)", 0, 0),
    ("a[0]", "subscripts are not allowed in a pointwise expression", 0, 0),
    ("b * (lambda: a)()", "only the built-in functions can be called, like exp(x)", 0, 5),
    ("[a]", "lists are not allowed in a pointwise expression", 0, 0),
    ("a + 's'", "strings are not allowed in a pointwise expression", 0, 4),
    ("exp", "'exp' is a function; call it, like exp(x)", 0, 0),
    ("a(1)", "'a' is an argument, not a function", 0, 0),
    ("a * 1e999", "this number is too large", 0, 4),
    ("a +", "invalid syntax", 0, 0),
    ("", "the expression is empty", 0, 0),
])
def test_pointwise_errors(text, message, line, column):
    with pytest.raises(ExprError) as info:
        parse_pointwise(text, ARGS)
    assert (info.value.message, info.value.line, info.value.column) == (message, line, column)
    assert str(info.value) == message


def test_pointwise_error_details():
    with pytest.raises(ExprError, match=r"unknown function 'expp' \(did you mean 'exp'\?\); "
                                        r"allowed: abs, exp, log, .*, where, present$"):
        parse_pointwise("expp(a)", ARGS)
    with pytest.raises(ExprError, match="unknown function '__import__'"):
        parse_pointwise("__import__('os')", ARGS)
    # Columns count characters, not UTF-8 bytes.
    with pytest.raises(ExprError) as info:
        parse_pointwise("aé + bb", {"aé": "tensor", "b": "tensor"})
    assert info.value.column == 5
    with pytest.raises(ExprError, match=r"too long \(2400 characters, at most 2000\)"):
        parse_pointwise("a + " * 600, ARGS)
    with pytest.raises(ExprError, match="nested too deeply"):
        parse_pointwise("-" * 60 + "a", ARGS)
    with pytest.raises(ExprError, match="nested too deeply"):
        parse_pointwise("exp(" * 60 + "a" + ")" * 60, ARGS)
    with pytest.raises(ExprError, match="too large once translated"):
        parse_pointwise("((((a ** 8) ** 8) ** 8) ** 8) ** 8", ARGS)
    with pytest.raises(ExprError, match="argument name 'tl' clashes with generated code"):
        parse_pointwise("tl * 2", {"tl": "tensor"})
    with pytest.raises(ValueError, match="kind 'Tensor'"):
        parse_pointwise("a", {"a": "Tensor"})


# --- backward formulas ------------------------------------------------------------------------

ONE = FormulaContext({"a": "tensor", "b": "tensor", "x": "tensor", "alpha": "float",
                      "dims": "other"}, 1, "kopgen_test_expr", frozenset({"mymul"}))
TWO = FormulaContext({"x": "tensor"}, 2, "kopgen_test_expr", frozenset())


@pytest.mark.parametrize(("text", "ctx", "fields"), [
    ("grad * b", ONE, {"saved_tensors": ("b",), "grads_used": (0,)}),
    ("grad * a.sum(-1, keepdim=True)", ONE, {"saved_tensors": ("a",), "grads_used": (0,)}),
    ("grad.expand(x.shape)", ONE, {"metadata_only": ("x",), "grads_used": (0,)}),
    ("grad * x.size(0) / x.numel() + x.dim() + (x.dtype == torch.float32)", ONE,
     {"metadata_only": ("x",), "grads_used": (0,), "imports": frozenset({"torch"})}),
    ("grad * x + torch.zeros(x.shape, device=x.device)", ONE,
     {"saved_tensors": ("x",), "grads_used": (0,), "imports": frozenset({"torch"})}),
    ("grads[0] * torch.cos(x) - grads[1] * torch.sin(x)", TWO,
     {"saved_tensors": ("x",), "grads_used": (0, 1), "imports": frozenset({"torch"})}),
    ("grad * result * (1 - result)", ONE, {"results_used": (0,), "grads_used": (0,)}),
    ("grads[1] * results[0]", TWO, {"results_used": (0,), "grads_used": (1,)}),
    ("mymul(grad, b) * alpha", ONE, {"saved_tensors": ("b",), "scalars": ("alpha",),
                                     "grads_used": (0,), "own_ops_called": ("mymul",),
                                     "python": "torch.ops.kopgen_test_expr.mymul.default(grad, b)"
                                               " * alpha", "imports": frozenset({"torch"})}),
    ("grad.sum(dims) * b * a", ONE, {"saved_tensors": ("a", "b"), "scalars": ("dims",),
                                     "grads_used": (0,)}),
    ("None", ONE, {}),
    ("torch.nn.functional.relu(grad) if alpha > 0 else -grad", ONE,
     {"scalars": ("alpha",), "grads_used": (0,), "imports": frozenset({"torch"})}),
    ("(grad, [1, 2])", ONE, {"grads_used": (0,)}),
])
def test_formula_uses(text, ctx, fields):
    f = parse_formula(text, ctx)
    empty = {"saved_tensors": (), "metadata_only": (), "scalars": (), "results_used": (),
             "grads_used": (), "own_ops_called": ()}
    want = Formula(**{"text": text, "python": text, **empty, **fields})
    assert f == want


@pytest.mark.parametrize(("text", "ctx", "message", "column"), [
    ("__import__('os')", ONE, ("unknown name '__import__'; use the op's arguments, grad(s), "
                              "result(s), torch or this namespace's ops"), 0),
    ("grad.__class__", ONE, ("attribute '__class__' is not allowed (names starting with '_' are "
                            "private)"), 5),
    ("().__class__.__bases__", ONE, ("attribute '__bases__' is not allowed (names starting with "
                                    "'_' are private)"), 13),
    ("torch._C", ONE, "attribute '_C' is not allowed (names starting with '_' are private)", 6),
    ("x[0]", ONE, ("indexing is only allowed as grads[i] or results[i] (use x.size(d) for a "
                  "dimension)"), 0),
    ("grads[5]", TWO, "grads[5] is out of range: the op has 2 outputs", 6),
    ("grads[-1]", TWO, "grads[...] needs an integer literal, like grads[0]", 6),
    ("grads * 2", TWO, "'grads' must be indexed with an integer literal, like grads[0]", 0),
    ("grad * x", TWO, "'grad' is only available when the op has one output; use grads[i]", 0),
    ("result", TWO, "'result' is only available when the op has one output; use results[i]", 0),
    ("lambda: 1", ONE, "lambdas are not allowed in a derivative formula", 0),
    ("[i for i in x]", ONE, "comprehensions are not allowed in a derivative formula", 0),
    ("grad * (y := 2)", ONE, "':=' assignments are not allowed in a derivative formula", 8),
    ('"str"', ONE, "strings are not allowed in a derivative formula", 0),
    ("f'{grad}'", ONE, "f-strings are not allowed in a derivative formula", 0),
    ("torch.cat(*grad)", ONE, "'*' arguments are not allowed in a derivative formula", 10),
    ("torch.sum(**grad)", ONE, "'**' arguments are not allowed", 10),
    ("a(1)", ONE, "'a' is an argument, not a function", 0),
    ("grad * bb", ONE, "unknown name 'bb' (did you mean 'b'?)", 7),
    ("mymull(grad, b)", ONE, "unknown name 'mymull' (did you mean 'mymul'?)", 0),
    ("mymul", ONE, "'mymul' is an op; call it, like mymul(...)", 0),
    ("open('f')", ONE, ("unknown name 'open'; use the op's arguments, grad(s), result(s), "
                        "torch or this namespace's ops"), 0),
    ("torch", ONE, "'torch' can only be used as torch.<name>", 0),
    ("grad[0](x)", ONE, ("only torch functions, tensor methods and this namespace's ops can be "
                        "called"), 0),
    ("{1: grad}", ONE, "dicts are not allowed in a derivative formula", 0),
    ("x.shape[0] * grad", ONE, ("indexing is only allowed as grads[i] or results[i] (use "
                                "x.size(d) for a dimension)"), 0),
    ("grad[0:1]", ONE, ("indexing is only allowed as grads[i] or results[i] (use x.size(d) for a "
                       "dimension)"), 0),
])
def test_formula_errors(text, ctx, message, column):
    with pytest.raises(ExprError) as info:
        parse_formula(text, ctx)
    assert (info.value.message, info.value.line, info.value.column) == (message, 0, column)


def test_formula_limits():
    with pytest.raises(ExprError, match=r"too long \(3000 characters, at most 2000\)"):
        parse_formula("grad" + " + grad" * 428, ONE)
    with pytest.raises(ExprError, match="nested too deeply"):
        parse_formula("torch.neg(" * 100 + "grad" + ")" * 100, ONE)
    with pytest.raises(ExprError, match="nested too deeply"):
        parse_formula("-" * 200 + "grad", ONE)
    # Redundant parentheses make no tree nodes, so they do not count; Python caps them at 200.
    assert parse_formula("(" * 60 + "grad" + ")" * 60, ONE).python == "grad"
    with pytest.raises(ExprError, match="too many nested parentheses"):
        parse_formula("(" * 300 + "grad" + ")" * 300, ONE)


@torch.library.custom_op("kopgen_test_expr::mymul", mutates_args=())
def _mymul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a * b


def test_formula_python_runs():
    x = torch.linspace(0.1, 1.0, 6).reshape(2, 3)
    b = torch.full((2, 3), 3.0)
    env = {"torch": torch, "grad": torch.ones(2, 3), "a": x, "b": b, "x": x, "alpha": 2.0,
           "result": torch.sigmoid(x)}
    for text, want in [
        ("mymul(grad, b) * alpha", torch.full((2, 3), 6.0)),
        ("grad.sum(0).expand(x.shape)", torch.full((2, 3), 2.0)),
        ("grad * result * (1 - result)", torch.sigmoid(x) * (1 - torch.sigmoid(x))),
        ("grad * a.sum(-1, keepdim=True)", x.sum(-1, keepdim=True).expand(2, 3)),
    ]:
        got = eval(parse_formula(text, ONE).python, dict(env))
        torch.testing.assert_close(got, want)
    grads = [torch.ones(3), torch.full((3,), 2.0)]
    f = parse_formula("grads[0] * torch.cos(x) - grads[1] * torch.sin(x)", TWO)
    x = torch.tensor([0.0, 0.5, 1.0])
    torch.testing.assert_close(eval(f.python, {"torch": torch, "grads": grads, "x": x}),
                               torch.cos(x) - 2 * torch.sin(x))


OPTIONAL_ARGS = {"x": "tensor", "flag": "bool", "b": "optional"}


def test_optional_tensor_is_read_only_where_present_tested_it():
    p = parse_pointwise("x + (b if present(b) else 0.0)", OPTIONAL_ARGS)
    assert p.names == ("x", "b") and p.tested == ("b",)
    assert p.to_torch() == "x + (b if b is not None else 0.0)"
    assert p.to_triton() == "x + tl.where(HAS_b, b, 0.0)"
    assert p.to_cpp() == "x + (has_b ? b : acc_t(0.0))"
    # where(), `and`, and the else branch of `not present()` prove presence too.
    for text in ["where(present(b), b, x)", "b * x if present(b) and flag else x", "x if not present(b) else b"]:
        assert parse_pointwise(text, OPTIONAL_ARGS).tested == ("b",)


@pytest.mark.parametrize(
    "text, message",
    [
        ("x + b", "'b' is an optional Tensor (Tensor?), which may be None"),
        ("b if present(b) or flag else x", "'b' is an optional Tensor"),
        ("x if present(b) else b", "'b' is an optional Tensor"),
        ("x if present(x) else 0.0", "present() takes one optional Tensor argument (Tensor?): b"),
        ("x if present(b, b) else 0.0", "present() takes 1 argument"),
    ],
)
def test_optional_tensor_errors(text, message):
    with pytest.raises(ExprError, match=re.escape(message)):
        parse_pointwise(text, OPTIONAL_ARGS)


# --- every problem at once; constants that fail on every call; pure formulas -------------------


def _problems(parse, text, ctx):
    with pytest.raises(ExprError) as info:
        parse(text, ctx)
    return [(e.message, e.column) for e in info.value.errors]


def test_every_independent_problem_of_an_expression_is_reported():
    assert _problems(parse_pointwise, "a * bb + exp(cc) + where(a, b, zz)", ARGS) == [
        ("unknown name 'bb' (did you mean 'b'?)", 4),
        ("unknown name 'cc'; the arguments are a, b, alpha, n, flag", 13),
        ("the condition of where() must be a boolean (a comparison or a bool argument)", 25),
        ("unknown name 'zz'; the arguments are a, b, alpha, n, flag", 31),
    ]
    assert [column for _, column in _problems(parse_formula, "grad * zz + torch.foo_(yy) + x[0]", ONE)] == [
        7, 12, 23, 29]


@pytest.mark.parametrize(("text", "message", "column"), [
    ("a + 1 / 0 * b", "division by zero: this is always 0", 8),
    ("a / (2 - 2.0)", "division by zero: this is always 0", 5),
    ("a + 0 ** -1", "0 to a negative power divides by zero", 4),
    ("a * 99999999999999999999", "this integer does not fit in 64 bits; write it as a float (1e+20)", 4),
    ("a * (1e200 * 1e200)", "this constant arithmetic overflows (beyond float64)", 5),
    ("a * 10 ** 400", "this constant arithmetic overflows (beyond float64)", 4),
])
def test_pointwise_constants_that_fail_every_call(text, message, column):
    assert _problems(parse_pointwise, text, ARGS) == [(message, column)]


@pytest.mark.parametrize(("text", "message", "column"), [
    ("grad * alpha / 0", "division by zero: this is always 0", 15),
    ("grad * (1 // 0)", "division by zero: this is always 0", 13),
    ("grad % 0.0", "modulo by zero: this is always 0", 7),
    ("grad * 10**10**10", "this constant arithmetic overflows (beyond float64)", 7),
    ("grad * 1e999", "this number is too large", 7),
    ("grad * -99999999999999999999", "this integer does not fit in 64 bits; write it as a float (1e+20)", 8),
])
def test_formula_constants_that_fail_every_call(text, message, column):
    assert _problems(parse_formula, text, ONE) == [(message, column)]


def test_constants_that_work_are_kept():
    assert parse_pointwise("a * (-8) ** 0.5 + a * 2 ** 10 + a / 1e-300", ARGS)
    assert parse_formula("grad * 9223372036854775807 + grad * 0.0 ** 2 + grad / (1 - 2)", ONE)


def impure_context() -> FormulaContext:
    """An op `s_` of the namespace mutates its argument."""
    return FormulaContext({"b": "tensor"}, 1, "kopgen_test_expr", frozenset({"mymul", "s_"}), frozenset({"s_"}))


PURE = "a formula computes new tensors and writes none"
RANDOM = "is random; a derivative formula must give the same gradient on every call"


@pytest.mark.parametrize(("text", "message"), [
    ("torch.mul(grad, b, out=b)", f"'out=' is not allowed in a derivative formula: {PURE}"),
    ("torch.nn.functional.relu(b, inplace=True)", f"'inplace=' is not allowed in a derivative formula: {PURE}"),
    ("s_(b, 2.0)", "'s_' mutates its arguments; a derivative formula may call only ops that write nothing (functional ops)"),
    ("torch.nn.functional.dropout(grad)", f"torch.nn.functional.dropout {RANDOM}"),
    ("torch.rand_like(grad)", f"torch.rand_like {RANDOM}"),
    ("torch.bernoulli(grad)", f"torch.bernoulli {RANDOM}"),
    ("torch.nn.functional.rrelu(grad)", f"torch.nn.functional.rrelu {RANDOM}"),
    ("grad.multinomial(2)", f"method 'multinomial' {RANDOM}"),
])
def test_formulas_are_pure(text, message):
    assert [m for m, _ in _problems(parse_formula, text, impure_context())] == [message]
    assert parse_formula("mymul(grad, b) + torch.nn.functional.normalize(grad)", impure_context())


# --- a custom kernel's reference: a formula that may also index and slice Tensors --------------

REFERENCE = FormulaContext({"input": "tensor", "cache": "tensor", "positions": "tensor"}, 0, "kopgen_test_expr",
                           frozenset(), string_keywords=True)


def test_a_reference_indexes_and_slices_tensors():
    text = "torch.nn.functional.silu(input[..., :input.shape[-1] // 2]) * cache[positions, ::2, None]"
    formula = parse_formula(text, REFERENCE)
    # printed as ruff formats it: a slice bound that is more than a name or a number spaces its colon
    assert formula.python == text.replace("[..., :input", "[..., : input")
    assert formula.saved_tensors == ("input", "cache", "positions")


@pytest.mark.parametrize(("text", "message", "column"), [
    ("input[..., 'a']", 'a reference takes strings only as keyword values, like reduction="none"', 11),
    ("input[:unknown]", "unknown name 'unknown'; use the op's arguments, torch or this namespace's ops", 7),
    ("input + grad", "a reference has no 'grad': it computes the op's outputs from its arguments", 8),
    ("input[lambda: 0]", "lambdas are not allowed in a reference", 6),
])
def test_a_reference_index_is_checked_as_the_rest(text, message, column):
    with pytest.raises(ExprError) as info:
        parse_formula(text, REFERENCE)
    assert (info.value.message, info.value.column) == (message, column)


def test_a_reference_indexes_a_call_of_an_own_op_of_several_returns_as_a_formula_does():
    ctx = FormulaContext({"x": "tensor"}, 0, "kopgen_test_expr", frozenset({"pair"}), own_op_returns={"pair": 2},
                         string_keywords=True)
    assert parse_formula("pair(x)[1][..., :2]", ctx).python == "torch.ops.kopgen_test_expr.pair.default(x)[1][..., :2]"
    with pytest.raises(ExprError, match=r"out of range: 'pair' returns 2 values"):
        parse_formula("pair(x)[2]", ctx)


def test_a_formula_still_indexes_only_grads_and_results():
    with pytest.raises(ExprError, match=r"indexing is only allowed as grads\[i\] or results\[i\]"):
        parse_formula("grad * a[0]", ONE)


def fused_context() -> FormulaContext:
    """The namespace has a fused backward `norm_backward` of two returns and an op `scaled` of one."""
    return FormulaContext({"x": "tensor", "w": "tensor", "eps": "float"}, 1, "kopgen_test_expr",
                          frozenset({"norm_backward", "scaled"}), own_op_returns={"norm_backward": 2, "scaled": 1})


def test_a_fused_backward_call_is_indexed_and_reads_its_arguments():
    f = parse_formula("norm_backward(grad, x, w, eps)[1]", fused_context())
    assert f.python == "torch.ops.kopgen_test_expr.norm_backward.default(grad, x, w, eps)[1]"
    assert (f.saved_tensors, f.scalars, f.grads_used, f.own_ops_called) == (("x", "w"), ("eps",), (0,), ("norm_backward",))


@pytest.mark.parametrize(("text", "message", "column"), [
    ("norm_backward(grad, x, w, eps)[2]", "norm_backward(...)[2] is out of range: 'norm_backward' returns 2 values", 31),
    ("norm_backward(grad, x, w, eps)[-1]", "norm_backward(...)[...] needs an integer literal, like norm_backward(...)[0]",
     31),
    ("norm_backward(grad, x, w, eps)[x]", "norm_backward(...)[...] needs an integer literal, like norm_backward(...)[0]",
     31),
    ("scaled(grad, w)[0]", "'scaled' returns one Tensor; use its call without an index", 16),
    ("norm_backward(grad, x, w, eps) * 2", "'norm_backward' returns 2 values; index its call, like norm_backward(...)[0]",
     0),
    ("norm_backward(grad, y, w, eps)[0]", ("unknown name 'y'; use the op's arguments, grad(s), result(s), torch or "
                                           "this namespace's ops"), 20),
])
def test_fused_backward_calls_are_checked(text, message, column):
    assert _problems(parse_formula, text, fused_context()) == [(message, column)]
