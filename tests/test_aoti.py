"""The generated AOTInductor test's program (kopgen/lang/aoti.py) and the vmap rules of the compiled routes
(kopgen/lang/vmap.py): which ops get them. The generated suites run both (tests/test_end_to_end.py)."""

from __future__ import annotations

import re

from kopgen.pipeline import load_spec, load_spec_text, render_files

from .conftest import EXAMPLES


def rendered(package) -> dict[str, str]:
    return {path: text for path, (_, text) in render_files(package).items()}


def test_the_aoti_program_holds_the_ops_that_export_keeps():
    """fused.yaml (torch_library): its functional ops, not the two that write an argument (muladd_out,
    scale_) nor muladd's backward kernel, which has no test class of its own."""
    files = rendered(load_spec(EXAMPLES / "fused.yaml"))
    program = re.search(r"^PROGRAM = \((.*?)\)$", files["tests/test_aoti.py"], re.MULTILINE | re.DOTALL).group(1)
    assert re.findall(r"\w+\.\w+", program) == ["test_muladd.TestMuladd", "test_mul.TestMul", "test_square.TestSquare"]


def test_a_package_of_mutating_ops_has_no_aoti_test():
    spec = (EXAMPLES / "fused.yaml").read_text()
    spec = spec[: spec.index("ops:")] + 'ops:\n  - schema: "scale_(Tensor(a!) x, float s) -> ()"\n    compute: {x: "x * s"}\n'
    assert "tests/test_aoti.py" not in rendered(load_spec_text(spec, "kopgen.yaml"))


def test_compiled_routes_register_vmap_rules():
    """torch_library and stable_abi ops get the rule from Python, as the Python routes do: the functional
    pointwise ops, not the mutating ones nor backward kernels."""
    for example, package in (("fused.yaml", "kfused"), ("fused_stable.yaml", "kstable")):
        registration = rendered(load_spec(EXAMPLES / example))[f"{package}/_registration.py"]
        ruled = re.findall(r'^@torch\.library\.register_vmap\("\w+::(\w+)"\)$', registration, re.MULTILINE)
        assert {"muladd", "mul", "square"} <= set(ruled), ruled
        assert not {"muladd_out", "scale_", "muladd_backward"} & set(ruled), ruled
