"""The output metadata of `kernel: custom` ops (`fake: {shape: EXPR, dtype: EXPR, strides: EXPR}`).

Shapes, strides and dtypes computed from the arguments' metadata and int arguments, such as
x.shape[:-1] + (x.shape[-1] // 2,), (n, x.size(0)), x.numel() * 2 or torch.float8_e4m3fn;
`parse_metadata` checks one and returns it as Python source. An allow-list: nothing but metadata
reads, int arithmetic, tuples and torch's dtypes. In a shape, `dynamic()` or `dynamic(max=N)`
is a size only the data decides (x's positive elements: `(dynamic(),)`); a fake kernel asks
torch.library.get_ctx().new_dynamic_size() for it (`fake_source`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from .syntax import METADATA_ATTRIBUTES, METADATA_METHODS, Checker, ExprError, did_you_mean, parse, unparse

# Every torch.<dtype> of torch 2.11 and 2.13 (`isinstance(getattr(torch, n), torch.dtype)`), kept
# here so that kopgen needs no torch import; aliases (torch.float, torch.long, ...) included.
TORCH_DTYPES = frozenset({
    "bfloat16", "bit", "bits16", "bits1x8", "bits2x4", "bits4x2", "bits8", "bool", "cdouble", "cfloat",
    "chalf", "complex128", "complex32", "complex64", "double", "float", "float16", "float32",
    "float4_e2m1fn_x2", "float64", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "float8_e8m0fnu", "half", "int", "int1", "int16", "int2", "int3", "int32", "int4", "int5", "int6",
    "int64", "int7", "int8", "long", "qint32", "qint8", "quint2x4", "quint4x2", "quint8", "short",
    "uint1", "uint16", "uint2", "uint3", "uint32", "uint4", "uint5", "uint6", "uint64", "uint7", "uint8",
})
# Those whose tensors autograd never differentiates: integers, bool, quantized and bit types.
NOT_DIFFERENTIABLE_DTYPES = frozenset(
    name for name in TORCH_DTYPES if not name.startswith(("float", "bfloat", "complex", "c", "double", "half"))
)

# What a shape or strides may call: the metadata methods, and stride() (`strides: x.stride()`).
_METHODS = (*METADATA_METHODS, "stride")


class _MetadataChecker(Checker):
    """Shapes and dtypes from the arguments' metadata: x.shape[:-1] + (2,), x.size(0), torch.float32."""

    language = "an output shape or dtype"

    def __init__(self, text: str, tensors: frozenset[str], ints: frozenset[str], dynamic: bool,
                 dtypes: frozenset[str] = frozenset(), lists: frozenset[str] = frozenset()):
        super().__init__(text)
        self.tensors, self.ints, self.dynamic, self.dtypes, self.lists = tensors, ints, dynamic, dtypes, lists

    def visit_Constant(self, node: ast.Constant) -> None:
        if type(node.value) is not int:
            raise self.forbidden(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.tensors:
            raise self.error(node, f"use {node.id}.shape or {node.id}.dtype: a shape or dtype reads metadata only")
        if node.id in self.ints or node.id in self.dtypes or node.id in self.lists:
            return
        if node.id in TORCH_DTYPES:
            raise self.error(node, f"write a dtype as torch.{node.id}")
        raise self.error(node, f"unknown name {node.id!r}; use the op's Tensor and int arguments (in a shape, its "
                               "int[] arguments; in a dtype, its ScalarType arguments)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = node.value
        if isinstance(base, ast.Name) and base.id == "torch":
            if node.attr in TORCH_DTYPES:
                return
            close = did_you_mean(f"torch.{node.attr}", [f"torch.{name}" for name in sorted(TORCH_DTYPES)])
            raise self.error(node, f"unknown dtype torch.{node.attr}{close}")
        if isinstance(base, ast.Name) and base.id in self.tensors and node.attr in METADATA_ATTRIBUTES:
            return
        raise self.error(node, f"only {', '.join(METADATA_ATTRIBUTES)} of a Tensor argument, or torch.<dtype>, "
                               "are allowed here")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if not (isinstance(node.value, ast.Attribute) and node.value.attr == "shape"):
            raise self.error(node, "only a shape can be indexed, like x.shape[:-1]")
        self.check(node.value)
        index = node.slice
        for part in ((index.lower, index.upper, index.step) if isinstance(index, ast.Slice) else (index,)):
            if part is not None:
                self.check(part)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if not isinstance(node.op, ast.USub):
            raise self.forbidden(node)
        self.check(node.operand)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            raise self.error(node, "only + - * // are allowed in a shape")
        self.check(node.left)
        self.check(node.right)

    def visit_Tuple(self, node: ast.Tuple) -> None:
        for element in node.elts:
            self.check(element)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id == DYNAMIC:
            self.check_dynamic(node)
            return
        if not (isinstance(func, ast.Attribute) and func.attr in _METHODS
                and isinstance(func.value, ast.Name) and func.value.id in self.tensors) or node.keywords:
            raise self.error(node, f"the only calls allowed are x.{'(), x.'.join(_METHODS)}() of a Tensor argument")
        for arg in node.args:
            self.check(arg)


    def check_dynamic(self, node: ast.Call) -> None:
        """`dynamic()` or `dynamic(max=N)`: a size of a shape that only the data decides."""
        if not self.dynamic:
            raise self.error(node, "dynamic() is a size of a shape; dtypes and strides are known from metadata")
        # torch's new_dynamic_size takes only a max known before tracing: no size of a dynamic shape
        if node.args or any(k.arg != "max" or not (isinstance(k.value, ast.Constant) and type(k.value.value) is int)
                            for k in node.keywords):
            raise self.error(node, "write dynamic() or dynamic(max=N), N an int: torch's new_dynamic_size "
                                   "takes a bound known before tracing")


DYNAMIC = "dynamic"


def is_dynamic(source: str) -> bool:
    """Whether a checked shape has a size that only the data decides (a `dynamic()` in it)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == DYNAMIC
               for n in ast.walk(ast.parse(source, mode="eval")))


def fake_source(source: str, ctx: str) -> str:
    """A checked shape as a fake kernel computes it: each dynamic() asks `ctx` for a new size."""
    tree = ast.parse(source, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == DYNAMIC:
            node.func = ast.Attribute(ast.Name(ctx, ast.Load()), "new_dynamic_size", ast.Load())
    return ast.unparse(tree)


def parse_metadata(text: str, tensors: Iterable[str], ints: Iterable[str], dynamic: bool = False,
                   dtypes: Iterable[str] = (), lists: Iterable[str] = ()) -> str:
    """Check an output shape, strides or dtype expression of a custom op (only a shape may have a
    `dynamic()` size, where `dynamic` says so; only a dtype names `dtypes`, the ScalarType arguments,
    which the generated Python and C++ pass on as they are; only a shape `lists`, the int[] arguments);
    returns it as Python source, each list as `tuple(name)` (torch passes a list, which `+ (2,)` refuses)."""
    body = parse(text)
    checker = _MetadataChecker(text, frozenset(tensors), frozenset(ints), dynamic, frozenset(dtypes), frozenset(lists))
    checker.check(body)
    ExprError.raise_any(checker.errors)
    return unparse(_AsTuples(frozenset(lists)).visit(body)) if lists else unparse(body)


class _AsTuples(ast.NodeTransformer):
    """Each int[] argument `shape` as `tuple(shape)`, which C++ reads as list_shape(shape) (csrc/custom.h)."""

    def __init__(self, lists: frozenset[str]):
        self.lists = lists

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id not in self.lists:
            return node
        return ast.copy_location(ast.Call(ast.Name("tuple", ast.Load()), [node], []), node)


# The most dimensions a shape evaluated at generation time may have: `(1,) * x.dim()` is a shape, and
# `(1,) * 10**9` must fail at once, not fill the memory of `kopgen check`.
MAX_DIMS = 64


class _Repeated(ast.NodeTransformer):
    """Each `a * b` as `_times(a, b)`, which bounds a tuple's repetition."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Mult):
            return node
        return ast.copy_location(ast.Call(ast.Name("_times", ast.Load()), [node.left, node.right], []), node)


def _times(a, b):
    for times, items in ((a, b), (b, a)):
        if isinstance(items, tuple) and type(times) is int and times * len(items) > MAX_DIMS:
            raise ValueError(f"a shape of {times * len(items)} dimensions; at most {MAX_DIMS}")
    return a * b


def evaluate(source: str, names: dict) -> object:
    """A metadata expression that parse_metadata returned, evaluated on plain values (sizes as tuples and
    ints, dtypes as `names` gives them), with no builtins and tuple repetition bounded (MAX_DIMS)."""
    tree = ast.fix_missing_locations(_Repeated().visit(ast.parse(source, mode="eval")))
    return eval(compile(tree, "<metadata>", "eval"), {"__builtins__": {}, "_times": _times, "tuple": tuple}, names)
