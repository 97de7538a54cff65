"""Generation defects found by fuzzing the spec format, one test (or a few) per defect: a spec `kopgen check`
crashed on, or accepted while the package it generated did not parse or import. Each test renders its spec in
memory or generates it into tmp_path; one subprocess imports the generated packages (no builds, no suites)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from kopgen import generate
from kopgen.cli import main
from kopgen.pipeline import load_spec_text, render_files


def spec_text(schema: str, registration: str = "custom_op", tests: str = "", package: str = "kfz") -> str:
    """A one-op `kernel: custom` spec on a Python route (triton_op: a CUDA Triton kernel, a CPU python one);
    the schema is quoted as JSON, which YAML reads."""
    backends = "{cpu: python, cuda: triton}" if registration == "triton_op" else "{cpu: python}"
    return textwrap.dedent(f"""\
        kopgen: 1
        package: {package}
        defaults: {{registration: {registration}, backends: {backends}}}
        ops:
          - schema: {json.dumps(schema)}
            kernel: custom
            reference: "x"
            fake: {{shape: x.shape}}
        """) + (f"    tests: {tests}\n" if tests else "")  # fmt: skip


def rendered(text: str) -> dict[str, str]:
    return {path: source for path, (_, source) in render_files(load_spec_text(text, "spec.yaml")).items()}


def run_cli(tmp_path, text: str, *args: str):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    return CliRunner().invoke(main, [*args, str(spec)]), spec


# -- D2: a `Tensor[]` return without `fake` raised AttributeError (fake.position on None)

LIST_WITHOUT_FAKE = """\
kopgen: 1
package: klist
defaults: {backends: {cpu: python}}
ops:
  - schema: "f(Tensor x) -> Tensor[]"
    kernel: custom
    reference: "[x, x]"
"""


@pytest.mark.parametrize("command", ["check", "new"])
def test_a_list_return_without_fake_is_an_error_at_the_schema(tmp_path, command):
    out = tmp_path / "out"
    result, spec = run_cli(tmp_path, LIST_WITHOUT_FAKE, command, *(["-o", str(out)] if command == "new" else []))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, AttributeError)
    assert not out.exists()
    lines = result.output.strip().replace(str(spec), "spec.yaml").splitlines()
    assert all(line.startswith("spec.yaml:") and ": error: " in line for line in lines), lines
    # at the schema's value (line 5, column 14), naming Tensor[] and the list `fake` must give
    assert any(line.startswith("spec.yaml:5:14: error: ") and "`Tensor[]` return needs `fake` as a list" in line
               for line in lines), lines


def test_a_list_return_with_a_mapping_fake_is_still_an_error_at_fake(tmp_path):
    text = LIST_WITHOUT_FAKE + "    fake: {shape: x.shape}\n"
    result, spec = run_cli(tmp_path, text, "check")
    assert result.exit_code == 2, result.output
    assert f"{spec}:8:11: error: a `Tensor[]` return needs `fake` as a list" in result.output


# -- D7: a string default's double quotes inside the double-quoted schema="..." of a triton_op


def registered_schemas(source: str) -> list[str]:
    """The schema strings _registration.py gives torch: custom_op(..., schema=...) and _lib.define(...)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            found += [ast.literal_eval(k.value) for k in node.keywords if k.arg == "schema"]
            if isinstance(node.func, ast.Attribute) and node.func.attr == "define":
                found.append(ast.literal_eval(node.args[0]))
    return found


@pytest.mark.parametrize("registration", ["custom_op", "library", "triton_op"])
@pytest.mark.parametrize("default", ['"a"', "'a'", '"it\'s"'])
def test_a_string_default_is_printed_as_a_python_literal(registration, default):
    schema = f"f(Tensor x, str mode={default}) -> Tensor"
    files = rendered(spec_text(schema, registration))
    schemas = registered_schemas(files["kfz/_registration.py"])  # ast.parse: a SyntaxError fails here
    assert schemas, files["kfz/_registration.py"]
    assert all(s.endswith(schema.removeprefix("f")) for s in schemas), schemas


@pytest.mark.parametrize("registration", ["torch_library", "stable_abi"])
def test_a_string_default_is_escaped_in_the_cpp_definition(registration):
    text = spec_text('f(Tensor x, str mode="a") -> Tensor').replace("custom_op", registration)
    text = text.replace("{cpu: python}", "{cpu: cpp}")
    assert 'm.def("f(Tensor x, str mode=\\"a\\") -> Tensor"' in rendered(text)["kfz/csrc/ops.cpp"]


# -- D8: a triton_op's body annotated Sequence[...] (its schema, inferred by torch) with no import of Sequence


@pytest.mark.parametrize("arg", ["int[] dims", "float[] dims", "SymInt[] dims", "int[]? dims=None"])
def test_a_triton_op_taking_a_list_imports_sequence(arg):
    files = rendered(spec_text(f"f(Tensor x, {arg}) -> Tensor", "triton_op", "{args: {dims: {value: [1, 2]}}}"))
    registration = files["kfz/_registration.py"]
    assert "Sequence[" in registration
    assert "from collections.abc import Sequence" in registration.split("import torch\n")[0]


def test_a_python_route_without_lists_imports_no_sequence():
    registration = rendered(spec_text("f(Tensor x) -> Tensor", "triton_op"))["kfz/_registration.py"]
    assert "Sequence" not in registration


# A triton_op's schema torch infers from the signature cannot hold these: an error at the argument, where
# importing the generated package raised infer_schema's ValueError.
TRITON_OP_REFUSED = {
    "int[] dims=[1, 2]": "a list default, [1, 2]",
    "int[2] dims=1": "a list default, 1",
    "Layout layout=strided": "a Layout argument",
    "MemoryFormat? memory_format=None": "a MemoryFormat argument",
    "Generator? generator=None": "a Generator argument",
    "Tensor[]? others=None": "an optional list of Tensors",
}


@pytest.mark.parametrize("arg", sorted(TRITON_OP_REFUSED))
def test_a_triton_op_refuses_what_infer_schema_cannot_declare(tmp_path, arg):
    result, spec = run_cli(tmp_path, spec_text(f"f(Tensor x, {arg}) -> Tensor", "triton_op"), "check")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    column = 14 + len("f(Tensor x, ") + arg.index(" ") + 1  # the argument's name
    assert (f"{spec}:5:{column}: error: torch.library.triton_op infers its schema from the Python signature, "
            f"which cannot declare {TRITON_OP_REFUSED[arg]}") in result.output


@pytest.mark.parametrize("arg", sorted(TRITON_OP_REFUSED))
def test_custom_op_takes_what_triton_op_refuses(arg):
    assert rendered(spec_text(f"f(Tensor x, {arg}) -> Tensor"))["kfz/_registration.py"]


# -- D9: every Tensor of its own test dtype, nothing to upcast: reference.py printed `    = upcast()`

OWN_DTYPE = """\
kopgen: 1
package: kv
defaults: {backends: {cpu: python}}
ops:
  - schema: "f(Tensor x) -> Tensor"
    kernel: custom
    reference: "x * 2"
    fake: {shape: x.shape}
    tests: {args: {x: {dtype: int64}}}
"""


def test_a_reference_with_nothing_to_upcast_has_no_upcast_line():
    reference = rendered(OWN_DTYPE)["kv/reference.py"]
    ast.parse(reference)
    assert "upcast" not in reference
    assert "    return (x * 2).to(dtype)" in reference


def test_a_reference_upcasts_the_tensors_without_a_dtype_of_their_own():
    text = OWN_DTYPE.replace("f(Tensor x)", "f(Tensor x, Tensor y)").replace('"x * 2"', '"x * y"')
    reference = rendered(text)["kv/reference.py"]
    ast.parse(reference)
    assert "    (y,) = upcast(y)" in reference and "from ._support import upcast" in reference


# -- the generated packages import, and their ops run on CPU (one interpreter for all of them)

IMPORTED = {
    "kstr": spec_text('f(Tensor x, str mode="a") -> Tensor', "triton_op", package="kstr"),
    "kl": spec_text("f(Tensor x, int[] dims, float[]? ws=None) -> Tensor", "triton_op", "{args: {dims: {value: [1, 2]}}}",
                    package="kl"),
    "kv": OWN_DTYPE,
    # A triton_op's schema is what infer_schema reads from its body's annotations: Scalar was annotated
    # float, and registered as float.
    "ksc": spec_text("f(Tensor x, Scalar s=2, Scalar? t=None) -> Tensor", "triton_op", package="ksc"),
}

CHECK_IMPORTS = """\
import sys
import torch
for repo in sys.argv[1:]:
    sys.path.insert(0, repo)
import kl, ksc, kstr, kv
import kv.reference
x = torch.arange(6.0)
assert str(torch.ops.kstr.f.default._schema) == 'kstr::f(Tensor x, str mode="a") -> Tensor'
assert torch.equal(kstr.f(x, "b"), x)
assert str(torch.ops.kl.f.default._schema).startswith("kl::f(Tensor x, SymInt[] dims, float[]? ws=None)")
assert torch.equal(kl.f(x, [1, 2]), x)
i = torch.arange(6)
assert torch.equal(kv.f(i), i * 2) and torch.equal(kv.reference.f(i), i * 2)
assert str(torch.ops.ksc.f.default._schema) == "ksc::f(Tensor x, Scalar s=2, Scalar? t=None) -> Tensor"
assert torch.equal(ksc.f(x, 3), x)
print("ok")
"""


def test_the_generated_packages_import_and_run_on_cpu(tmp_path):
    repos = []
    for name, text in IMPORTED.items():
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(text)
        repos.append(str(generate(spec, tmp_path / name)))
    result = subprocess.run([sys.executable, "-c", CHECK_IMPORTS, *repos], capture_output=True, text=True,
                            cwd=tmp_path, check=False, timeout=300)  # fmt: skip
    assert result.returncode == 0 and "ok" in result.stdout, result.stdout + result.stderr


# -- a Device default: torch.device('cpu') in single quotes (ruff format), a call in a default (ruff's B008)


@pytest.mark.parametrize(
    "schema",
    ['f(Tensor x, Device dev="cpu") -> Tensor',
     'a_longer_name(Tensor input, Device target_device="cuda:0", Scalar scale=1, bool keep=False) -> Tensor'],
    ids=["one_line", "split"],
)
def test_a_device_default_passes_ruff(tmp_path, schema):
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(schema).replace('reference: "x"', f'reference: "{schema.split("(Tensor ")[1].split(",")[0]}"')
                    .replace("x.shape", f'{schema.split("(Tensor ")[1].split(",")[0]}.shape'))  # fmt: skip
    repo = generate(spec, tmp_path / "repo")
    files = sorted(str(path.relative_to(repo)) for path in repo.rglob("*.py"))
    assert any('torch.device("c' in (repo / f).read_text() for f in files)
    for command in (["check", "."], ["format", "--check", "--diff", *files]):
        result = subprocess.run([sys.executable, "-m", "ruff", *command[:1], "--no-cache", "--isolated", *command[1:]],
                                cwd=repo, capture_output=True, text=True, check=False)  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
