"""The `normalize` kind, resolved from the spec: row statistics, then a pointwise expression over the row.

    normalize:
      stats: {rstd: "rsqrt(mean(x * x) + eps)"}   # per row, in order; each one reduction
      compute: "x * rstd * weight"                 # over the row, reading the statistics

Each statistic is one reduction (sum, mean, max, min) of a pointwise expression over the row, inside
a pointwise expression of the reduced value (the statistic's own name stands for it there). Both are
in the pointwise language, over the arguments and the statistics before it.
"""

from __future__ import annotations

import ast
import keyword
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import __version__
from .expr import ExprError, parse_pointwise
from .expr.pointwise import RESERVED
from .expr.syntax import python_tree
from .format import REDUCTIONS
from .loader import Mapping as MappingNode
from .loader import Scalar
from .model import Arg, Backward, Reduction, Route, Write
from .model_kinds import RowNormalization, RowStat
from .names import MODULE_NAMES, PYTHON_LOCALS, output_names
from .schema import FunctionSchema

if TYPE_CHECKING:
    from .resolve import OpResolver


def resolve_normalization(resolver: OpResolver, schema: FunctionSchema, args: tuple[Arg, ...]) -> RowNormalization | None:
    """`normalize: {stats, compute}`: every error reported at its node; None where there are some."""
    node = resolver.node.get("normalize")
    at = resolver.node.get("schema").value_position
    errors_before = len(resolver.diagnostics.items)
    mutated = [a for a in args if a.is_mutated]
    if not mutated and len(schema.returns) != 1:
        resolver.error(at, f"a normalize op returns one Tensor, not {len(schema.returns)}")
    for arg in args:
        if not arg.is_tensor and arg.name in ("dim", "dims", "axis"):
            resolver.error(at.shifted(0, arg.schema.column), f"normalize ops work over the last dimension, so argument "
                                                            f"'{arg.name}' would not be honoured; remove it")
    kinds = {a.name: a.kind for a in args}
    stats = []
    stats_node = node.get("stats")
    for name, (key_node, value) in stats_node.entries.items():
        if _check_stat_name(resolver, name, key_node, kinds) and isinstance(value, Scalar):
            stat = _resolve_stat(resolver, name, value, kinds)
            if stat is not None:
                stats.append(stat)
        kinds[name] = "tensor"  # later statistics and compute read it as a value per row
    compute = node.get("compute")
    (out,) = output_names([*(a.name for a in args), *(s.name for s in stats)], 1)
    targets = [(out, None, compute)]
    if mutated or not isinstance(compute, Scalar):  # `compute: {arg: EXPR}`: each mutated argument's new value
        from .kinds import resolve_mutation  # kinds.py imports this module

        targets = resolve_mutation(resolver, schema, compute, mutated)
    writes = []
    for name, arg, expression in targets:
        try:
            writes.append(Write(parse_pointwise(expression.value, kinds), name, arg))
        except ExprError as error:
            resolver.expr_errors(expression, error)
    if not writes:
        return None
    _check_uses(resolver, node, args, stats, writes)
    if len(resolver.diagnostics.items) > errors_before:
        return None
    return RowNormalization(tuple(stats), tuple(writes))


def stat_names(resolver: OpResolver) -> tuple[str, ...]:
    """The names of a `normalize` op's statistics (none for other ops), which its backward formulas may read."""
    node = resolver.node.get("normalize")
    stats = node.get("stats") if isinstance(node, MappingNode) else None
    if not isinstance(stats, MappingNode):
        return ()
    return tuple(name for name in stats.entries if name.isidentifier() and not keyword.iskeyword(name))


def check_saved_stats(resolver: OpResolver, backward: Backward) -> None:
    """Formulas that read statistics need the forward that saves them (lang/norms.py): an op of the
    namespace that the Python routes define; the triton_op and compiled routes do not have it yet."""
    route = resolver.resolve_registration()
    if not backward.stats or route in (Route.CUSTOM_OP, Route.LIBRARY):
        return
    node = resolver.node.get("backward")
    reader = next(g.arg.name for g in backward.gradients if g.formula and set(g.formula.saved_tensors) & set(backward.stats))
    resolver.error(node.key_position(reader), f"the backward formulas read the statistics {', '.join(backward.stats)}, "
                                              f"which only the custom_op and library routes save in kopgen {__version__}; "
                                              f"use registration: custom_op, or formulas that compute them")


def _check_stat_name(resolver: OpResolver, name: str, key_node: Scalar, kinds: dict[str, str]) -> bool:
    """A statistic's name is a local of the generated code: a new identifier, none the code binds itself."""
    why = None
    if not name.isidentifier() or keyword.iskeyword(name):
        why = "is not a Python identifier"
    elif name in kinds:
        why = "is already an argument of the op"
    elif name.startswith("_") or name in PYTHON_LOCALS or name in MODULE_NAMES or name in RESERVED:
        why = "is a name the generated code binds itself"  # RESERVED: abs, min, ... which C++ and Triton use
    if why:
        resolver.error(key_node.position, f"statistic '{name}' {why}: give it another name")
    return why is None


def _resolve_stat(resolver: OpResolver, name: str, node: Scalar, kinds: dict[str, str]) -> RowStat | None:
    """`NAME: OUTER(REDUCTION(EXPR))`: EXPR reduced over the row, then OUTER of it (NAME standing for it)."""
    text = node.value if isinstance(node.value, str) else str(node.value)
    try:
        tree = python_tree(text.strip())
    except SyntaxError:
        return _report(resolver, node, text, kinds)  # the pointwise language's own message, at its column
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id in REDUCTIONS]
    if len(calls) != 1 or len(calls[0].args) != 1 or calls[0].keywords:
        found = f"it has {len(calls)}" if len(calls) != 1 else "its reduction takes one expression"
        resolver.error(node.value_position, f"statistic '{name}' is one reduction ({', '.join(REDUCTIONS)}) of an "
                                            f"expression over the row, e.g. rsqrt(mean(x * x) + eps); {found}")
        return None
    call, lead = calls[0], len(text) - len(text.lstrip())
    reduced_at, start, end = _offset(text, call.args[0], lead), _offset(text, call, lead), _end(text, call, lead)
    outer_text = text[:start] + name + text[end:]
    try:
        reduced = parse_pointwise(text[reduced_at:_end(text, call.args[0], lead)], kinds)
    except ExprError as error:
        return _report_at(resolver, node, error, lambda column: reduced_at + column)
    try:
        outer = None if outer_text.strip() == name else parse_pointwise(outer_text, {**kinds, name: "tensor"})
    except ExprError as error:  # columns after the name are the text's after the reduction
        return _report_at(resolver, node, error, lambda column: column + (end - start - len(name)) * (column > start))
    if any(e.tested for e in (reduced, outer) if e is not None):
        resolver.error(node.value_position, f"statistic '{name}' tests present(): only compute can")
        return None
    return RowStat(name, Reduction(call.func.id), reduced, outer, text)


def _offset(text: str, tree: ast.AST, lead: int) -> int:
    """Where `tree` starts in `text` (parsed without its leading blanks)."""
    lines = text.lstrip().split("\n")
    return lead + sum(len(line) + 1 for line in lines[: tree.lineno - 1]) + tree.col_offset


def _end(text: str, tree: ast.AST, lead: int) -> int:
    lines = text.lstrip().split("\n")
    return lead + sum(len(line) + 1 for line in lines[: tree.end_lineno - 1]) + tree.end_col_offset


def _report_at(resolver: OpResolver, node: Scalar, error: ExprError, column: Callable[[int], int]) -> None:
    """Each problem of a part of the statistic's text, at its column in the whole text (first line)."""
    for each in error.errors:
        resolver.error(node.value_position.shifted(each.line, column(each.column) if each.line == 0 else each.column),
                       each.message)


def _report(resolver: OpResolver, node: Scalar, text: str, kinds: dict[str, str]) -> None:
    try:
        parse_pointwise(text, kinds)
    except ExprError as error:
        resolver.expr_errors(node, error)


def _check_uses(resolver: OpResolver, node, args: tuple[Arg, ...], stats: list[RowStat], writes: list[Write]) -> None:
    """Every Tensor argument (but a written one) and every statistic is read by something."""
    computed = {n for w in writes for n in (*w.expr.names, *w.expr.tested)}
    read = computed | {n for s in stats for e in s.exprs for n in e.names}
    for arg in args:
        if arg.is_tensor and not arg.is_mutated and arg.name not in read:
            resolver.error(node.position, f"Tensor argument '{arg.name}' is not used by normalize")
    for i, stat in enumerate(stats):
        later = computed | {n for s in stats[i + 1:] for e in s.exprs for n in e.names}
        if stat.name not in later:
            resolver.error(node.get("stats").key_position(stat.name), f"statistic '{stat.name}' is not used by compute "
                                                                      "or a later statistic")
