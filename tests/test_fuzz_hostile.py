"""Hostile specs, generated: each example plants one value of a class that must be refused, and the
spec must fail with a spec error on the planted line, quickly, never with a traceback or a package.

The classes are those of issue 12: YAML type tags where text is meant, over-long names, names that
shadow a module or a C/C++ name, expressions that fail on every call (constant division by zero,
unrepresentable literals), backward formulas that mutate or draw random numbers, and alias bombs.
Derandomized, so that CI sees the same examples every run (KOPGEN_FUZZ_EXAMPLES raises the count).
"""

from __future__ import annotations

import os
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kopgen.errors import SpecError
from kopgen.pipeline import load_spec_text

from .conftest import cpu_bound

EXAMPLES = int(os.environ.get("KOPGEN_FUZZ_EXAMPLES", "300"))

# A valid spec with one {slot} per place a hostile value goes; `{marker}` lines are the planted ones.
TEMPLATE = """\
kopgen: 1
package: {package}
namespace: {namespace}
version: {version}
description: {description}
defaults:
  registration: {route}
  backends: {backends}
ops:
  - schema: "{op}(Tensor {a}, Tensor b, float c) -> Tensor"
    doc: {doc}
    compute: "{compute}"
    backward:
      {a}: "{formula}"
      b: "grad * {a}"
  - schema: "s_(Tensor(a!) x, float s) -> ()"
    compute: {{x: "x * s"}}
"""

VALID = {
    "package": "kfuzz",
    "namespace": "kfuzz",
    "version": "0.1.0",
    "description": "Fuzzed kernels",
    "route": "custom_op",
    "backends": "{cpu: python, cuda: triton}",
    "op": "muladd",
    "a": "a",
    "doc": "Fused a * b + c.",
    "compute": "a * b + c",
    "formula": "grad * b",
}
COMPILED_BACKENDS = "{cpu: cpp, cuda: cuda}"
# The lines that hold each slot (an argument's name is in the schema, the compute and backward).
LINES_OF = {key: {i for i, line in enumerate(TEMPLATE.splitlines(), 1) if "{" + key + "}" in line} for key in VALID}

TYPE_TAGS = [
    "!!binary aGVsbG8=",
    "2001-12-14",
    "2001-12-14t21:59:43-05:00",
    "2001-12-14 21:59:43.10 -5",
    "!!timestamp 2002-12-14",
    "!!set {a: null}",
    "[1, 2]",
    "{a: 1}",
    "~",
    "12",
    "1.5",
    ".nan",
    "!!python/object:os.system echo",
]
SHADOWING = [
    "torch", "typing", "math", "triton", "numpy", "os", "sys", "builtins", "class", "None", "import",
    "pytest", "setuptools", "collections", "json", "__init__",
]
C_NAMES = ["errno", "EOF", "INFINITY", "M_PI", "int64_t", "NULL", "size_t", "stdout", "assert", "NAN"]
OP_NAMES = ["__init__", "__getattr__", "__call__", "_support", "ops", "reference"]
FAILING_COMPUTE = [
    "a + 1 / 0 * b",
    "a * b / (2 - 2)",
    "c / 0",
    "a * 0 ** -1",
    "a * 99999999999999999999",
    "a * 1e999",
    "a * 10 ** 10 ** 10",
    "a // 0 + b",
    "a * b % 0",
]
IMPURE_FORMULAS = [
    "torch.mul(grad, b, out=b)",
    "torch.nn.functional.relu(b, inplace=True)",
    "s_(b, 2.0)",
    "torch.nn.functional.dropout(grad * b)",
    "grad * torch.rand_like(b)",
    "grad * torch.randn_like(b)",
    "grad * torch.bernoulli(b)",
    "grad * (1 // 0)",
    "grad * 10 ** 10 ** 10",
    "b.add_(grad)",
]


@st.composite
def long_names(draw) -> str:
    return "k" + draw(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=129, max_size=400))


@st.composite
def hostile_specs(draw) -> tuple[str, set[int]]:
    """(spec text, the lines an error must point at, one of them at least)."""
    values = dict(VALID)
    kind = draw(st.sampled_from(["type_tag", "long_name", "shadowing", "c_name", "op_name", "compute", "formula"]))
    if kind == "type_tag":
        key = draw(st.sampled_from(["package", "namespace", "version", "description", "doc"]))
        values[key] = draw(st.sampled_from(TYPE_TAGS))
    elif kind == "long_name":
        key = draw(st.sampled_from(["package", "namespace", "op", "a"]))
        values[key] = draw(long_names())
    elif kind == "shadowing":
        key = "package"
        values[key] = draw(st.sampled_from(SHADOWING))
    elif kind == "c_name":
        key = draw(st.sampled_from(["op", "a", "namespace"]))
        values.update(route="torch_library", backends=COMPILED_BACKENDS)
        values[key] = draw(st.sampled_from(C_NAMES))
    elif kind == "op_name":
        key = "op"
        values[key] = draw(st.sampled_from(OP_NAMES))
    elif kind == "compute":
        key = "compute"
        values[key] = draw(st.sampled_from(FAILING_COMPUTE))
    else:
        key = "formula"
        values[key] = draw(st.sampled_from(IMPURE_FORMULAS))
    if values["a"] != "a":  # a renamed argument is renamed where compute reads it
        values["compute"] = values["compute"].replace("a", values["a"], 1)
    return TEMPLATE.format(**values), LINES_OF[key]


def refused(text: str, filename: str) -> list[str]:
    """The error lines of a spec that must fail; the test fails if it generates."""
    try:
        load_spec_text(text, filename)
    except SpecError as error:
        return str(error).splitlines()
    raise AssertionError(f"accepted a hostile spec:\n{text}")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=hostile_specs())
def test_hostile_values_are_refused_at_their_line(case):
    text, planted = case
    lines = refused(text, "hostile.yaml")
    assert all(entry.startswith("hostile.yaml:") and ": error: " in entry for entry in lines), lines
    assert any(int(entry.split(":")[1]) in planted for entry in lines), (text, lines)


@st.composite
def alias_bombs(draw) -> str:
    """A billion-laughs document (each level repeats the one below) or a self-referential alias."""
    if draw(st.booleans()):
        return "kopgen: 1\npackage: &p [*p]\nops: []\n"
    width, depth = draw(st.integers(2, 10)), draw(st.integers(6, 12))
    levels = ["a0: &a0 [lol]"]
    for level in range(1, depth):
        levels.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    where = draw(st.sampled_from(["top", "description", "ops"]))
    bomb = "\n".join(levels)
    if where == "top":
        return f"{bomb}\nkopgen: 1\npackage: kfuzz\nops: *a{depth - 1}\n"
    nested = "\n".join("  " + line for line in levels)
    return f"kopgen: 1\npackage: kfuzz\n{where}:\n{nested}\n"


@settings(max_examples=min(EXAMPLES, 60), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(text=alias_bombs())
def test_alias_bombs_fail_within_a_second(text):
    # This thread's CPU time: the bound is on kopgen's work, not on a busy machine's scheduling, nor on threads
    # that earlier tests left in this worker (torch's pool counts in the process's time).
    start = time.thread_time()
    lines = refused(text, "bomb.yaml")
    elapsed = time.thread_time() - start
    assert all(entry.startswith("bomb.yaml:") and ": error: " in entry for entry in lines), lines
    assert elapsed < cpu_bound(1.0), f"{elapsed:.2f} s for:\n{text}"
