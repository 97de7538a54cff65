"""The sample Tensors' shapes where the spec relates them (`tests: args: NAME: {shape: EXPR}`): computed
from the other arguments at generation time, for the generated tests and for `kopgen check`, and checked
to be shapes a test can draw."""

from __future__ import annotations

import ast
import math
from typing import NamedTuple

from ..expr import evaluate
from ..expr.metadata import MAX_DIMS
from ..model import Arg, Op

# The most elements a sample Tensor of the generated tests may have: test shapes are small, and a relation
# such as `x.shape * 100` must not make the tests allocate gigabytes.
MAX_SAMPLE_ELEMENTS = 2**26


class SampleShapeError(ValueError):
    """A Tensor's sample shape that the tests cannot make: its relation (`tests: args: NAME: {shape: EXPR}`,
    `name`) fails or gives no shape on one of the spec's test shapes, or it is too large."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


class _Sizes(NamedTuple):
    """A sample Tensor as the metadata language reads it at generation time: `x.shape`, `x.size(i)`,
    `x.dim()`, `x.numel()` and `x.stride()` (samples are contiguous)."""

    shape: tuple[int, ...]

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def stride(self) -> tuple[int, ...]:
        return tuple(math.prod(self.shape[i + 1 :]) for i in range(len(self.shape)))


def checked_shape(name: str, shape) -> tuple[int, ...]:
    """`shape` as a sample Tensor's shape: a tuple of sizes, none negative, of at most MAX_SAMPLE_ELEMENTS."""
    if not isinstance(shape, tuple) or not all(type(n) is int for n in shape):
        raise SampleShapeError(name, f"gives {shape!r}, not a tuple of sizes")
    if any(n < 0 for n in shape):
        raise SampleShapeError(name, f"gives {shape}, a negative size")
    if len(shape) > MAX_DIMS or math.prod(shape) > MAX_SAMPLE_ELEMENTS:
        raise SampleShapeError(name, f"gives a shape of {len(shape)} dimensions and {math.prod(shape)} elements; "
                                     f"a sample has at most {MAX_DIMS} and {MAX_SAMPLE_ELEMENTS}")  # fmt: skip
    return shape


def with_shape_relations(op: Op, shape_of, ints: dict[str, int]):
    """`shape_of`, where `tests: args: NAME: {shape: EXPR}` computes NAME's shape from the other arguments'
    shapes and the int arguments' values `ints` in the same sample (samples.py checked EXPR against the
    metadata language, without cycles; SampleShapeError where it fails on these shapes)."""
    relations = {s.name: s.shape for s in op.sample_args if s.shape}
    if not relations:
        return shape_of

    def related(a: Arg):
        given = shape_of(a)
        if a.name not in relations or given is None:
            return given
        # Only the arguments the relation names: two relations to a third argument are no cycle.
        read = {node.id for node in ast.walk(ast.parse(relations[a.name], mode="eval")) if isinstance(node, ast.Name)}
        tensors = [t for t in op.tensor_args if t.name in read and related(t) is not None]
        names = {t.name: _Sizes(tuple(related(t)[0])) for t in tensors}
        names |= {n: value for n, value in ints.items() if n in read}
        try:
            shape = evaluate(relations[a.name], names)  # the metadata language, checked
        except AttributeError as error:
            raise SampleShapeError(a.name, f"fails: it reads .{error.name}, which a sample's sizes do not have "
                                           "(shape, size(), dim(), numel(), stride())") from None  # fmt: skip
        except Exception as error:  # noqa: BLE001 - whatever the user's expression raises is reported at it
            raise SampleShapeError(a.name, f"fails: {type(error).__name__}: {error}") from None
        return (checked_shape(a.name, tuple(shape) if isinstance(shape, (tuple, list)) else shape), *given[1:])

    return related
