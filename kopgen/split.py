"""The gated-split kind: `split: {x: [gate, up]}` beside `compute`.

A Tensor argument's last dimension in halves, each named (`gate = x[..., :d]`, `up = x[..., d:]`),
then a pointwise expression over the halves (`silu(gate) * up`), whose output is half as wide. The
halves are strided views of the argument, which kopgen's pointwise kernels already read through
their strides: the op is a pointwise op whose kernels see the halves in place of the argument
(`Op.kernel_args`), and whose launchers, fake kernel, reference and backward bind the halves first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType, SimpleNamespace
from typing import TYPE_CHECKING, ClassVar

from .expr import Formula
from .expr.syntax import did_you_mean
from .loader import Mapping as MappingNode
from .loader import Scalar, Sequence
from .model import Arg, Body, PointwiseCompute, SampleArg
from .names import C_STD_NAMES, CPP_KEYWORDS, check_argument_names

if TYPE_CHECKING:
    from .resolve import OpResolver


# What backward formulas name besides the arguments: a half cannot take these.
FORMULA_NAMES = ("grad", "grads", "result", "results")


@dataclass(frozen=True)
class GatedSplit(PointwiseCompute):
    """`split` + `compute`: pointwise over the two halves of one Tensor argument's last dimension."""

    source: Arg  # the argument split (`x`)
    halves: tuple[Arg, Arg]  # its halves (`gate`, `up`), as arguments of the source's type and index
    templates: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            **PointwiseCompute.templates,
            "support": "package/_support/split.py.j2",
            "dense": "package/_support/dense_halves.py.j2",
        }
    )

    def kernel_args(self, tensor_args: tuple[Arg, ...]) -> tuple[Arg, ...]:
        """The op's Tensor arguments as its kernels read them: the source replaced by its halves."""
        return with_halves(tensor_args, self.source, self.halves)


@dataclass(frozen=True)
class SplitGradient(GatedSplit):
    """A split op's backward kernel (backward_kernel.py): its writes are the gradients of the halves,
    written in place into the two halves of one returned Tensor, the split argument's gradient (no cat)."""

    joined: str = "out"  # the returned Tensor, as wide as the split argument
    templates: ClassVar[Mapping[str, str]] = MappingProxyType(
        {**PointwiseCompute.templates, "support": "package/_support/split_gradient.py.j2"}
    )

    @property
    def output_names(self) -> tuple[str, ...]:
        return (self.joined,)


def split_args(resolver: OpResolver, args: tuple[Arg, ...]) -> tuple[Arg, tuple[Arg, Arg]] | None:
    """`split: {x: [gate, up]}`: the argument split and its two halves (None where it has errors, reported)."""
    node = resolver.node.get("split")
    if not isinstance(node, MappingNode) or len(node.entries) != 1:
        resolver.error(node.position, "split names one Tensor argument and its two halves: split: {x: [gate, up]}")
        return None
    ((name, (key_node, value)),) = node.entries.items()
    by_name = {a.name: a for a in args}
    source = by_name.get(name)
    tensors = [a.name for a in args if a.is_tensor]
    problems = False
    if source is None:
        resolver.error(key_node.position, f"split names '{name}', which is not an argument of the op "
                                          f"(Tensors: {', '.join(tensors)}){did_you_mean(name, tensors)}")
        problems = True
    elif source.kind != "tensor" or source.is_mutated:
        resolver.error(key_node.position, f"split takes a Tensor argument that the op reads; '{name}' is "
                                          f"{str(source.schema).split(' ')[0]}")
        problems = True
    items = value.items if isinstance(value, Sequence) else ()
    halves = [item.value if isinstance(item, Scalar) else None for item in items]
    if len(halves) != 2 or not all(isinstance(h, str) for h in halves):
        resolver.error(value.position, f"split gives '{name}' two halves, each a name: {name}: [gate, up]")
        return None
    before = len(resolver.diagnostics.items)
    for item, half in zip(items, halves):
        if not half.isidentifier():
            resolver.error(item.position, f"split: half '{half}' is not a name (letters, digits and _)")
        elif half in by_name:
            resolver.error(item.position, f"split: half '{half}' is named like an argument of the op; rename it")
        elif half in FORMULA_NAMES:
            resolver.error(item.position, f"split: half '{half}' is a name of the backward formulas "
                                          f"({', '.join(FORMULA_NAMES)}); rename it")
        elif half in CPP_KEYWORDS or half in C_STD_NAMES:
            resolver.error(item.position, f"split: half '{half}' is a C++ keyword or a name of the C/C++ "
                                          "standard library, which the compiled kernels would name; rename it")
        else:  # keywords, long names, names of the generated modules: as for an argument
            named = SimpleNamespace(arguments=[dataclasses.replace(args[0].schema, name=half, column=0)])
            check_argument_names(named, item.position, resolver.error)
    if halves[0] == halves[1]:
        resolver.error(items[1].position, f"split: the two halves are both named '{halves[0]}'")
    if problems or len(resolver.diagnostics.items) > before:
        return None
    return source, tuple(Arg(dataclasses.replace(source.schema, name=h), source.index) for h in halves)


def with_halves(args: tuple[Arg, ...], source: Arg, halves: tuple[Arg, Arg]) -> tuple[Arg, ...]:
    """The arguments as `compute` sees them: the source replaced by its halves."""
    return tuple(h for a in args for h in (halves if a == source else (a,)))


def resolve_split(resolver: OpResolver, args: tuple[Arg, ...],
                  resolve_compute: Callable[[tuple[Arg, ...]], PointwiseCompute | None]) -> GatedSplit | None:
    """`split` beside `compute`: the expression resolved over the halves (kinds.py's compute resolution)."""
    if resolver.node.get("compute") is None:
        kind = "reduce" if resolver.node.get("reduce") is not None else "kernel"
        resolver.error(resolver.node.key_position("split"), f"split goes with compute (a pointwise expression over "
                                                            f"the halves), not with {kind}")
        return None
    split = split_args(resolver, args)
    if split is None:
        return None
    source, halves = split
    body = resolve_compute(with_halves(args, source, halves))
    return None if body is None else GatedSplit(body.writes, source, halves)


def split_sources(resolver: OpResolver) -> dict[str, str]:
    """The halves a `split` op's backward formulas may read, each with the argument it is a view of
    ({} for other ops, and where `split` is malformed: resolve_split reports that)."""
    node = resolver.node.get("split")
    if not isinstance(node, MappingNode) or len(node.entries) != 1:
        return {}
    ((name, (_, value)),) = node.entries.items()
    items = value.items if isinstance(value, Sequence) else ()
    return {item.value: name for item in items if isinstance(item, Scalar) and isinstance(item.value, str)}


def read_through_source(formula: Formula, halves: dict[str, str]) -> Formula:
    """A formula that reads a half saves the argument it is a view of (backward binds the halves again)."""
    if not halves:
        return formula
    saved = tuple(dict.fromkeys(halves.get(n, n) for n in formula.saved_tensors))
    metadata = tuple(n for n in dict.fromkeys(halves.get(n, n) for n in formula.metadata_only) if n not in saved)
    return dataclasses.replace(formula, saved_tensors=saved, metadata_only=metadata)


def half_width_samples(resolver: OpResolver, args: tuple[Arg, ...], body: Body | None,
                       sample_args: tuple[SampleArg, ...]) -> tuple[SampleArg, ...]:
    """A split op's other Tensors are drawn as wide as a half (`x.shape[:-1] + (x.shape[-1] // 2,)`), where the
    spec gives no test shapes: the output is, and the grown samples of the tests keep the relation."""
    tests = resolver.setting("tests")
    if not isinstance(body, GatedSplit) or (tests is not None and tests.get("shapes") is not None):
        return sample_args
    x, set_by_spec = body.source.name, {s.name: s for s in sample_args}
    half = f"{x}.shape[:-1] + ({x}.shape[-1] // 2,)"
    others = [a for a in args if a.is_tensor and a != body.source]
    added = tuple(SampleArg(a.name, shape=half) for a in others if a.name not in set_by_spec)
    kept = tuple(s if s.shape or s.name not in {a.name for a in others} else dataclasses.replace(s, shape=half)
                 for s in sample_args)
    return kept + added
