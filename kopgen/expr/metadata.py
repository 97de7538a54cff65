"""The output metadata of `kernel: custom` ops (`fake: {shape: EXPR, dtype: EXPR}`).

Shapes and dtypes computed from the arguments' metadata, such as x.shape[:-1] + (2,), x.size(0)
or torch.float32; `parse_metadata` checks one and returns it as Python source.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from .syntax import METADATA_ATTRIBUTES, METADATA_METHODS, Checker, ExprError, parse

_TORCH_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "bool")


class _MetadataChecker(Checker):
    """Shapes and dtypes from the arguments' metadata: x.shape[:-1] + (2,), x.size(0), torch.float32."""

    language = "an output shape or dtype"

    def __init__(self, text: str, tensors: frozenset[str], ints: frozenset[str]):
        super().__init__(text)
        self.tensors, self.ints = tensors, ints

    def visit_Constant(self, node: ast.Constant) -> None:
        if type(node.value) is not int:
            raise self.forbidden(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.tensors:
            raise self.error(node, f"use {node.id}.shape or {node.id}.dtype: a shape or dtype reads metadata only")
        if node.id not in self.ints:
            raise self.error(node, f"unknown name {node.id!r}; use the op's Tensor and int arguments")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = node.value
        if isinstance(base, ast.Name) and base.id == "torch" and node.attr in _TORCH_DTYPES:
            return
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
        if not (isinstance(func, ast.Attribute) and func.attr in METADATA_METHODS
                and isinstance(func.value, ast.Name) and func.value.id in self.tensors) or node.keywords:
            raise self.error(node, f"the only calls allowed are x.{'(), x.'.join(METADATA_METHODS)}() of a "
                                   "Tensor argument")
        for arg in node.args:
            self.check(arg)


def parse_metadata(text: str, tensors: Iterable[str], ints: Iterable[str]) -> str:
    """Check an output shape or dtype expression of a custom op; returns it as Python source."""
    body = parse(text)
    checker = _MetadataChecker(text, frozenset(tensors), frozenset(ints))
    checker.check(body)
    ExprError.raise_any(checker.errors)
    return ast.unparse(body)
