"""Tests for kopgen.schema: parsing, canonical printing, errors, Python helpers."""

import collections
import json
import re
import subprocess
import sys

import pytest

from kopgen.schema import (
    DTYPES,
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
ALIASES = " (kopgen supports: Tensor(a), Tensor(a!) and Tensor! right after `Tensor`, as in Tensor(a!)? or Tensor(a!)[])"

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
    # Kernel authors' schemas: torch's `!` shorthand keeps the user's spelling (torch would print
    # Tensor($0! -> ), which no one writes and torch itself cannot read back).
    "silu_and_mul(Tensor! out, Tensor input) -> ()",
    "rotary_embedding(Tensor positions, Tensor! query, Tensor!? key, int head_size, Tensor cos_sin_cache, bool is_neox) -> ()",
    "f(Tensor(a!)? x, Tensor(a0!)[] ys, Tensor(b)[]? zs, Tensor?[] i, Tensor![] w) -> (Tensor[], Tensor?)",
    "f(bool[] m, str[] names, Scalar[] s, bool[3] mask=[True, False, True], int[2] stride=1, str[]? n=None) -> ()",
    "f(Device? device=None, Layout? layout=None, MemoryFormat? memory_format=None, Generator? generator=None) -> ()",
    "f(Device d=\"cuda:0\", Layout l=strided, MemoryFormat m=contiguous_format, ScalarType t=float32) -> ()",
    "f(ScalarType? dtype=4, Layout? l=0, MemoryFormat m=0, str reduction=\"mean\", Scalar alpha=1) -> ()",
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


def test_shorthand_and_annotated_optionals():
    s = parse_schema("f(Tensor! a, Tensor!? b, Tensor(c!)? c, Tensor(d!)[] d, Tensor(e) e) -> ()")
    annotations = [a.annotation for a in s.arguments]
    assert annotations == [
        Annotation(None, True),
        Annotation(None, True),
        Annotation("c", True),
        Annotation("d", True),
        Annotation("e", False),
    ]
    assert [a.name for a in s.mutated_arguments] == ["a", "b", "c", "d"]
    assert [str(a.type) for a in s.arguments] == ["Tensor", "Tensor?", "Tensor?", "Tensor[]", "Tensor"]


def test_what_kopgen_accepts_torch_accepts():
    torch = pytest.importorskip("torch")
    for text in EXAMPLES:
        torch._C.parse_schema(text)


def test_dtype_names_are_torchs():
    """DTYPES holds the names torch's schema parser reads as a ScalarType default, with its numbers."""
    torch = pytest.importorskip("torch")
    for name, number in DTYPES.items():
        printed = str(torch._C.parse_schema(f"f(ScalarType d={name}) -> ()"))
        assert printed == f"f(ScalarType d={number}) -> ()"


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
        ("f(str s=\"\\x\") -> ()", ("invalid default '\"\\x\"' for str argument 's': torch's schema parser reads the "
                                     "escapes \\\\ \\' \\\" \\a \\b \\f \\n \\v \\t and \\ooo (three octal digits) only"),
         8, False),
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
        ("f(ScalarType? d=99) -> ()", "invalid default '99' for ScalarType? argument 'd'", 16, False),
        ("f(ScalarType d=torch.float32) -> ()", "invalid default 'torch' for ScalarType argument 'd'", 15, False),
        ("f(Layout l=sparse_coo) -> ()",
         "invalid default 'sparse_coo' for Layout argument 'l': torch reads strided or 0", 11, False),
        ("f(MemoryFormat m=channels_last) -> ()",
         "invalid default 'channels_last' for MemoryFormat argument 'm': torch reads contiguous_format or 0",
         17, False),
        ("f(Device d=\"gpu\") -> ()", "invalid default '\"gpu\"' for Device argument 'd': a device like \"cpu\" or \"cuda:0\" (an index from 0 to 127)", 11, False),
        ("f(Device d=cpu) -> ()", "invalid default 'cpu' for Device argument 'd': a device like \"cpu\" or \"cuda:0\" (an index from 0 to 127)", 11, False),
        ("f(Generator g=None) -> ()",
         "invalid default 'None' for Generator argument 'g': None needs an optional type ('Generator?')", 14, False),
        ("f(str[] s=[\"a\"]) -> ()",
         "invalid default '[\"a\"]' for str[] argument 's': torch reads no default for str[] but None (on 'str[]?')",
         10, False),
        ("f(Scalar[] s=[1]) -> ()",
         "invalid default '[1]' for Scalar[] argument 's': torch reads no default for Scalar[] but None (on 'Scalar[]?')",
         13, False),
        ("f(Stream s) -> ()", "unsupported type 'Stream': not one torch.library infers for custom ops", 2, True),
        ("f(Dict(str, Tensor) d) -> ()", "unsupported type 'Dict': TorchScript's, not an operator's", 2, True),
        ("f(__torch__.torch.classes.x.Y p) -> ()",
         "unsupported type '__torch__.torch.classes.x.Y': a TorchBind class", 2, True),
        ("f(int?[] m) -> ()", "unsupported type 'int?[]'", 2, True),
        ("f(Scalar?[] m) -> ()", "unsupported type 'Scalar?[]'", 2, True),
        ("f(int[][] m) -> ()", "unsupported type 'int[][]'", 2, True),
        ("f(Tensor x) -> ((Tensor, int))", "unsupported tuple type", 16, True),
        ("f(Tensor[](a!) m) -> ()", "alias annotation after '?' or '[]'" + ALIASES, 10, True),
        ("f(Tensor[]! m) -> ()", "alias annotation after '?' or '[]'" + ALIASES, 10, True),
        ("f(Tensor?! m) -> ()", "alias annotation after '?' or '[]'" + ALIASES, 9, True),
        ("f(int[](a) m) -> ()", "alias annotation on 'int[]'" + ALIASES, 7, True),
        ("f(Tensor(a -> *) m) -> ()", "unsupported alias annotation 'Tensor(a -> *)'" + ALIASES, 8, True),
        ("f(Tensor(a|b) m) -> ()", "unsupported alias annotation 'Tensor(a|b)'" + ALIASES, 8, True),
        ("f(Tensor(A!) m) -> ()", "unsupported alias annotation 'Tensor(A!)'" + ALIASES, 8, True),
        ("f(int(a) m) -> ()", "unsupported alias annotation 'int(a)'" + ALIASES, 5, True),
        ("f(int! m) -> ()", "unsupported alias annotation 'int!'" + ALIASES, 5, True),
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
        parse_schema("f(complex c) -> ()")
    assert info.value.message.startswith("unsupported type 'complex': not one torch.library infers for custom ops "
                                         "(kopgen supports: Tensor, ")


# Schemas in torch's own registry that are invalid, not merely unsupported.
TORCH_INVALID = {
    # 'posinf' is declared twice (a typo for 'neginf' in torch).
    "static_runtime::clamp_nan_to_num(Tensor input, Scalar? min, Scalar? max, float? nan, "
    "float? posinf, float? posinf) -> Tensor": "argument 'posinf' defined twice",
}


def _reason(error: SchemaError) -> str:
    """The reason of an unsupported-schema error, less its example (TorchBind classes as one)."""
    reason = error.message.split(" (kopgen supports: ")[0]
    return re.sub(r"'__torch__[\w.]*'", "'__torch__...'", reason)


def test_all_torch_schemas():
    """Every schema torch registers round-trips, or is refused as something custom operators cannot
    have; the reasons are printed grouped (run with -s)."""
    pytest.importorskip("torch")
    # In a fresh interpreter: torch's own schemas, not the ops other tests registered in this process
    # (torch prints their `Tensor!` as `Tensor($0! -> )`, which nothing reads back).
    listed = subprocess.run(
        [sys.executable, "-c", "import json, torch; print(json.dumps([str(s) for s in torch._C._jit_get_all_schemas()]))"],
        capture_output=True, text=True, check=True,
    )
    texts = json.loads(listed.stdout)
    n_ok = 0
    reasons: collections.Counter[str] = collections.Counter()
    failures = []
    for text in texts:
        try:
            printed = str(parse_schema(text))
        except SchemaError as e:
            if e.unsupported:
                reasons[_reason(e)] += 1
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
    n_rejected = sum(reasons.values())
    print(f"\ntorch schemas: {n_ok:,} exact and {n_rejected:,} rejected of {len(texts):,}")
    for reason, count in reasons.most_common():
        print(f"  {count:4} {reason}")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:50])
    # What stays refused is what a custom operator cannot declare: TorchScript's own types, TorchBind
    # classes, types torch.library does not take, views and wildcard aliases, varargs.
    assert all(any(re.match(allowed, reason) for allowed in ALLOWED_REASONS) for reason in reasons), sorted(reasons)
    assert n_ok > 3800


ALLOWED_REASONS = (
    r"unsupported type '\w+': TorchScript's, not an operator's",
    r"unsupported type '__torch__\.\.\.': a TorchBind class",
    r"unsupported type '\w+': not one torch.library infers for custom ops",
    r"unsupported type '\w+\[\]\[\]'",  # nested lists
    r"unsupported type '\w+\?\[\]'",  # onednn's Scalar?[]; torch.library's lists of optionals are Tensor?[] only
    r"unsupported tuple type",
    r"varargs",
    r"unsupported alias annotation 'Tensor\((a -> \*|b\|a|\*)\)'",  # views and wildcards
    r"unsupported alias annotation 'Generator\(a!\)'",
    r"alias annotation on '\w+\[\]'",  # TorchScript's list aliasing
    r"alias annotation after '\?' or '\[\]'",  # aten::sorted.Tensor's Tensor[](a)
)


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
        ("Scalar", "torch.types.Number"),
        ("Scalar?", "torch.types.Number | None"),
        ("Scalar[]", "Sequence[torch.types.Number]"),
        ("Tensor?[]", "Sequence[Tensor | None]"),
        ("bool[3]", "Sequence[bool]"),
        ("str[]", "Sequence[str]"),
        ("Device?", "torch.device | None"),
        ("Layout?", "torch.layout | None"),
        ("MemoryFormat?", "torch.memory_format | None"),
        ("Generator?", "torch.Generator | None"),
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
        ("bool[3] x=[True, False, True]", "(True, False, True)"),
        ("ScalarType x=float32", "torch.float32"),
        ("ScalarType x=long", "torch.int64"),
        ("ScalarType? x=4", "torch.int64"),
        ("Layout x=0", "torch.strided"),
        ("MemoryFormat? x=contiguous_format", "torch.contiguous_format"),
        ('Device x="cuda:1"', "torch.device('cuda:1')"),
        ("Generator? x=None", "None"),
    ],
)
def test_python_default(arg_text, default):
    arg = parse_schema(f"f({arg_text}) -> ()").arguments[0]
    assert python_default(arg) == default
    if default is not None:  # always valid Python that evaluates to an immutable value
        value = eval(default, {"torch": pytest.importorskip("torch")})  # test only: our own output
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
