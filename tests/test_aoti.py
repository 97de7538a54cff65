"""The generated AOTInductor test's program (kopgen/lang/aoti.py) and the vmap rules of the compiled routes
(kopgen/lang/vmap.py): which ops get them. The generated suites run both (tests/test_end_to_end.py)."""

from __future__ import annotations

import re

from kopgen.pipeline import load_spec, render_files

from .conftest import EXAMPLES, ROOT

SPECS = ROOT / "tests" / "specs"


def rendered(package) -> dict[str, str]:
    return {path: text for path, (_, text) in render_files(package).items()}


def test_the_aoti_program_holds_every_op_with_a_test_class():
    """fused.yaml (torch_library): every op, those that write an argument too, but not muladd's backward
    kernel, which has no test class of its own."""
    files = rendered(load_spec(EXAMPLES / "fused.yaml"))
    program = re.search(r"^PROGRAM = \((.*?)\)$", files["tests/test_aoti.py"], re.MULTILINE | re.DOTALL).group(1)
    classes = ["muladd.TestMuladd", "muladd_out.TestMuladdOut", "scale_.TestScale", "mul.TestMul", "square.TestSquare",
               "rms_norm.TestRmsNorm", "layer_norm.TestLayerNorm", "softmax.TestSoftmax",
               "fused_add_rms_norm.TestFusedAddRmsNorm"]
    assert re.findall(r"\w+\.\w+", program) == [f"test_{name}" for name in classes]


def test_an_op_sized_by_its_data_is_left_out():
    """A custom kernel whose output size only the data decides: the program's static shapes cannot hold it."""
    assert "tests/test_aoti.py" not in rendered(load_spec(SPECS / "custom_dynamic.yaml"))


MEMORY_FORMAT = """\
kopgen: 1
package: kmf
defaults:
  registration: library
  backends: {cpu: python}
ops:
  - schema: "memf(Tensor x, *, MemoryFormat memory_format=contiguous_format) -> Tensor"
    kernel: custom
    reference: "x * 2"
    fake: {shape: x.shape}
  - schema: "twice(Tensor x) -> Tensor"
    compute: "x * 2"
"""


def test_an_op_taking_a_memory_format_is_left_out(tmp_path):
    """torch's AOTInductor serializes a MemoryFormat as an int and then refuses it (torch.library alone too)."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(MEMORY_FORMAT)
    program = rendered(load_spec(spec))["tests/test_aoti.py"]
    assert "PROGRAM = (test_twice.TestTwice,)" in program and "memf" not in program


def test_an_op_taking_a_scalar_type_with_a_default_is_left_out(tmp_path):
    """A ScalarType argument passed its default's value: AOTInductor (torch 2.13) serializes it as an int and
    refuses it on loading ("... as_scalar_type for argument 2 but got as_int"), on every route."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(MEMORY_FORMAT.replace("*, MemoryFormat memory_format=contiguous_format", "ScalarType dtype=float32"))
    program = rendered(load_spec(spec))["tests/test_aoti.py"]
    assert "PROGRAM = (test_twice.TestTwice,)" in program and "memf" not in program


EMPTY_LIST = """\
kopgen: 1
package: kel
defaults:
  registration: library
  backends: {cpu: python}
ops:
  - schema: "view_as_size(Tensor x, SymInt[] size=[]) -> Tensor"
    kernel: custom
    reference: "x * 2"
    fake: {shape: x.shape}
  - schema: "given_empty(Tensor x, float[] scales) -> Tensor"
    kernel: custom
    reference: "x * 2"
    fake: {shape: x.shape}
    tests: {args: {scales: {value: []}}}
  - schema: "given_some(Tensor x, int[] dims=[]) -> Tensor"
    kernel: custom
    reference: "x * 2"
    fake: {shape: x.shape}
    tests: {args: {dims: {value: [0]}}}
"""


def test_an_op_passed_an_empty_list_is_left_out(tmp_path):
    """torch's AOTInductor passes an empty int list to the op's kernel as None (an empty float list as it is):
    the generated test_aoti failed on every op with an `int[] dims=[]` default."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(EMPTY_LIST)
    program = rendered(load_spec(spec))["tests/test_aoti.py"]
    assert "PROGRAM = (test_given_empty.TestGivenEmpty, test_given_some.TestGivenSome)" in program


def test_compiled_routes_register_vmap_rules():
    """torch_library and stable_abi ops get the rule from Python, as the Python routes do: the functional
    pointwise ops, not the mutating ones nor backward kernels."""
    for example, package in (("fused.yaml", "kfused"), ("fused_stable.yaml", "kstable")):
        registration = rendered(load_spec(EXAMPLES / example))[f"{package}/_registration.py"]
        ruled = re.findall(r'^@torch\.library\.register_vmap\("\w+::(\w+)"\)$', registration, re.MULTILINE)
        assert {"muladd", "mul", "square"} <= set(ruled), ruled
        assert not {"muladd_out", "scale_", "muladd_backward"} & set(ruled), ruled


def test_a_torch_whose_loader_crashes_on_plain_programs_skips_with_the_reason():
    """torch 2.11's aoti_load_package crashed on every package, plain torch ops too (H200, docs/gpu.md): the
    generated test asks a child process before torch 2.13 and skips only where the child was killed; a
    child that fails otherwise lets the test run and show the failure."""
    test = rendered(load_spec(EXAMPLES / "muladd.yaml"))["tests/test_aoti.py"]
    assert "if torch.__version__ < (2, 13) and not loads_a_plain_package():" in test
    probe = test[test.index("@functools.cache\ndef loads_a_plain_package"):test.index("\n\n\ndef tensors_of")]
    for program, loads in (("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)  # %r", False),
                           ("raise SystemExit('no compiler')  # %r", True), ("pass  # %r", True)):
        namespace = {"PLAIN_PROGRAM": program}
        exec("import functools, os, subprocess, sys, tempfile\n" + probe, namespace)  # noqa: S102  (the probe is this test's own text)
        assert namespace["loads_a_plain_package"]() is loads, program
