"""Property-based tests: random valid specs give code that compiles; random edits of valid specs
either generate or fail with a clean spec error, never a crash.

Derandomized, so that CI sees the same examples every run; explore further with
KOPGEN_FUZZ_EXAMPLES=5000 and hypothesis' own seeds (remove derandomize) when changing the loader.
"""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
import sysconfig

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kopgen.errors import SpecError
from kopgen.pipeline import load_spec_text, render_files

from .conftest import EXAMPLES

NAMES = ["a", "b", "x", "y", "gate", "bias2", "weight"]
UNARY = ["abs", "exp", "sin", "cos", "tanh", "sigmoid", "relu", "erf", "floor", "ceil"]
ROUTES = {
    "custom_op": "{cpu: triton, cuda: triton}",
    "library": "{cpu: python, cuda: triton}",
    "triton_op": "{cpu: triton, cuda: triton}",
    "torch_library": "{cpu: cpp, cuda: cuda}",
    "stable_abi": "{cpu: cpp, cuda: triton}",
}


@st.composite
def expressions(draw, tensors: list[str], scalars: list[str], depth: int = 3) -> str:
    leaves = tensors + scalars + ["1.5", "2"]
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(leaves))
    kind = draw(st.sampled_from(["unary", "binary", "where", "minmax"]))
    sub = expressions(tensors, scalars, depth - 1)
    if kind == "unary":
        return f"{draw(st.sampled_from(UNARY))}({draw(sub)})"
    if kind == "binary":
        return f"({draw(sub)} {draw(st.sampled_from(['+', '-', '*']))} {draw(sub)})"
    if kind == "where":
        return f"where({draw(sub)} > {draw(sub)}, {draw(sub)}, {draw(sub)})"
    return f"{draw(st.sampled_from(['minimum', 'maximum']))}({draw(sub)}, {draw(sub)})"


@st.composite
def specs(draw, routes=tuple(ROUTES)) -> str:
    names = draw(st.permutations(NAMES))
    tensors = names[: draw(st.integers(1, 3))]
    scalars = names[len(tensors) : len(tensors) + draw(st.integers(0, 2))]
    route = draw(st.sampled_from(routes))
    args = [f"Tensor {t}" for t in tensors] + [f"float {s}=1.0" for s in scalars]
    terms = [draw(expressions(tensors, scalars)) for _ in range(2)]
    compute = " + ".join(terms + tensors)  # every Tensor is used
    backward = "".join(f'      {t}: "grad * {draw(st.sampled_from(tensors))}"\n' for t in tensors)
    if draw(st.booleans()):  # an optional Tensor, read where present() says it was given
        args.append("Tensor? maybe=None")
        compute += f" + ({draw(expressions(tensors, scalars))} * maybe if present(maybe) else 0.0)"
        backward += '      maybe: "grad"\n'
    return (
        f"kopgen: 1\npackage: kfuzz\ndefaults:\n  registration: {route}\n  backends: {ROUTES[route]}\nops:\n"
        f'  - schema: "fuzzed({", ".join(args)}) -> Tensor"\n'
        f'    doc: "Fuzzed: {compute}"\n'
        f'    compute: "{compute}"\n'
        f"    backward:\n{backward}"
    )


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs())
def test_random_valid_specs_give_python_that_compiles(tmp_path_factory, spec):
    """The Python compiles; the package's and the benchmark's are formatted as `ruff format` has them
    (long random expressions split where ruff splits them)."""
    package = load_spec_text(spec, "fuzz.yaml")
    folder = tmp_path_factory.mktemp("fuzz")
    for path, (_, text) in render_files(package).items():
        if path.endswith(".py"):
            target = folder / path.replace("/", "__")
            target.write_text(text)
            py_compile.compile(str(target), doraise=True)
    formatted = [str(p) for p in folder.glob("*.py") if p.name.startswith((f"{package.name}__", "benchmarks__"))]
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--no-cache", "--isolated", "--diff", *formatted],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, spec + result.stdout[-3000:]


@pytest.mark.slow
@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(routes=("stable_abi",)))
def test_random_valid_specs_give_cpp_that_compiles(tmp_path_factory, spec):
    """g++ -fsyntax-only -Wall -Werror on the C++ of random stable-ABI specs (its headers are light)."""
    from torch.utils.cpp_extension import include_paths

    package = load_spec_text(spec, "fuzz.yaml")
    folder = tmp_path_factory.mktemp("fuzzcpp")
    for path, (_, text) in render_files(package).items():
        if path.endswith((".cpp", ".h")):
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(text)
    includes = [f"-I{p}" for p in include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    result = subprocess.run(
        ["g++", "-std=c++20", "-fsyntax-only", "-Wall", "-Werror", "-DTORCH_TARGET_VERSION=0x020a000000000000",
         *includes, str(folder / "kfuzz/csrc/ops.cpp")],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, spec + result.stderr[-3000:]


EXAMPLE_TEXTS = [path.read_text() for path in sorted(EXAMPLES.glob("*.yaml"))]


@st.composite
def edited_specs(draw) -> str:
    """An example spec with a few random edits: characters deleted, inserted or replaced, lines swapped."""
    text = draw(st.sampled_from(EXAMPLE_TEXTS))
    for _ in range(draw(st.integers(1, 3))):
        if not text:
            break
        where = draw(st.integers(0, len(text) - 1))
        edit = draw(st.sampled_from(["delete", "insert", "replace", "swap_lines"]))
        if edit == "delete":
            text = text[:where] + text[where + 1 :]
        elif edit == "insert":
            text = text[:where] + draw(st.sampled_from(list(":-[]{}\"'#*!()\\ \n\tab0_"))) + text[where:]
        elif edit == "replace":
            text = text[:where] + draw(st.characters(codec="utf-8")) + text[where + 1 :]
        else:
            lines = text.splitlines(True)
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "".join(lines)
    return text


@settings(max_examples=int(os.environ.get("KOPGEN_FUZZ_EXAMPLES", "300")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(text=edited_specs())
def test_random_edits_of_valid_specs_generate_or_fail_cleanly(text):
    try:
        package = load_spec_text(text, "edited.yaml")
    except SpecError as error:
        lines = str(error).splitlines()
        assert lines and all(line.startswith("edited.yaml:") and ": error: " in line for line in lines), str(error)
        return
    for path, (_, rendered) in render_files(package).items():
        if path.endswith(".py"):
            compile(rendered, path, "exec")
