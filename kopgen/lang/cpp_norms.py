"""This module writes the C++ and CUDA functor of a row normalisation (`normalize`,
model_kinds.RowNormalization): the methods csrc/pointwise.h's norms loop and cuda/pointwise.cuh's
norms_kernel call, one overload per statistic, beside the functor's operator() (lang/cpp.py).

    using Reductions = std::tuple<Mean<acc_t>>;  // each statistic's reduction, in order
    static constexpr int column_sums = 1;  // a backward kernel's: operator()'s last values summed over the rows
    acc_t reduced(Stat<0>, const acc_t* stat, acc_t x, acc_t weight) const  // its value per element
    acc_t finished(Stat<0>, const acc_t* stat, acc_t rstd) const  // the statistic from its total
    Values<acc_t, 1> operator()(const acc_t* stat, acc_t x, acc_t weight) const  // compute

`stat` holds the row's statistics computed so far; each method binds the ones it reads by name.

A part of an expression computed per element that reads statistics and scalars only (layer_norm's backward
reads `rsqrt(mean1 + eps)` at every element) is a row value: computed once a row, after the statistics it
reads, as a statistic without a pass over the row (its reduction `RowValue`, its `finished` taking no total),
and read by name. The compiler cannot hoist it itself: a division or square root is a branch to its slow
path per element. A division by a row-invariant value is a product with its reciprocal, a row value: within an
ulp or so of the quotient (Triton's default float32 division is not exact either), but for a divisor so small
that its reciprocal overflows (below about 3e-39 in float32), where the quotient may still be finite.

A row value that multiplies a sum or mean is taken out of it (`mean(g * (x - mu) * rstd)` is `rstd * mean(g * (x -
mu))`): the statistic then reduces in the same pass as the statistics its row value reads, its finishing multiplies
by the row value's expression. layer_norm's backward took three rounds of a block's barriers a row, two now.

Where the written value contains a statistic's per-element value that calls a function (softmax's `exp(x - x_max)`),
the C++ CPU loop keeps those values from the statistic's pass and the functor's `from_kept` reads them: one
exponential an element, not two. (The CUDA kernel computes them again: its row is in registers, and its exponential
costs less than a row of kept values would.)
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..expr import ExprError, Pointwise, parse_pointwise
from ..model import Op
from ..names import DERIVED_NAMES, fresh, locals_for
from .cpp import wrap, wrap_expression
from .layout import expression_comment

# The reductions of csrc/pointwise.h and cuda/pointwise.cuh, by statistic reduction.
_REDUCERS = {"sum": "Sum", "mean": "Mean", "max": "Max", "min": "Min"}


@dataclass(frozen=True)
class RowValue:
    """A row-invariant part of the per-element expressions, computed once a row."""

    name: str
    expr: Pointwise  # over statistics and scalar arguments
    after: int  # the last statistic it reads


@dataclass(frozen=True)
class Slots:
    """The functor's `stat` array: each statistic, and after it the row values that read it last."""

    names: tuple[str, ...]  # each slot's name, in order
    values: tuple[RowValue, ...]
    per_element: dict[str, Pointwise]  # each per-element expression's text: it, reading the row values
    reduced: dict[str, Pointwise]  # each statistic's name: its per-element value, row values taken out of a sum
    finishing: dict[str, Pointwise | None]  # each statistic's name: its value from its total (named as itself)


def slots(op: Op) -> Slots:
    """The statistics and row values of `op`'s functor, and its per-element expressions rewritten to read
    the row values (as they are where the rewrite does not parse: no row values then)."""
    stats = op.body.stat_names
    kinds = {a.name: a.kind for a in op.args} | dict.fromkeys(stats, "tensor")
    scalars = {name for name, kind in kinds.items() if kind in ("float", "int", "bool")}
    exprs = [*(s.reduced for s in op.body.stats), *(w.expr for w in op.body.writes),
             *(c.expr for c in getattr(op.body, "column_sums", ()))]
    taken = {*kinds, *(a.name for a in op.kernel_args)}
    found: dict[str, str] = {}  # a row value's text: its name

    def invariant(node: ast.AST) -> bool:
        functions = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in functions}
        return names <= scalars | set(stats) and bool(names & set(stats))

    def row_value(node: ast.expr) -> ast.Name | None:
        """The name of `node` as a row value, None where it is not a number (a truth value)."""
        text = ast.unparse(node)
        try:
            parse_pointwise(text, kinds)
        except ExprError:
            return None
        if text not in found:
            found[text] = fresh(DERIVED_NAMES["row_value"].format(len(found)), taken)
        return ast.Name(found[text], ast.Load())

    class Hoist(ast.NodeTransformer):
        def visit(self, node: ast.AST) -> ast.AST:
            if isinstance(node, ast.expr) and not isinstance(node, (ast.Name, ast.Constant)) and invariant(node):
                name = row_value(node)
                return ast.copy_location(name, node) if name else self.generic_visit(node)
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and invariant(node.right):
                # x / r with r the same along the row: x times r's reciprocal. The division per element
                # was a fifth of bfloat16 softmax's time on the H200 (docs/performance.md).
                reciprocal = row_value(ast.BinOp(ast.Constant(1.0), ast.Div(), node.right))
                if reciprocal:
                    return ast.copy_location(ast.BinOp(self.visit(node.left), ast.Mult(), reciprocal), node)
            return self.generic_visit(node)

    rewritten = {e.text: ast.unparse(Hoist().visit(ast.parse(e.text.strip(), mode="eval"))) for e in exprs}
    reduced_text, finishing_text = _factored(op, rewritten, {name: text for text, name in found.items()})
    try:
        row_kinds = kinds | dict.fromkeys(found.values(), "tensor")
        per_element = {e.text: parse_pointwise(rewritten[e.text], row_kinds) for e in exprs}
        reduced = {name: parse_pointwise(text, row_kinds) for name, text in reduced_text.items()}
        finishing = {name: text and parse_pointwise(text, kinds) for name, text in finishing_text.items()}
        exprs_of = {name: parse_pointwise(text, kinds) for text, name in found.items()}
    except ExprError:
        return Slots(stats, (), {e.text: e for e in exprs}, {s.name: s.reduced for s in op.body.stats},
                     {s.name: s.outer for s in op.body.stats})
    values = [RowValue(name, e, max(stats.index(n) for n in e.names if n in stats)) for name, e in exprs_of.items()]
    names = [name for k, stat in enumerate(stats) for name in (stat, *(v.name for v in values if v.after == k))]
    return Slots(tuple(names), tuple(values), per_element, reduced, finishing)


def _factored(op: Op, rewritten: dict[str, str], row_values: dict[str, str]) -> tuple[dict, dict]:
    """Each statistic's per-element text with the row values it is a product of taken out (a sum or mean), and
    its finishing text (None: the total itself), which multiplies by their expressions."""
    reduced_text, finishing_text = {}, {}
    for stat in op.body.stats:
        reduced_text[stat.name], factors = _row_factors(rewritten[stat.reduced.text], stat.reduction.kind, row_values)
        outer = stat.name if stat.outer is None else stat.outer.text
        if factors:  # the statistic's own name, in its outer expression, times its row values
            scaled = ast.parse(f"({stat.name} * {' * '.join(f'({row_values[f]})' for f in factors)})", mode="eval").body
            outer = ast.unparse(_Substitute(stat.name, scaled).visit(ast.parse(outer, mode="eval")))
        finishing_text[stat.name] = None if outer == stat.name else outer
    return reduced_text, finishing_text


def _row_factors(text: str, reduction: str, row_values: dict[str, str]) -> tuple[str, list[str]]:
    """A sum's or mean's per-element value `text` without the row values it is a product of, and those row
    values (none for max and min, or where nothing else would remain)."""
    if reduction not in ("sum", "mean"):
        return text, []
    factors: list[ast.expr] = []

    def flatten(node: ast.expr) -> None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            flatten(node.left)
            flatten(node.right)
        else:
            factors.append(node)

    flatten(ast.parse(text.strip(), mode="eval").body)
    taken = [f.id for f in factors if isinstance(f, ast.Name) and f.id in row_values]
    rest = [f for f in factors if not (isinstance(f, ast.Name) and f.id in row_values)]
    if not taken or not rest:
        return text, []
    product = rest[0]
    for factor in rest[1:]:
        product = ast.BinOp(product, ast.Mult(), factor)
    return ast.unparse(product), taken


class _Substitute(ast.NodeTransformer):
    """Every `name` in an expression replaced by `node`."""

    def __init__(self, name: str, node: ast.expr):
        self.name, self.node = name, node

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.node if node.id == self.name else node


@dataclass(frozen=True)
class Kept:
    """A statistic whose per-element values the written expression reuses (lang/cpp_norms.py's docstring)."""

    slot: int  # the statistic's slot
    name: str  # the parameter that reads a kept value
    expr: Pointwise  # the written expression, reading it


def kept(op: Op) -> Kept | None:
    """The first statistic whose per-element value (as its pass computes it) calls a function and appears whole in
    the op's one written expression; None where there is none, more than one output, or column sums."""
    body = op.body
    if len(body.writes) != 1 or getattr(body, "column_sums", ()):
        return None
    layout = slots(op)
    written = ast.parse(per_element(op, body.writes[0].expr).text.strip(), mode="eval")
    parts = {ast.dump(node) for node in ast.walk(written)}
    name = locals_for(op).kept
    for stat in body.stats:
        value = ast.parse(layout.reduced[stat.name].text.strip(), mode="eval").body
        calls = any(isinstance(node, ast.Call) for node in ast.walk(value))
        if not calls or ast.dump(value) not in parts:
            continue
        text = ast.unparse(_Replace(ast.dump(value), name).visit(written))
        kinds = {a.name: a.kind for a in op.args} | dict.fromkeys([*layout.names, name], "tensor")
        try:
            return Kept(layout.names.index(stat.name), name, parse_pointwise(text, kinds))
        except ExprError:
            return None
    return None


class _Replace(ast.NodeTransformer):
    """Every subexpression whose ast.dump is `dumped` replaced by the name `name`."""

    def __init__(self, dumped: str, name: str):
        self.dumped, self.name = dumped, name

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.expr) and ast.dump(node) == self.dumped:
            return ast.copy_location(ast.Name(self.name, ast.Load()), node)
        return self.generic_visit(node)


def per_element(op: Op, expr: Pointwise) -> Pointwise:
    """`expr` (a statistic's reduced value or a written one) as the functor computes it: reading the row values."""
    return slots(op).per_element.get(expr.text, expr)


def stat_parameter(op: Op, read: set[str]) -> str:
    """The statistics parameter, unnamed where none of `read` is a statistic or row value."""
    return f"const acc_t* {locals_for(op).stat}" if read & set(slots(op).names) else "const acc_t*"


def stat_bindings(op: Op, read: set[str]) -> list[str]:
    """`const acc_t rstd = stat[0];` for each statistic or row value in `read`."""
    return [f"const acc_t {name} = {locals_for(op).stat}[{k}];" for k, name in enumerate(slots(op).names) if name in read]


def _inputs(op: Op, expr: Pointwise) -> list[str]:
    """Every input as a parameter, unnamed (its name a comment) where `expr` does not read it."""
    return [f"acc_t {a.name}" if a.name in expr.names else f"acc_t /*{a.name}*/" for a in op.read_args]


def kept_inputs(op: Op) -> list[str]:
    """norms_kernel's mask of the inputs a statistic reads, which it keeps in registers between passes;
    the others (a weight, a bias) only the last pass reads, from memory: held too, they took registers
    enough to halve the blocks an SM runs (layer_norm's float32 kernel 145 a thread, ptxas -v)."""
    read = {name for stat in getattr(op.body, "stats", ()) for name in stat.reduced.names}
    bits = "".join("1" if a.name in read else "0" for a in reversed(op.read_args)) or "0"
    kept = ", ".join(a.name for a in op.read_args if a.name in read) or "none"
    return [f"static constexpr unsigned kKept = 0b{bits};  // kept in registers: {kept}"]


def passes(op: Op) -> list[tuple[int, ...]]:
    """The slots in the order the CUDA kernel computes them: each reduction with every other whose inputs
    are ready (one pass over the row, one round of the block's barriers for them all) and whose finishing
    reads only what is done or finished before it in the pass, each row value alone as soon as what it
    reads is. rms_norm's backward reduces mean(x * x) and mean(grad * weight * x) together, where in slot
    order they took two passes."""
    layout = slots(op)
    values = {v.name: v for v in layout.values}

    def slots_of(names) -> set[int]:
        return {layout.names.index(n) for n in names if n in layout.names}

    reduces = {k: slots_of(values[n].expr.names if n in values else layout.reduced[n].names)
               for k, n in enumerate(layout.names)}
    finishes = {k: set() if n in values or layout.finishing[n] is None else slots_of(layout.finishing[n].names) - {k}
                for k, n in enumerate(layout.names)}
    done: set[int] = set()
    order: list[tuple[int, ...]] = []
    while len(done) < len(layout.names):
        ready = [k for k in range(len(layout.names)) if k not in done and reduces[k] <= done]
        row_values = [k for k in ready if layout.names[k] in values]
        if row_values:  # a row value first: a reduction may read it
            group = [row_values[0]]
        else:
            group = []
            for k in ready:  # in slot order: a statistic finished in the pass is finished before the next
                if layout.names[k] not in values and finishes[k] <= done | set(group):
                    group.append(k)
        order.append(tuple(group))
        done.update(group)
    return order


def methods(op: Op, device: str) -> list[str]:
    """The lines of the functor's statistics: Reductions, then reduced and finished per statistic, and
    finished per row value."""
    prefix = "__device__ " if device == "cuda" else ""
    layout = slots(op)
    stats = {s.name: s for s in op.body.stats}
    values = {v.name: v for v in layout.values}
    reductions = [f"{_REDUCERS[stats[n].reduction.kind]}<acc_t>" if n in stats else "RowValue" for n in layout.names]
    lines = [wrap("using Reductions = std::tuple<", reductions, ">;", after=2)]
    if device == "cuda":
        lines += kept_inputs(op)
        order = passes(op)
        if any(len(group) > 1 for group in order):
            together = [f"Together<{', '.join(map(str, group))}>" for group in order]
            lines.append("// statistics reduced in one pass over the row, none reading another")
            lines.append(wrap("using Passes = std::tuple<", together, ">;", after=2))
    sums = op.body.column_sums
    if sums:
        likes = " and ".join(f"{c.like}'s" for c in sums)
        which = "value" if len(sums) == 1 else f"{len(sums)} values"
        lines += [f"// operator()'s last {which}: {likes} gradient, which the loop sums over the rows",
                  f"static constexpr int column_sums = {len(sums)};"]
    for k, name in enumerate(layout.names):
        if name in values:  # computed once a row, from the statistics before it
            value = values[name].expr
            read = set(value.names)
            lines.append(f"// {name} = {expression_comment(value.text)}: once a row")
            lines.append(wrap(f"{prefix}acc_t finished(", [f"Stat<{k}>", stat_parameter(op, read)], ") const {", after=2))
            lines += [f"  {b}" for b in stat_bindings(op, read)]
            lines.append(f"  return {wrap_expression(value.to_functor(device), 11, 6)};")
            lines.append("}")
            continue
        stat = stats[name]
        reduced, outer = layout.reduced[name], layout.finishing[name]
        lines.append(f"// {stat.name} = {expression_comment(stat.text)}")
        if reduced.text != per_element(op, stat.reduced).text:
            lines.append(f"// reduced as {expression_comment(reduced.text)}, finished as {expression_comment(outer.text)}")
        read = set(reduced.names)
        parameters = [f"Stat<{k}>", stat_parameter(op, read), *_inputs(op, reduced)]
        lines.append(wrap(f"{prefix}acc_t reduced(", parameters, ") const {", after=2))
        lines += [f"  {b}" for b in stat_bindings(op, read)]
        lines.append(f"  return {wrap_expression(reduced.to_functor(device), 11, 6)};")
        lines.append("}")
        # Its own name stands for the reduced total (the parameter) in the expression around it.
        read = set() if outer is None else set(outer.names) - {stat.name}
        parameters = [f"Stat<{k}>", stat_parameter(op, read), f"acc_t {stat.name}"]
        lines.append(wrap(f"{prefix}acc_t finished(", parameters, ") const {", after=2))
        lines += [f"  {b}" for b in stat_bindings(op, read)]
        value = stat.name if outer is None else outer.to_functor(device)
        lines.append(f"  return {wrap_expression(value, 11, 6)};")
        lines.append("}")
    if device == "cpu":
        lines += _from_kept(op)
    return [line.replace("\n", "\n  ") for line in lines]


def _from_kept(op: Op) -> list[str]:
    """`kept_stat` and `from_kept`: the written value from the kept per-element value of a statistic."""
    reuse = kept(op)
    if reuse is None:
        return []
    name = slots(op).names[reuse.slot]
    read = set(reuse.expr.names)
    parameters = [stat_parameter(op, read), f"acc_t {reuse.name}", *_inputs(op, reuse.expr)]
    return [
        f"// {name}'s per-element values, kept by the loop from {name}'s pass: computed once an element",
        f"static constexpr int kept_stat = {reuse.slot};",
        wrap("Values<acc_t, 1> from_kept(", parameters, ") const {", after=2),
        *(f"  {b}" for b in stat_bindings(op, read)),
        f"  return {{{wrap_expression(reuse.expr.to_functor('cpu'), 11, 6)}}};",
        "}",
    ]
