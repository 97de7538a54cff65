"""An op's body is one of the kinds of kopgen/model.py, which name their templates; routes, kernel
languages and devices are Enums that read as their values."""

from __future__ import annotations

import re

import pytest

from kopgen.format import SPEC_SCHEMA
from kopgen.lang import layout, support
from kopgen.model import KINDS, CustomKernel, Device, Language, PointwiseCompute, Route, RowReduction
from kopgen.pipeline import load_spec
from kopgen.plan import KOPGEN, USER, plan
from kopgen.render import environment, templates_dir

from .conftest import EXAMPLES

# -- Enums of the closed sets


def test_enum_members_compare_hash_and_print_as_their_values():
    assert Route.STABLE_ABI == "stable_abi" and Device.CPU == "cpu" and Language.CUDA == "cuda"
    assert "cpu" in {Device.CPU} and {"triton": 1}[Language.TRITON] == 1  # hashed as the value
    assert str(Route.LIBRARY) == f"{Route.LIBRARY}" == "library"
    assert ", ".join(Language) == "triton, cpp, python, cuda"
    assert environment().from_string("{{ r }} {{ d }}").render(r=Route.TRITON_OP, d=Device.CUDA) == "triton_op cuda"
    assert layout.literal((Device.CPU, Device.CUDA)) == '("cpu", "cuda")'


def test_enum_properties():
    assert [r for r in Route if r.is_compiled] == [Route.TORCH_LIBRARY, Route.STABLE_ABI]
    assert [lang for lang in Language if lang.is_compiled] == [Language.CPP, Language.CUDA]
    assert [d.dispatch_key for d in Device] == ["CPU", "CUDA"]


def test_the_json_schema_takes_its_enums_from_the_enums():
    op = SPEC_SCHEMA["properties"]["ops"]["items"]["properties"]
    assert op["registration"] == {"enum": [route.value for route in Route]}
    assert op["backends"]["properties"] == {
        "cpu": {"enum": ["triton", "cpp", "python"]},
        "cuda": {"enum": ["triton", "cuda"]},
    }
    assert all(type(value) is str for value in op["registration"]["enum"])  # plain JSON strings


# -- op kinds


def test_each_op_gets_the_body_of_its_kind():
    package = load_spec(EXAMPLES / "rows.yaml")
    bodies = {op.name: type(op.body) for op in package.ops}
    assert bodies["rowsum"] is RowReduction and bodies["bias_leaky"] is PointwiseCompute
    rowsum = next(op for op in package.ops if op.name == "rowsum")
    assert rowsum.body.reduction.kind == "sum" and rowsum.writes == (rowsum.body.write,)
    custom = load_spec(EXAMPLES / "custom.yaml").ops[0]
    assert isinstance(custom.body, CustomKernel) and custom.writes == () and custom.output_names == ("out",)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.__name__)
def test_each_kind_names_templates_that_exist(kind):
    assert "kernels" in kind.templates
    for role, template in kind.templates.items():
        assert (templates_dir() / template).is_file(), f"{kind.__name__}.templates[{role!r}]: {template}"


def test_plan_takes_the_kernels_file_from_the_kind():
    """A custom kernel's file is the user's skeleton; the other kinds' are kopgen's kernel modules."""
    for spec, template, owner in (("custom.yaml", "package/kernels/custom.py.j2", USER),
                                  ("rows.yaml", "package/kernels/op.py.j2", KOPGEN)):
        package = load_spec(EXAMPLES / spec)
        files = {f.path: f for f in plan(package)}
        kernels = files[f"{package.name}/kernels/{package.ops[0].name}.py"]
        assert (kernels.template, kernels.owner) == (template, owner)


def test_support_helpers_come_from_the_kinds_of_the_package():
    assert support.support_templates(load_spec(EXAMPLES / "rows.yaml")) == ["package/_support/rows.py.j2"]
    assert support.support_templates(load_spec(EXAMPLES / "custom.yaml")) == ["package/_support/custom_outputs.py.j2"]
    assert support.support_templates(load_spec(EXAMPLES / "muladd.yaml")) == []


KIND_WORDS = re.compile(r"reduction|custom|is_mutating|body")


def test_no_template_branches_on_an_op_kind():
    """Templates choose no kind: the kinds name their templates, and plan.py and lang/ choose by the body's
    type. A template that needs a kind's value (`op.body.reduction`) is one of that kind's own."""
    own = {template for kind in KINDS for template in kind.templates.values()}
    for path in sorted(templates_dir().rglob("*.j2")):
        name = path.relative_to(templates_dir()).as_posix()
        text = path.read_text(encoding="utf-8")
        for tag in re.findall(r"{%-?\s*(?:if|elif)\b(.*?)-?%}", text):
            assert not KIND_WORDS.search(tag), f"{name}: {{% if{tag}%}} branches on an op kind"
        if "op.body" in text:
            assert name in own, f"{name} reads op.body but is no kind's template"


def test_a_long_comprehension_keeps_its_target_on_one_line_as_ruff_does():
    value = ("tuple(output.to(dtype) for output, dtype in zip((first_gradient_of_the_input * weight, "
             "second_gradient_of_the_weight.flatten(0, -2).sum(0)), dtypes, strict=True))")
    assert "    " + layout.assign("return", value, 4) == """\
    return tuple(
        output.to(dtype)
        for output, dtype in zip(
            (
                first_gradient_of_the_input * weight,
                second_gradient_of_the_weight.flatten(0, -2).sum(0),
            ),
            dtypes,
            strict=True,
        )
    )"""
