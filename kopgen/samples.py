"""`tests: args:`: how the generated tests draw each argument (a Tensor's own dtype and bounds, a scalar's value)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .expr.metadata import TORCH_DTYPES
from .expr.syntax import did_you_mean
from .loader import Node, Scalar, describe_scalar
from .model import Arg, Body, CustomKernel, SampleArg

if TYPE_CHECKING:
    from .resolve import OpResolver


# The Python type a scalar argument's `value` must have, by the argument's kind (an int is a float too).
_VALUE_TYPES = {"int": ((int,), "an integer"), "float": ((int, float), "a number"), "bool": ((bool,), "true or false")}


def resolve_sample_args(resolver: OpResolver, args: tuple[Arg, ...], body: Body | None) -> tuple[SampleArg, ...]:
    """`tests: args:`: per argument, a Tensor's own dtype and bounds, or a scalar's fixed value."""
    tests = resolver.setting("tests")
    node = tests.get("args") if tests is not None else None
    if node is None:
        return ()
    by_name = {a.name: a for a in args}
    settings = []
    for name, (key, entry) in node.entries.items():
        arg = by_name.get(name)
        if arg is None:
            resolver.error(key.position, f"tests.args names '{name}', not an argument of the op{did_you_mean(name, list(by_name))}")
            continue
        values = {k: v for k, (_, v) in entry.entries.items()}  # check_format: a mapping of known keys
        dtype, low, high, value = (values.get(k) for k in ("dtype", "low", "high", "value"))
        if arg.is_tensor:
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
        else:
            for extra in (dtype, low, high):
                if extra is not None:
                    resolver.error(extra.position, f"'{name}' is a {arg.schema.type} argument: set its value, "
                                               "e.g. {value: 1.0}; dtype, low and high are for Tensors")
            if value is not None:
                _check_value(resolver, arg, value)
        settings.append(SampleArg(name, *(n.value if n is not None else None for n in (dtype, low, high, value))))
    return tuple(settings)


def _check_value(resolver: OpResolver, arg: Arg, node: Node) -> None:
    """A scalar's `value` has the argument's type: an int for `int`, a number for `float`, true/false for `bool`."""
    types, noun = _VALUE_TYPES.get(arg.kind, ((), ""))
    if not types:
        resolver.error(node.position, f"value works for int, float and bool arguments, not {arg.schema.type} '{arg.name}'")
    elif not isinstance(node, Scalar) or type(node.value) not in types:
        got = describe_scalar(node) if isinstance(node, Scalar) else "a list or mapping"
        resolver.error(node.position, f"'{arg.name}' is {arg.schema.type}: its value must be {noun}, not {got}")
