"""`tests: args:`: how the generated tests draw each argument (a Tensor's own dtype and bounds, a scalar's value)."""

from __future__ import annotations

import ast
import math
from typing import TYPE_CHECKING

from .expr import ExprError, parse_metadata
from .expr.metadata import TORCH_DTYPES
from .expr.syntax import did_you_mean
from .loader import Mapping, Node, Scalar, Sequence, describe_scalar
from .model import Arg, Body, CustomKernel, SampleArg
from .schema import INT64, ListType, OptionalType

if TYPE_CHECKING:
    from .resolve import OpResolver


# The values a non-Tensor argument's `value` may take, by its type (an int is a float too), and how a
# message names them. A list type takes a YAML list of its items.
_VALUE_TYPES = {
    "int": ((int,), "an integer"), "SymInt": ((int,), "an integer"), "float": ((int, float), "a number"),
    "bool": ((bool,), "true or false"), "Scalar": ((int, float, bool), "a number"), "str": ((str,), "a string"),
    "ScalarType": ((str,), "a dtype name (float32, int64, ...)"),
}  # fmt: skip
# Types whose sample the tests draw or choose without being told: the rest need a default or a `value`.
_DRAWN = ("Tensor", "int", "SymInt", "float", "bool", "Scalar", "Tensor[]", "Tensor?[]")


def resolve_sample_args(resolver: OpResolver, args: tuple[Arg, ...], body: Body | None) -> tuple[SampleArg, ...]:
    """`tests: args:`: per argument, a Tensor's own dtype, bounds and shape, or another argument's fixed value."""
    tests = resolver.setting("tests")
    node = tests.get("args") if tests is not None else None
    entries = node.entries if node is not None else {}
    if isinstance(body, CustomKernel):
        _check_every_argument_has_a_sample(resolver, args, entries)
    by_name = {a.name: a for a in args}
    settings = []
    for name, (key, entry) in entries.items():
        arg = by_name.get(name)
        if arg is None:
            resolver.error(key.position, f"tests.args names '{name}', not an argument of the op{did_you_mean(name, list(by_name))}")
            continue
        values = {k: v for k, (_, v) in entry.entries.items()}  # check_format: a mapping of known keys
        dtype, low, high, value, shape = (values.get(k) for k in ("dtype", "low", "high", "value", "shape"))
        if arg.is_tensor:
            _check_tensor(resolver, arg, body, dtype, low, high, value)
        else:
            for extra in (dtype, low, high, shape):
                if extra is not None:
                    resolver.error(extra.position, f"'{name}' is an argument of type {arg.schema.type}: set its "
                                               "value, e.g. {value: ...}; dtype, low, high and shape are for Tensors")
            if value is not None:
                _check_value(resolver, arg, value)
        settings.append(SampleArg(name, *(_plain(n) for n in (dtype, low, high, value)), shape=_shape(resolver, args, shape)))
    _check_shape_cycles(resolver, node, settings)
    return tuple(settings)


def _check_tensor(resolver: OpResolver, arg: Arg, body: Body | None, dtype, low, high, value) -> None:
    name = arg.name
    if value is not None:
        resolver.error(value.position, f"'{name}' is a Tensor: the tests draw it; give dtype, low and high instead of value")
    if dtype is not None and dtype.value not in TORCH_DTYPES:
        close = did_you_mean(dtype.value, sorted(TORCH_DTYPES))
        resolver.error(dtype.value_position, f"unknown dtype '{dtype.value}'{close}")
    elif dtype is not None and not isinstance(body, CustomKernel):
        resolver.error(dtype.value_position, "a Tensor of its own dtype needs `kernel: custom`: kopgen's compute "
                                         "and reduce kernels read every input in the op's dtype")
    if dtype is not None and dtype.value == "bool" and (low or high):
        resolver.error((low or high).position, f"'{name}' is a bool Tensor: it takes no low or high")
    if low is not None and high is not None and low.value >= high.value:
        resolver.error(high.position, f"high must be more than low ({low.text}): values are drawn from [low, high)")


def _shape(resolver: OpResolver, args: tuple[Arg, ...], node: Scalar | None) -> str | None:
    """A Tensor's sample shape from the other arguments, in fake's metadata language (None where not set or wrong)."""
    if node is None:
        return None
    try:
        return parse_metadata(node.value, [a.name for a in args if a.is_tensor], [a.name for a in args if a.kind == "int"])
    except ExprError as error:
        resolver.expr_errors(node, error)
        return None


def _check_shape_cycles(resolver: OpResolver, node: Mapping | None, settings: list[SampleArg]) -> None:
    """A shape is drawn after the Tensors it names: none may name itself, directly or through others."""
    needs = {s.name: {n.id for n in ast.walk(ast.parse(s.shape)) if isinstance(n, ast.Name)} for s in settings if s.shape}
    for name in sorted(needs):
        cycle = _cycle(needs, name)
        if cycle:
            resolver.error(node.get(name).get("shape").value_position,
                           f"the shape of '{name}' depends on itself ({' -> '.join(cycle)}): "
                           "one of them needs a shape that does not name the others")


def _cycle(needs: dict[str, set[str]], start: str) -> list[str] | None:
    """The names of a cycle through `start` (start -> ... -> start), or None."""
    def walk(name: str, path: list[str]) -> list[str] | None:
        for other in sorted(needs.get(name, ())):
            if other == start:
                return path + [other]
            found = walk(other, path + [other]) if other not in path else None
            if found:
                return found
        return None
    return walk(start, [start])


def _check_every_argument_has_a_sample(resolver: OpResolver, args: tuple[Arg, ...], entries: dict) -> None:
    """A custom kernel's argument of a type the tests cannot choose a value of needs a default or a `value`."""
    at = resolver.node.get("schema").value_position
    for arg in args:
        type = arg.schema.type
        if arg.schema.default is not None or str(type).endswith("?") or str(type) in _DRAWN:
            continue
        setting = entries.get(arg.name)
        if setting is not None and setting[1].get("value") is not None:
            continue
        if _value_types(arg)[0]:
            message = f"the tests need a value for '{arg.name}' ({type}, no default): set tests: args: {arg.name}: {{value: ...}}"
        else:
            message = f"the generated tests cannot draw a {type} ('{arg.name}'); give it a default, or make it optional"
        resolver.error(at.shifted(0, arg.schema.column), message)


def _value_types(arg: Arg) -> tuple[tuple[type, ...], str, bool]:
    """The Python types of `value`'s items, their description, and whether `value` is a list of them."""
    type = arg.schema.type
    type = type.elem if isinstance(type, OptionalType) else type
    is_list = isinstance(type, ListType)
    types, noun = _VALUE_TYPES.get(str(type.elem if is_list else type), ((), ""))
    return types, noun, is_list


def _check_value(resolver: OpResolver, arg: Arg, node: Node) -> None:
    """A `value` has the argument's type: an int for `int`, a list of numbers for `float[]`, a dtype name for
    `ScalarType`, ..."""
    types, noun, is_list = _value_types(arg)
    declared = arg.schema.type
    if not types or (is_list and str(declared).startswith("Scalar")):
        resolver.error(node.position, f"value works for int, float, bool, str, ScalarType, Scalar and lists of int, "
                                      f"float and bool, not {declared} '{arg.name}'")
        return
    items = node.items if is_list and isinstance(node, Sequence) else [node]
    size = getattr(declared.elem if isinstance(declared, OptionalType) else declared, "size", None)
    if is_list and not isinstance(node, Sequence):
        resolver.error(node.position, f"'{arg.name}' is {declared}: its value must be a list of {_plural(noun)}")
    elif is_list and size is not None and len(items) != size:
        resolver.error(node.position, f"'{arg.name}' is {declared}: its value must list {size} items, not {len(items)}")
    for item in items:
        if not isinstance(item, Scalar) or type(item.value) not in types:
            got = describe_scalar(item) if isinstance(item, Scalar) else "a list or mapping"
            what = f"a list of {_plural(noun)}" if is_list else noun
            resolver.error(item.position, f"'{arg.name}' is {declared}: its value must be {what}, not {got}")
        elif type(item.value) is float and not math.isfinite(item.value):  # the tests print it as a literal
            resolver.error(item.position, f"'{arg.name}' is {declared}: its value must be a finite number, not {item.text}")
        elif type(item.value) is int and not INT64[0] <= item.value <= INT64[1]:
            resolver.error(item.position, f"'{arg.name}' is {declared}: its value {item.text} is out of the int64 range")
        elif "ScalarType" in str(declared) and item.value not in TORCH_DTYPES:
            resolver.error(item.position, f"unknown dtype '{item.value}'{did_you_mean(item.value, sorted(TORCH_DTYPES))}")


def _plain(node: Node | None):
    """A setting's value: a list as a tuple (checked above; a wrong one is reported, and no model is made)."""
    if isinstance(node, Sequence):
        return tuple(_plain(item) for item in node.items)
    return node.value if isinstance(node, Scalar) else None


def _plural(noun: str) -> str:
    return noun.removeprefix("an ").removeprefix("a ") + "s"
