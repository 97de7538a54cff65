"""Tests for kopgen.schema: parsing, canonical printing, errors, Python helpers."""

import pytest

from kopgen.schema import (
    Annotation,
    Argument,
    BaseType,
    FunctionSchema,
    ListType,
    OptionalType,
    Return,
    SchemaError,
    parse_schema,
    python_annotation,
    python_default,
)

T = BaseType("Tensor")

EXAMPLES = [
    "muladd(Tensor a, Tensor b, float c) -> Tensor",
    "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "scale_(Tensor(a!) x, float s) -> ()",
    "sincos(Tensor x) -> (Tensor, Tensor)",
    "aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
    "f(*, Tensor a) -> ()",
    "f(Tensor x) -> Tensor y",
    "f(Tensor x) -> (Tensor, Tensor b)",
    "f(Tensor(a) x) -> Tensor(a)",
    "f(Tensor[] xs, Tensor? w=None, Tensor[]? ys=None) -> Tensor[]",
    "f(int[2] k=1, SymInt[2] s=[1, 1], int[] d=[], int[]? o=None, float[] w=[0.5, 2.]) -> int[]",
    "f(float a=1e-05, float b=1e+308, float c=-2.5, float d=0., float e=1., float? g=None) -> float",
    "f(str m=\"sum\", str n='x', str? p=None, ScalarType? dtype=None, Scalar? s=None) -> str",
    "f(int i=-1, SymInt n=0, int? j=0, bool? b=False, Scalar s=0.5) -> (int, bool, Scalar)",
]


@pytest.mark.parametrize("text", EXAMPLES)
def test_round_trip(text):
    assert str(parse_schema(text)) == text


def test_model_of_add_out():
    s = parse_schema(EXAMPLES[5])
    alpha = Argument("alpha", BaseType("Scalar"), "1", None, kwarg_only=True)
    out = Argument("out", T, None, Annotation("a", is_write=True), kwarg_only=True)
    assert s == FunctionSchema(
        namespace="aten",
        name="add",
        overload="out",
        arguments=(
            Argument("self", T, None, None, False),
            Argument("other", T, None, None, False),
            alpha,
            out,
        ),
        returns=(Return(None, T, Annotation("a", True)),),
    )
    assert [a.name for a in s.positional] == ["self", "other"]
    assert s.kwarg_only == (alpha, out)
    assert s.mutated_arguments == (out,)
    assert [a.name for a in s.tensor_arguments] == ["self", "other", "out"]
    assert str(out) == "Tensor(a!) out" and str(alpha) == "Scalar alpha=1"
    with pytest.raises(AttributeError):
        s.name = "sub"  # frozen


def test_types_and_predicates():
    s = parse_schema("f(Tensor? a, Tensor[] b, int[2]? c, Tensor[]? d, int e) -> ()")
    types = [a.type for a in s.arguments]
    assert types == [
        OptionalType(T),
        ListType(T, None),
        OptionalType(ListType(BaseType("int"), 2)),
        OptionalType(ListType(T, None)),
        BaseType("int"),
    ]
    assert [str(t) for t in types] == ["Tensor?", "Tensor[]", "int[2]?", "Tensor[]?", "int"]
    assert [t.is_tensor for t in types] == [True, False, False, False, False]
    assert [t.is_tensor_like for t in types] == [True, True, False, True, False]
    assert [a.name for a in s.tensor_arguments] == ["a", "b", "d"]
    assert not any(a.is_mutated for a in s.arguments)
    assert str(Annotation("b", False)) == "(b)"


@pytest.mark.parametrize(
    ("sloppy", "canonical"),
    [
        ("f(Tensor  a,Tensor b)->Tensor", "f(Tensor a, Tensor b) -> Tensor"),
        ("  ns :: f . ov ( Tensor( a! ) x , * , int [ 2 ] k = [ 1 , 2 ] )->( Tensor ,Tensor )",
         "ns::f.ov(Tensor(a!) x, *, int[2] k=[1, 2]) -> (Tensor, Tensor)"),
        ("f(int[] a=[ ]) ->\n()", "f(int[] a=[]) -> ()"),
        ("f(Tensor x) -> (Tensor y)", "f(Tensor x) -> Tensor y"),  # torch prints it bare
        ("f(Tensor x) -> (Tensor)", "f(Tensor x) -> Tensor"),
        ("f(float x = - 1.5) -> Tensor", "f(float x=-1.5) -> Tensor"),
    ],
)  # fmt: skip
def test_canonicalisation(sloppy, canonical):
    assert str(parse_schema(sloppy)) == canonical


@pytest.mark.parametrize(
    ("text", "message", "column", "unsupported"),
    [
        ("", "expected operator name, got 'end of text'", 0, False),
        ("f(Tensor a", "expected ')' after argument list", 10, False),
        ("f(Tensor a -> Tensor", "expected ')' after argument list", 11, False),
        ("f(Tensor a Tensor b) -> Tensor", "expected ',' or ')' after argument, got 'Tensor'", 11, False),
        ("f Tensor", "expected '(' after operator name", 2, False),
        ("f(Tensor a) Tensor", "expected '->' after argument list", 12, False),
        ("f(Tensor a) -> Tensor b c", "unexpected 'c' after returns", 24, False),
        ("f(Tensor a) -> (Tensor b Tensor c)", "expected ',' or ')' after return, got 'Tensor'", 25, False),
        ("1f(Tensor a) -> ()", "expected operator name, got '1'", 0, False),
        ("ns::f.(Tensor a) -> ()", "expected overload name, got '('", 6, False),
        ("f(Tensor) -> ()", "expected argument name, got ')'", 8, False),
        ("f(Foo a) -> ()", "unknown type 'Foo'", 2, False),
        ("f(Tensor a, int a) -> ()", "argument 'a' defined twice", 16, False),
        ("f(Tensor a) -> (Tensor x, Tensor x)", "return 'x' defined twice", 33, False),
        ("f(Tensor a, $) -> ()", "unexpected character '$'", 12, False),
        ("f(str s=\"abc) -> ()", "unterminated string", 8, False),
        ("f(Tensor a, *) -> ()", "'*' must be followed by keyword-only arguments", 13, False),
        ("f(Tensor a, *, *, Tensor b) -> ()", "expected a type, got '*'", 15, False),
        ("f(int?? a) -> ()", "'?' given twice", 6, False),
        ("f(int[2 a) -> ()", "expected ']' after list size", 8, False),
        ("f(Tensor(a!", "expected ')' after alias annotation", 11, False),
        ("f(int a=1, int b) -> ()",
         ("positional argument 'b' without a default follows one with a default "
          "(make it keyword-only by putting it after '*')"), 15, False),
        ("f(int a=) -> ()", "expected a default value, got ')'", 8, False),
        ("f(int[] a=[1 2]) -> ()", "expected ',' or ']' in list default", 13, False),
        ("f(int a=1.5) -> ()", "invalid default '1.5' for int argument 'a'", 8, False),
        ("f(int a=None) -> ()",
         "invalid default 'None' for int argument 'a': None needs an optional type ('int?')", 8, False),
        ("f(bool b=1) -> ()", "invalid default '1' for bool argument 'b'", 9, False),
        ("f(float x=abc) -> ()", "invalid default 'abc' for float argument 'x'", 10, False),
        ("f(str s=abc) -> ()", "invalid default 'abc' for str argument 's'", 8, False),
        ("f(str s=\"\\x\") -> ()", "invalid default '\"\\x\"' for str argument 's'", 8, False),
        ("f(Tensor t=None) -> ()",
         "invalid default 'None' for Tensor argument 't': None needs an optional type ('Tensor?')",
         11, False),
        ("f(Tensor[] t=[]) -> ()",
         ("invalid default '[]' for Tensor[] argument 't': tensors can only default to None "
          "(on 'Tensor?')"), 13, False),
        ("f(Tensor? t=0) -> ()",
         ("invalid default '0' for Tensor? argument 't': tensors can only default to None "
          "(on 'Tensor?')"), 12, False),
        ("f(int[] k=1) -> ()",
         "invalid default '1' for int[] argument 'k': use a list literal like [1, 2]", 10, False),
        ("f(int[2] k=[1, 2.5]) -> ()", "invalid default '[1, 2.5]' for int[2] argument 'k'", 11, False),
        ("f(int k=[1]) -> ()", "invalid default '[1]' for int argument 'k'", 8, False),
        ("f(ScalarType? d=4) -> ()",
         "ScalarType defaults other than None (kopgen supports: ScalarType? x=None)", 16, True),
        ("f(Layout? l=None) -> ()", "unsupported type 'Layout'", 2, True),
        ("f(__torch__.torch.classes.x.Y p) -> ()",
         "unsupported type '__torch__.torch.classes.x.Y'", 2, True),
        ("f(bool[3] m) -> ()", "unsupported type 'bool[3]'", 2, True),
        ("f(Tensor?[] m) -> ()", "unsupported type 'Tensor?[]'", 2, True),
        ("f(int[][] m) -> ()", "unsupported type 'int[][]'", 2, True),
        ("f(Tensor x) -> ((Tensor, int))", "unsupported tuple type", 16, True),
        ("f(Tensor(a!)[] m) -> ()", "alias annotation on a list or optional", 12, True),
        ("f(Tensor(a!)? m) -> ()", "alias annotation on a list or optional", 12, True),
        ("f(int[](a) m) -> ()", "alias annotation on a list or optional", 7, True),
        ("f(Tensor(a -> *) m) -> ()",
         "unsupported alias annotation 'Tensor(a -> *)' (kopgen supports: Tensor(a) and Tensor(a!) with a one-letter alias set)",
         8, True),
        ("f(Tensor(a|b) m) -> ()",
         "unsupported alias annotation 'Tensor(a|b)' (kopgen supports: Tensor(a) and Tensor(a!) with a one-letter alias set)",
         8, True),
        ("f(Tensor(ab!) m) -> ()",
         "unsupported alias annotation 'Tensor(ab!)' (kopgen supports: Tensor(a) and Tensor(a!) with a one-letter alias set)",
         8, True),
        ("f(int(a) m) -> ()",
         "unsupported alias annotation 'int(a)' (kopgen supports: Tensor(a) and Tensor(a!) with a one-letter alias set)", 5, True),
        ("f(...) -> ()", "varargs '...' are not supported", 2, True),
        ("f(Tensor a) -> ...", "varargs '...' are not supported", 15, True),
    ],
)  # fmt: skip
def test_errors(text, message, column, unsupported):
    with pytest.raises(SchemaError) as info:
        parse_schema(text)
    err = info.value
    # Unsupported-type messages end with the list of what kopgen supports.
    assert err.message.split(" (kopgen supports: ")[0] == message.split(" (kopgen supports: ")[0]
    if "(kopgen supports: " in message:
        assert err.message == message
    assert (err.column, err.unsupported) == (column, unsupported)
    assert isinstance(err, ValueError) and f"(column {column})" in str(err)


def test_unsupported_message_lists_supported_types():
    with pytest.raises(SchemaError) as info:
        parse_schema("f(Layout l) -> ()")
    assert info.value.message.startswith("unsupported type 'Layout' (kopgen supports: Tensor, ")


# Schemas in torch's own registry that are invalid, not merely unsupported.
TORCH_INVALID = {
    # 'posinf' is declared twice (a typo for 'neginf' in torch).
    "static_runtime::clamp_nan_to_num(Tensor input, Scalar? min, Scalar? max, float? nan, "
    "float? posinf, float? posinf) -> Tensor": "argument 'posinf' defined twice",
}


def test_all_torch_schemas():
    torch = pytest.importorskip("torch")
    texts = [str(s) for s in torch._C._jit_get_all_schemas()]
    n_ok = n_unsupported = 0
    failures = []
    for text in texts:
        try:
            printed = str(parse_schema(text))
        except SchemaError as e:
            if e.unsupported:
                n_unsupported += 1
            elif TORCH_INVALID.get(text) != e.message:
                failures.append(f"{text}\n    {e}")
            continue
        except Exception as e:  # noqa: BLE001 - any crash is a bug worth reporting
            failures.append(f"{text}\n    crashed: {e!r}")
            continue
        if printed == text:
            n_ok += 1
        else:
            failures.append(f"{text}\n    printed as: {printed}")
    print(f"torch schemas: {n_ok} round-trip, {n_unsupported} rejected as unsupported")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:50])
    assert n_ok > 1000


@pytest.mark.parametrize(
    ("type_text", "hint"),
    [
        ("Tensor", "Tensor"),
        ("Tensor?", "Tensor | None"),
        ("Tensor[]", "Sequence[Tensor]"),
        ("Tensor[]?", "Sequence[Tensor] | None"),
        ("int", "int"),
        ("SymInt", "int"),
        ("float", "float"),
        ("bool", "bool"),
        ("str", "str"),
        ("int[]", "Sequence[int]"),
        ("SymInt[2]", "Sequence[int]"),
        ("float[]", "Sequence[float]"),
        ("int[]?", "Sequence[int] | None"),
        ("ScalarType", "torch.dtype"),
        ("ScalarType?", "torch.dtype | None"),
        ("Scalar", "int | float | bool"),
        ("Scalar?", "int | float | bool | None"),
    ],
)
def test_python_annotation(type_text, hint):
    arg = parse_schema(f"f({type_text} x) -> ()").arguments[0]
    assert python_annotation(arg.type) == hint


@pytest.mark.parametrize(
    ("arg_text", "default"),
    [
        ("Tensor x", None),
        ("Tensor? x=None", "None"),
        ("bool x=True", "True"),
        ("bool? x=False", "False"),
        ("int x=-1", "-1"),
        ("int? x=0", "0"),
        ("float x=1e-05", "1e-05"),
        ("float x=1.", "1."),
        ("Scalar x=1", "1"),
        ("int[] x=[]", "()"),
        ("int[] x=[3]", "(3,)"),
        ("int[] x=[1, 2]", "(1, 2)"),
        ("float[] x=[0.5, 2.]", "(0.5, 2.)"),
        ("int[2] x=1", "(1, 1)"),
        ("SymInt[1] x=-1", "(-1,)"),
        ("int[2]? x=None", "None"),
        ('str x="sum"', "'sum'"),
        ("str x='it'", "'it'"),
        ('str x="\\"\\\'\\\\"', repr("\"'\\")),
        ('str x=" \\n\\t"', repr(" \n\t")),
    ],
)
def test_python_default(arg_text, default):
    arg = parse_schema(f"f({arg_text}) -> ()").arguments[0]
    assert python_default(arg) == default
    if default is not None:  # always valid Python that evaluates to an immutable value
        value = eval(default)  # test only: our own output
        assert not isinstance(value, list)


@pytest.mark.parametrize(
    "arg_text",
    [
        "float c=inf", "float c=-inf", "float c=nan", "float c=1e999", "float c=1e-400", "float c=1e-310",
        "Scalar s=inf", "float[] c=[0.5, 1e999]", "int k=99999999999999999999999", "int k=9223372036854775808",
        "int k=-9223372036854775809", "SymInt k=99999999999999999999", "int[2] k=99999999999999999999",
        "Scalar s=9223372036854775808",
    ],
)
def test_defaults_torch_refuses_are_errors_at_the_default(arg_text):
    """torch's schema parser (std::stoll/std::stod) refuses these at import: so does kopgen's."""
    with pytest.raises(SchemaError) as info:
        parse_schema(f"f(Tensor a, {arg_text}) -> Tensor")
    assert info.value.column == len("f(Tensor a, ") + arg_text.index("=") + 1
    assert "torch reads" in info.value.message


@pytest.mark.parametrize(
    "arg_text", ["float c=1e308", "float c=0e999", "int k=9223372036854775807", "int k=-9223372036854775808",
                 "float c=99999999999999999999999", "float c=2.2250738585072014e-308"]
)
def test_defaults_torch_reads_are_kept(arg_text):
    import torch

    text = f"f(Tensor a, {arg_text}) -> Tensor"
    torch._C.parse_schema(text)  # what kopgen accepts, torch accepts
    assert str(parse_schema(text)) == text


def test_problems_list_collects_every_invalid_default():
    problems = []
    text = "f(Tensor a, float c=inf, int k=99999999999999999999, bool b=1) -> Tensor"
    schema = parse_schema(text, problems)
    assert [a.name for a in schema.arguments] == ["a", "c", "k", "b"]
    assert [p.column for p in problems] == [text.index(d) for d in ("inf", "999", "1)")]
    assert [a.column for a in schema.arguments] == [text.index(n) for n in ("a,", "c=", "k=", "b=")]
    assert [a.default_column for a in schema.arguments[1:]] == [p.column for p in problems]
