"""Backward: the formulas of `backward:` and the plan of what autograd saves for them."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .expr import ExprError, FormulaContext, parse_formula
from .model import Arg, Backward, Gradient, Op, Saved
from .normalize import check_saved_stats, stat_names
from .schema import FunctionSchema
from .split import read_through_source, split_sources

if TYPE_CHECKING:
    from .resolve import OpResolver

NON_DIFFERENTIABLE = "non_differentiable"


def resolve_backward(resolver: OpResolver, schema: FunctionSchema, args: tuple[Arg, ...], body=None) -> Backward | None:
    """The op's `backward:` formulas, parsed, and what setup_context saves for them (`body`: the op's kind,
    whose statistics, for a normalisation, the formulas may read)."""
    node = resolver.node.get("backward")
    if node is None or schema.mutated_arguments:  # mutating ops take none (reported with the kind)
        return None
    halves = split_sources(resolver)  # a `split` op's formulas also read its halves: {gate: x, up: x}
    stats = stat_names(resolver)  # a `normalize` op's formulas also read its statistics: rstd, ...
    context = FormulaContext(
        arg_kinds={a.name: a.kind for a in args} | dict.fromkeys(halves, "tensor") | dict.fromkeys(stats, "tensor"),
        num_outputs=len(schema.returns),
        namespace=resolver.namespace,
        own_ops=resolver.own_ops,
        mutating_ops=resolver.mutating_ops,
        own_op_returns=resolver.own_op_returns,
    )
    by_name = {a.name: a for a in args}
    gradients = []
    for key, (key_node, value) in node.entries.items():
        arg = by_name.get(key)
        if arg is None:
            resolver.error(key_node.position, f"backward names '{key}', which is not an argument of the op")
        elif not arg.is_tensor:
            resolver.error(key_node.position, f"'{key}' is a {arg.schema.type}; only Tensor arguments take a formula")
        elif value.value == NON_DIFFERENTIABLE:
            gradients.append(Gradient(arg, None))
        else:
            try:
                gradients.append(Gradient(arg, read_through_source(parse_formula(value.value, context), halves)))
            except ExprError as error:
                resolver.expr_errors(value, error)
    for arg in args:
        if arg.is_tensor and arg.name not in node.entries:
            resolver.error(
                resolver.node.key_position("backward"),
                f"backward has no formula for Tensor argument '{arg.name}' "
                f"(write one, or '{arg.name}: {NON_DIFFERENTIABLE}')",
            )
    if any(source not in by_name for source in halves.values()):
        return None  # `split` names no argument (split_args reports it): nothing to save the halves through
    gradients.sort(key=lambda g: g.arg.index)
    stat_reads = getattr(body, "reads", ())  # what a backward differentiated again recomputes them from
    backward = plan_backward(tuple(gradients), args, num_outputs=len(schema.returns), stats=stats, stat_reads=stat_reads)
    check_saved_stats(resolver, backward)
    return backward


def plan_backward(gradients: tuple[Gradient, ...], args: tuple[Arg, ...], num_outputs: int,
                  stats: tuple[str, ...] = (), stat_reads: tuple[str, ...] = ()) -> Backward:
    """Decide what setup_context saves: only what formulas read, gated on needs_input_grad. `stats`: a
    normalisation's statistics, which the formulas may read as the forward saved them; where they do,
    what the statistics read (`stat_reads`) is saved too, for a backward differentiated again, which
    recomputes them (lang/norms.py)."""
    value_users: dict[str, list[int]] = {}
    metadata_users: dict[str, list[int]] = {}
    result_users: dict[int, list[int]] = {}
    scalars: set[str] = set()
    for gradient in gradients:
        formula, index = gradient.formula, gradient.arg.index
        if formula is None:
            continue
        for name in formula.saved_tensors:
            value_users.setdefault(name, []).append(index)
        for name in formula.metadata_only:
            metadata_users.setdefault(name, []).append(index)
        for output in formula.results_used:
            result_users.setdefault(output, []).append(index)
        scalars.update(formula.scalars)
    _save_stat_reads(value_users, scalars, stats, stat_reads, args)
    order = {a.name: a.index for a in args} | {name: len(args) + i for i, name in enumerate(stats)}
    by_name = {a.name: a for a in args}
    # A tensor whose value one formula reads and whose metadata another reads is saved for both:
    # in backward its name is the saved tensor.
    saved_tensors = [
        Saved(name, name, tuple(sorted(set(users) | set(metadata_users.get(name, ())))))
        for name, users in sorted(value_users.items(), key=lambda kv: order[kv[0]])
    ]
    for output, users in sorted(result_users.items()):
        if num_outputs == 1:
            saved_tensors.append(Saved("result", "output", tuple(users)))
        else:
            saved_tensors.append(Saved(f"result{output}", f"output[{output}]", tuple(users)))
    saved_metadata = tuple(
        Saved(name, name, tuple(users), optional=name in by_name and by_name[name].is_optional)
        for name, users in sorted(metadata_users.items(), key=lambda kv: order[kv[0]])
        if name not in value_users
    )
    return Backward(
        gradients=gradients,
        saved_tensors=tuple(saved_tensors),
        saved_metadata=saved_metadata,
        scalars=tuple(sorted(scalars, key=order.get)),
        num_outputs=num_outputs,
        arg_names=tuple(a.name for a in args if not a.schema.kwarg_only),
        differentiable_twice=True,
        keyword_only=tuple(a.name for a in args if a.schema.kwarg_only),
        droppable_inputs=any(a.is_optional and a.schema.default is not None for a in args),
        stats=tuple(name for name in stats if name in value_users),
    )


def _save_stat_reads(value_users: dict[str, list[int]], scalars: set[str], stats: tuple[str, ...],
                     stat_reads: tuple[str, ...], args: tuple[Arg, ...]) -> None:
    """The arguments the read statistics are computed from, saved for each gradient that reads one."""
    users = sorted({i for name in stats for i in value_users.get(name, ())})
    if not users:
        return
    for arg in args:
        if arg.name in stat_reads and arg.is_tensor:
            value_users[arg.name] = sorted(set(value_users.get(arg.name, ())) | set(users))
        elif arg.name in stat_reads:
            scalars.add(arg.name)


def mark_not_twice_differentiable(ops: list[Op]) -> None:
    """Mark formulas that call an own op without a backward as not twice differentiable."""
    # Done after all ops are resolved, since an op may call one defined later in the file.
    differentiable = {op.name for op in ops if op.backward is not None}
    for i, op in enumerate(ops):
        if op.backward is None:
            continue
        # A backward kernel's call is differentiated through the formulas as written (lang/autograd.py)
        called = {name for g in op.backward.gradients if g.formula for name in (g.eager or g.formula).own_ops_called}
        if called - differentiable:
            backward = dataclasses.replace(op.backward, differentiable_twice=False)
            ops[i] = dataclasses.replace(op, backward=backward)
