"""Bad specs: every one is reported as FILE:LINE:COL: error: ..., exit 2, nothing written."""

from __future__ import annotations

import textwrap

import pytest
from click.testing import CliRunner

from kopgen.cli import main

GOOD_OP = """\
kopgen: 1
package: kbook
ops:
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    compute: "a * b + c"
    backward:
      a: "grad * b"
      b: "grad * a"
"""


def op_spec(body: str) -> str:
    """A spec whose only op is `body` (indented under `ops:`)."""
    return "kopgen: 1\npackage: kbook\nops:\n" + textwrap.indent(textwrap.dedent(body), "  ")


# (name, spec text, expected stderr); the expected text is the whole message, snapshot style.
CASES = [
    ("yaml_syntax", "kopgen: 1\npackage: [kbook\n", "spec.yaml:3:1: error: invalid YAML: did not find expected ',' or ']'"),
    ("not_a_mapping", "- 1\n- 2\n", "spec.yaml:1:1: error: the spec must be a mapping with keys kopgen, package and ops"),
    ("empty", "", "spec.yaml:1:1: error: the spec is empty"),
    (
        "format_version",
        GOOD_OP.replace("kopgen: 1", "kopgen: 2"),
        "spec.yaml:1:9: error: kopgen must be 1, not '2'",
    ),
    (
        "unknown_key_suggests",
        GOOD_OP.replace("package: kbook", "package: kbook\nnamspace: kb"),
        "spec.yaml:3:1: error: unknown key 'namspace' in spec (did you mean 'namespace'?)",
    ),
    (
        "duplicate_key",
        GOOD_OP.replace("package: kbook", "package: kbook\npackage: other"),
        "spec.yaml:3:1: error: duplicate key 'package' (first defined at line 2)",
    ),
    (
        "package_not_identifier",
        GOOD_OP.replace("package: kbook", "package: ../evil"),
        "spec.yaml:2:10: error: package must be an identifier (letters, digits, _), not '../evil'",
    ),
    (
        "missing_ops",
        "kopgen: 1\npackage: kbook\n",
        "spec.yaml:1:1: error: spec is missing the required key 'ops'",
    ),
    (
        "wrong_type",
        GOOD_OP.replace("package: kbook", "package: kbook\nversion: 1.0"),
        'spec.yaml:3:10: error: version must be a string, not \'1.0\'; quote it: "1.0"',
    ),
    (
        "bad_enum_suggests",
        GOOD_OP + "    registration: custum_op\n",
        (
            "spec.yaml:9:19: error: ops[0].registration must be one of custom_op, library, triton_op, "
            "torch_library, stable_abi; got 'custum_op' (did you mean 'custom_op'?)"
        ),
    ),
    (
        "bad_schema_syntax",
        op_spec('- schema: "muladd(Tensor a, Tensor b float c) -> Tensor"\n  compute: "a * b"\n'),
        "spec.yaml:4:40: error: expected ',' or ')' after argument, got 'float'",
    ),
    (
        "unsupported_schema_type",
        op_spec('- schema: "f(Tensor a, Layout l) -> Tensor"\n  compute: "a"\n'),
        "spec.yaml:4:26: error: unsupported type 'Layout' (kopgen supports: Tensor, int, float, bool, str, SymInt, ScalarType, Scalar, T? of those, Tensor[], int[], float[], SymInt[], int[N], SymInt[N], and optional lists)",
    ),
    (
        "schema_with_namespace",
        op_spec('- schema: "kb::f(Tensor a) -> Tensor"\n  compute: "a"\n'),
        "spec.yaml:4:14: error: write the schema without a namespace; it comes from `namespace:` ('kbook')",
    ),
    (
        "returns_view",
        op_spec('- schema: "f(Tensor(a) x) -> Tensor(a)"\n  compute: "x"\n'),
        "spec.yaml:4:14: error: argument 'x' is annotated as an alias; only mutation, `Tensor(a!)`, is allowed\nspec.yaml:4:14: error: operators must not return (views of) their inputs: return a new Tensor, or `()` from a mutating op",
    ),
    (
        "unknown_name_in_compute",
        op_spec('- schema: "f(Tensor a, Tensor b) -> Tensor"\n  compute: "a * bb"\n'),
        "spec.yaml:5:19: error: unknown name 'bb' (did you mean 'b'?)",
    ),
    (
        "import_in_compute",
        op_spec('- schema: "f(Tensor a) -> Tensor"\n  compute: "__import__(\'os\').system(\'x\')"\n'),
        'spec.yaml:5:15: error: only the built-in functions can be called, like exp(x)',
    ),
    (
        "attribute_in_formula",
        op_spec(
            '- schema: "f(Tensor a) -> Tensor"\n  compute: "a * 2"\n  backward:\n    a: "grad.__class__"\n'
        ),
        "spec.yaml:7:16: error: attribute '__class__' is not allowed (names starting with '_' are private)",
    ),
    (
        "missing_backward_formula",
        op_spec('- schema: "f(Tensor a, Tensor b) -> Tensor"\n  compute: "a * b"\n  backward:\n    a: "grad * b"\n'),
        "spec.yaml:6:5: error: backward has no formula for Tensor argument 'b' (write one, or 'b: non_differentiable')",
    ),
    (
        "formula_for_scalar",
        op_spec(
            '- schema: "f(Tensor a, float c) -> Tensor"\n  compute: "a * c"\n'
            '  backward:\n    a: "grad * c"\n    c: "grad"\n'
        ),
        "spec.yaml:8:7: error: 'c' is a float; only Tensor arguments take a formula",
    ),
    (
        "two_kinds",
        op_spec('- schema: "f(Tensor a) -> Tensor"\n  compute: "a"\n  kernel: custom\n'),
        "spec.yaml:6:5: error: an op needs exactly one of compute, reduce or kernel; it has compute and kernel",
    ),
    (
        "route_backend_conflict",
        op_spec('- schema: "f(Tensor a) -> Tensor"\n  compute: "a * 2"\n  backends: {cpu: cpp}\n'),
        (
            "spec.yaml:6:21: error: registration 'custom_op' takes Python kernels (triton, python); "
            "cpu: cpp needs registration: torch_library or stable_abi"
        ),
    ),
    (
        "duplicate_op",
        op_spec('- schema: "f(Tensor a) -> Tensor"\n  compute: "a * 2"\n- schema: "f(Tensor a) -> Tensor"\n  compute: "a"\n'),
        "spec.yaml:6:13: error: op 'f' is defined twice (first at line 4)",
    ),
    (
        "python_keyword_name",
        op_spec('- schema: "f(Tensor lambda) -> Tensor"\n  compute: "a"\n'),
        "spec.yaml:4:14: error: 'lambda' is a Python keyword; ops and arguments become Python names\nspec.yaml:5:15: error: unknown name 'a'; the arguments are lambda",
    ),
    (
        "mutating_without_mapping",
        op_spec('- schema: "f_(Tensor(a!) x, float s) -> ()"\n  compute: "x * s"\n'),
        "spec.yaml:5:14: error: a mutating op writes its mutated arguments (x): write `compute: {x: EXPR}`",
    ),
    (
        "mapping_without_mutation",
        op_spec('- schema: "f(Tensor a, Tensor b) -> ()"\n  compute: {b: "a * 2"}\n'),
        "spec.yaml:5:14: error: compute names arguments to write, but the schema mutates none; mark them `Tensor(a!)`",
    ),
    (
        "writes_an_argument_it_does_not_mutate",
        op_spec('- schema: "f(Tensor a, Tensor(a!) out) -> ()"\n  compute: {a: "a * 2"}\n'),
        (
            "spec.yaml:5:14: error: the schema mutates 'out' (Tensor(a!)) but compute does not write it\n"
            "spec.yaml:5:15: error: compute writes 'a', which is not a mutated argument (mutated: out)"
        ),
    ),
    (
        "mutating_op_returns",
        op_spec('- schema: "f(Tensor a, Tensor(a!) out) -> Tensor"\n  compute: {out: "a * 2"}\n'),
        "spec.yaml:4:14: error: a mutating op returns nothing: end its schema with `-> ()`",
    ),
    (
        "mutating_op_with_backward",
        op_spec('- schema: "f_(Tensor(a!) x) -> ()"\n  compute: {x: "x * 2"}\n  backward:\n    x: "grad * 2"\n'),
        "spec.yaml:6:5: error: mutating ops take no backward; write a functional op to differentiate",
    ),
    (
        "compiled_route_without_compiled_kernel",
        op_spec(
            '- schema: "f(Tensor a) -> Tensor"\n  compute: "a * 2"\n'
            "  registration: torch_library\n  backends: {cpu: python}\n"
        ),
        (
            "spec.yaml:7:15: error: registration 'torch_library' compiles C++/CUDA kernels, but backends has none: "
            "set cpu: cpp and/or cuda: cuda, or use registration: library for Python kernels"
        ),
    ),
    (
        "two_compiled_routes_in_one_package",
        op_spec(
            '- schema: "f(Tensor a) -> Tensor"\n  compute: "a * 2"\n  registration: torch_library\n'
            '  backends: {cpu: cpp}\n- schema: "g(Tensor a) -> Tensor"\n  compute: "a * 3"\n'
            "  registration: stable_abi\n  backends: {cpu: cpp}\n"
        ),
        (
            "spec.yaml:10:19: error: a package builds one extension: 'g' uses stable_abi but an earlier op uses "
            "torch_library; give all compiled ops one of them"
        ),
    ),
    (
        "cpp_reserved_argument",
        op_spec(
            '- schema: "f(Tensor a, int n) -> Tensor"\n  compute: "a * n"\n'
            "  registration: stable_abi\n  backends: {cpu: cpp}\n"
        ),
        "spec.yaml:4:14: error: argument name 'n' is reserved for the generated C++ code; rename it",
    ),
    (
        "cpp_keyword_op_name",
        op_spec(
            '- schema: "delete(Tensor a) -> Tensor"\n  compute: "a * 2"\n'
            "  registration: torch_library\n  backends: {cpu: cpp}\n"
        ),
        "spec.yaml:4:14: error: 'delete' is a C++ keyword; compiled routes turn ops and arguments into C++ names",
    ),
    (
        "stable_abi_with_tags",
        op_spec(
            '- schema: "f(Tensor a) -> Tensor"\n  compute: "a * 2"\n  registration: stable_abi\n'
            "  backends: {cpu: cpp}\n  tags: [pt2_compliant_tag]\n"
        ),
        (
            "spec.yaml:8:11: error: stable_abi ops cannot carry tags: the stable ABI of torch 2.10, which kopgen "
            "targets, defines schemas without them"
        ),
    ),
    (
        "custom_kernel_without_fake",
        op_spec('- schema: "f(Tensor a) -> Tensor"\n  kernel: custom\n  reference: "a * 2"\n'),
        (
            "spec.yaml:5:5: error: a `kernel: custom` op needs `fake`: the shape (and dtype) of each output, "
            "e.g. {shape: x.shape}"
        ),
    ),
    (
        "custom_kernel_fake_reads_values",
        op_spec('- schema: "f(Tensor a) -> Tensor"\n  kernel: custom\n  reference: "a * 2"\n  fake: {shape: "a.sum()"}\n'),
        "spec.yaml:7:20: error: the only calls allowed are x.size(), x.dim(), x.numel() of a Tensor argument",
    ),
    (
        "reduce_without_expr_of_several_tensors",
        op_spec('- schema: "f(Tensor a, Tensor b) -> Tensor"\n  reduce: {op: sum}\n'),
        "spec.yaml:5:13: error: reduce needs `expr:` when the op has several Tensor arguments (a, b)",
    ),
    (
        "keyword_only_tensor",
        op_spec('- schema: "f(Tensor a, *, Tensor b) -> Tensor"\n  compute: "a * b"\n'),
        (
            "spec.yaml:4:14: error: keyword-only Tensor arguments are not supported ('b'): autograd formulas "
            "differentiate positional inputs only; make it positional"
        ),
    ),
]


@pytest.mark.parametrize("name, text, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_spec_is_reported_at_its_node(tmp_path, name, text, expected):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["new", str(spec), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]
    message = result.output.strip().replace(str(spec), "spec.yaml")
    assert message.startswith("spec.yaml:")
    assert ": error: " in message
    if expected is not None:
        assert message == expected
    print(message)
