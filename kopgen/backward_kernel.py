"""Backward kernels: a pointwise op's `backward` formulas, where all are in the pointwise language,
made into an op of the namespace, `<op>_backward`, that computes every input's gradient in one launch.

The op is a PointwiseCompute op like any other, so every backend, its fake kernel, torch.compile and
export come from the existing machinery. Its schema: the output's gradient, the Tensors and result the
formulas read, the scalars they read -> one Tensor per differentiable input. The forward op's formulas
are then rewritten to index its call (`muladd_backward(grad, a, b)[0]`), which backward runs once
(lang/autograd.py's shared calls) and sums back to each input's shape (sum_to_size); the formulas as
written stay beside them (`Gradient.eager`), for `kopgen check` and for a backward that must itself be
differentiable (create_graph), which runs them as torch ops (lang/autograd.py, lang/cpp_autograd.py).

Two kinds get a kernel of their own shape: a `split` op whose gradient is `torch.cat([A, B], -1)`
(SplitGradient: one launch writing both halves of one Tensor, on every route; the C++ and CUDA kernels
run by rows, lang/cpp.py), and, on the Python routes, a `reduce` op whose formulas read grad and result
as columns (RowGradient: grad.unsqueeze(-1) read with stride 0).

A `normalize` op's input gradient is itself a row normalisation (`_norm_kernel`): its
statistics are the row reductions of the formula (`(E).mean(-1, keepdim=True)`, `.sum(...)`, E
pointwise), its `compute` the formula with each replaced by its statistic's name; the statistics the
forward saved (rstd, mu: a float32 value per row) are inputs of the kernel, read with a column stride
of 0. The gradients of the inputs read by all rows (a weight [N]) are computed in the same pass:
pointwise formulas, which may read row reductions of their own (statistics of the kernel too), summed
over the rows (model_kinds.ColumnSum): on Triton each program stores its partial row in float32, which
the launcher sums; the C++ and CUDA norms loops likewise (csrc/pointwise.h, cuda/pointwise.cuh). A
Tensor? input's (an optional bias's) stays a formula.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass

from .backward import plan_backward
from .expr import ExprError, FormulaContext, parse_formula, parse_pointwise
from .expr.emitters import UNARY_FUNCS
from .model import Arg, Gradient, Op, PointwiseCompute, Reduction, RowReduction, Write
from .model_kinds import ColumnSum, RowNormalization, RowStat
from .names import MODULE_NAMES, PYTHON_LOCALS, fresh, output_names
from .schema import parse_schema
from .split import GatedSplit, SplitGradient

# torch functions a formula may call that are the pointwise language's own (torch.exp(x) is exp(x)).
_POINTWISE_TORCH = frozenset((*UNARY_FUNCS, "minimum", "maximum", "pow", "where"))
_TORCH_MODULES = ("torch", "torch.nn.functional")  # torch.nn.functional.silu(x) is silu(x) too
_MAX_NAME = 64  # names.py's limit on an op name


@dataclass(frozen=True)
class RowGradient(PointwiseCompute):
    """A row reduction's backward kernel: pointwise over the op's inputs and the per-row `grad` and
    `result`, which its launchers, fake kernel and reference read as columns (unsqueeze(-1)), so that
    they broadcast along each row in the kernel (stride 0), never expanded in memory."""

    per_row: tuple[str, ...] = ("grad",)  # the arguments of one value per row


def with_backward_kernels(ops: list[Op], namespace: str) -> list[Op]:
    """The ops, each op whose formulas are all pointwise followed by its `<op>_backward` op, and its
    formulas calling that op."""
    taken = {op.name.lower() for op in ops}
    result = []
    for op in ops:
        kernel = backward_kernel(op, taken)
        if kernel is None:
            result.append(op)
            continue
        taken.add(kernel.name.lower())
        result += [_calling(op, kernel, namespace, {o.name for o in ops} | {kernel.name}), kernel]
    return result


def pointwise_formula(text: str, kinds: dict[str, str]):
    """A formula as a pointwise expression (torch.<f> read as the language's f), or None where it is not one."""
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        func = node.func if isinstance(node, ast.Call) else None
        if (isinstance(func, ast.Attribute) and ast.unparse(func.value) in _TORCH_MODULES
                and func.attr in _POINTWISE_TORCH):
            node.func = ast.Name(func.attr, ast.Load())
    try:
        return parse_pointwise(ast.unparse(tree), kinds)
    except ExprError:
        return None


def why_eager(op: Op) -> str | None:
    """Why the op's backward stays eager formulas (None: it can get a backward kernel)."""
    row = isinstance(op.body, RowReduction)
    norm = isinstance(op.body, RowNormalization)
    if not (isinstance(op.body, PointwiseCompute) or row or norm) or op.is_mutating:
        return "only functional `compute`, `reduce` and `normalize` ops get one"
    if row and op.is_compiled:
        return "a row reduction's backward kernel is generated for the Python routes (Triton, python) only"
    if len(op.output_names) != 1:
        return "it has several outputs, and grads[i] is not in the pointwise language"
    if {"grad", "result"} & {a.name for a in op.args}:
        return "it takes an argument named grad or result"
    for gradient in op.backward.gradients:
        if gradient.formula is not None and gradient.formula.own_ops_called:
            return f"the formula of {gradient.arg.name} calls an op of the namespace"
    return None


def backward_kernel(op: Op, taken: set[str]) -> Op | None:
    """The op `<op>_backward` computing every gradient of `op`, or None where a formula is not pointwise."""
    name = f"{op.name}_backward"
    if not op.has_gradients or why_eager(op) or name.lower() in taken or len(name) > _MAX_NAME:
        return None
    if isinstance(op.body, GatedSplit):
        return _split_kernel(op, name)
    if isinstance(op.body, RowNormalization):
        return _norm_kernel(op, name)
    gradients = _in_kernel(op)
    row = isinstance(op.body, RowReduction)
    texts = [_per_row(g.formula.text) for g in gradients] if row else [g.formula.text for g in gradients]
    if None in texts:
        return None
    exprs = _pointwise(op, gradients, texts)
    if not exprs or any(e is None or "grad" not in e.names for e in exprs):
        return None  # a formula outside the language (or one that ignores grad): eager
    if {a.name for a in op.args if a.is_optional} & {n for e in exprs for n in e.names}:
        return None  # a Tensor? read by a gradient: its formula tests it (`if w is not None`), outside the language
    # Gradients of one expression (x and a broadcast bias of relu(x + bias)) share an output.
    exprs = list({e.to_torch(): e for e in exprs}.values())
    used = {n for e in exprs for n in e.names}
    tensors = {a.name for a in op.args if a.is_tensor}
    if row and not all(tensors & set(e.names) for e in exprs):
        return None  # grad broadcast alone (a row sum's): the formula's expand is a view, which no kernel beats
    order = ["grad", *(a.name for a in op.args if a.is_tensor), "result", *(a.name for a in op.args if not a.is_tensor)]
    types = {"grad": "Tensor", "result": "Tensor", **{a.name: str(a.schema.type) for a in op.args}}
    params = [n for n in order if n in used]
    returns = "Tensor" if len(exprs) == 1 else f"({', '.join(['Tensor'] * len(exprs))})"
    schema = parse_schema(f"{name}({', '.join(f'{types[n]} {n}' for n in params)}) -> {returns}")
    args = tuple(Arg(a, i) for i, a in enumerate(schema.arguments))
    outputs = output_names(params, len(exprs))
    lead_shape = op.shapes[0][op.lead.name] if op.shapes else ()
    row_shape = lead_shape[:-1] if row else lead_shape  # a row reduction's grad and result
    shapes = tuple({n: shape.get(n, row_shape if n in ("grad", "result") else lead_shape)
                    for n in params if types[n] == "Tensor"} for shape in op.shapes)
    readers = ", ".join(g.arg.name for g in gradients)
    writes = tuple(map(Write, exprs, outputs))
    if row:
        body = RowGradient(writes, tuple(n for n in ("grad", "result") if n in params))
    else:
        body = PointwiseCompute(writes)
    return dataclasses.replace(
        op, name=name, schema=schema, args=args, body=body,
        doc=f"The gradients of {readers} for {op.qualname}, in one pass.", shapes=shapes, backward=None,
        sample_args=(), stem="", module_names=(), backward_of=op.name,
    )


def _split_kernel(op: Op, name: str) -> Op | None:
    """A split op's: the gradient of its split argument, written `torch.cat([A, B], -1)` with A and B
    pointwise over grad and the halves, as one kernel writing A and B into the halves of one Tensor."""
    body = op.body
    gradients = _in_kernel(op)
    if [g.arg.name for g in gradients] != [body.source.name] or any(a.is_optional for a in op.args):
        return None  # another input's gradient too: the formulas stay
    parts = cat_halves(gradients[0].formula.text)
    kinds = {"grad": "tensor", "result": "tensor", **{a.name: a.kind for a in op.args},
             **{h.name: "tensor" for h in body.halves}}
    exprs = [pointwise_formula(text, kinds) for text in parts or ()]
    if not exprs or any(e is None for e in exprs) or not any("grad" in e.names for e in exprs):
        return None
    halves = {h.name: body.source.name for h in body.halves}
    used = {halves.get(n, n) for e in exprs for n in e.names}
    if "grad" in halves or "result" in halves:
        return None
    order = ["grad", *(a.name for a in op.args if a.is_tensor), "result", *(a.name for a in op.args if not a.is_tensor)]
    types = {"grad": "Tensor", "result": "Tensor", **{a.name: str(a.schema.type) for a in op.args}}
    params = [n for n in order if n in used | {body.source.name}]
    schema = parse_schema(f"{name}({', '.join(f'{types[n]} {n}' for n in params)}) -> Tensor")
    args = tuple(Arg(a, i) for i, a in enumerate(schema.arguments))
    source = next(a for a in args if a.name == body.source.name)
    new_halves = tuple(Arg(dataclasses.replace(source.schema, name=h.name), source.index) for h in body.halves)
    taken = set(params) | set(halves)
    writes = []
    for expr, half in zip(exprs, body.halves, strict=True):
        writes.append(Write(expr, fresh(f"grad_{half.name}", taken)))
        taken.add(writes[-1].name)
    (joined,) = output_names(taken, 1)
    shapes = tuple({n: _half_width(shape[op.lead.name]) if n == "grad" else shape.get(n, shape[op.lead.name])
                    for n in params if types[n] == "Tensor"} for shape in op.shapes)
    return dataclasses.replace(
        op, name=name, schema=schema, args=args, body=SplitGradient(tuple(writes), source, new_halves, joined),
        doc=f"The gradient of {source.name} for {op.qualname}: both halves in one pass.", shapes=shapes,
        backward=None, sample_args=(), stem="", module_names=(), backward_of=op.name,
    )


def _norm_kernel(op: Op, name: str) -> Op | None:
    """A normalisation's: the gradient of its lead input, a row normalisation over grad, the inputs,
    result and the saved statistics, whose own statistics are the formula's row reductions; and in the
    same pass the gradients of the inputs read by all rows (a weight [N]: column_sums), each summed
    over the rows."""
    gradient = op.backward.gradient_for(op.lead)
    if gradient is None or gradient.formula is None:
        return None
    saved = op.body.stat_names
    kinds = {"grad": "tensor", **{a.name: a.kind for a in op.args}, "result": "tensor", **dict.fromkeys(saved, "tensor")}
    taken = {*kinds, *PYTHON_LOCALS, *MODULE_NAMES}
    split = row_reductions(gradient.formula.text, kinds, taken)
    if split is None:
        return None
    compute, stats = split
    if not stats or "grad" not in {n for e in (compute, *(s.reduced for s in stats)) for n in e.names}:
        return None  # no row reduction (a pointwise formula) or no grad: the formula stays
    optional = {a.name for a in op.args if a.is_optional}
    if optional & {n for e in (compute, *(s.reduced for s in stats)) for n in e.names}:
        return None  # a Tensor? read: its formula tests it (`if w is not None`), outside the language
    columns, stats = _column_gradients(op, gradient.formula.text, kinds, taken, optional)
    used = {n for e in (compute, *(s.reduced for s in stats), *(e for _, e in columns)) for n in e.names}
    order = ["grad", *(a.name for a in op.args if a.is_tensor), "result", *saved,
             *(a.name for a in op.args if not a.is_tensor)]
    types = {"grad": "Tensor", "result": "Tensor", **dict.fromkeys(saved, "Tensor"),
             **{a.name: str(a.schema.type) for a in op.args}}
    params = [n for n in order if n in used | {arg.name for arg, _ in columns}]
    returns = "Tensor" if not columns else f"({', '.join(['Tensor'] * (1 + len(columns)))})"
    schema = parse_schema(f"{name}({', '.join(f'{types[n]} {n}' for n in params)}) -> {returns}")
    args = tuple(Arg(a, i) for i, a in enumerate(schema.arguments))
    out, *sums = output_names([*params, *(s.name for s in stats)], 1 + len(columns))
    lead_shape = op.shapes[0][op.lead.name] if op.shapes else ()
    stat_shape = (*lead_shape[:-1], 1)  # a value per row, kept as a last dimension of 1 (norm_stat)
    shapes = tuple({n: shape.get(n, stat_shape if n in saved else lead_shape) for n in params if types[n] == "Tensor"}
                   for shape in op.shapes)
    column_sums = tuple(ColumnSum(total, expr, arg.name) for total, (arg, expr) in zip(sums, columns, strict=True))
    body = RowNormalization(stats, (Write(compute, out),), row_stats=tuple(n for n in saved if n in params),
                            column_sums=column_sums)
    doc = f"The gradient of {op.lead.name} for {op.qualname}: its row reductions, then the formula, in one pass."
    if columns:
        summed = " and ".join(arg.name for arg, _ in columns)
        doc = f"The gradients of {op.lead.name} and {summed} (summed over the rows) for {op.qualname}, in one pass."
    return dataclasses.replace(
        op, name=name, schema=schema, args=args, body=body,
        doc=doc,
        shapes=shapes, backward=None, sample_args=(), stem="", module_names=(), backward_of=op.name,
    )


def _column_gradients(op: Op, lead: str, kinds: dict[str, str], taken: set[str],
                      optional: set[str]) -> tuple[list[tuple[Arg, object]], tuple[RowStat, ...]]:
    """The inputs besides the lead one whose gradients a normalisation's backward kernel sums over the
    rows: a Tensor (not a Tensor?, whose gradient is only wanted where it is given: its formula stays)
    read by all rows (in every spec'd shape, size 1 in each leading dimension: a weight [N]), whose
    formula is pointwise over grad, the inputs, result and the saved statistics, and on the compiled
    routes row reductions too (their formulas recompute the statistics: `torch.rsqrt((x * x).mean(-1,
    keepdim=True) + eps)`), which become statistics of the kernel beside those of `lead`'s formula,
    shared where they are the same. Returns them, and every statistic of the kernel (the lead's first)."""
    found, texts = [], [lead]
    stats = row_reductions_of(texts, kinds, taken)[1]
    for gradient in op.backward.gradients:
        arg = gradient.arg
        if arg == op.lead or not arg.is_tensor or arg.is_optional or gradient.formula is None:
            continue
        if not all(all(size == 1 for size in shape[arg.name][:-1]) for shape in op.shapes if arg.name in shape):
            continue  # an input of its own rows: its gradient is no column sum
        if not op.is_compiled and pointwise_formula(gradient.formula.text, kinds) is None:
            continue  # where the input has rows of its own, the Triton launcher runs it in torch: no kernel statistic
        split = row_reductions_of([*texts, gradient.formula.text], kinds, taken)
        if split is None:
            continue
        expr, names = split[0][-1], {n for e in (split[0][-1], *(s.reduced for s in split[1])) for n in e.names}
        if optional & names or "grad" not in expr.names:
            continue
        texts.append(gradient.formula.text)
        found.append((arg, expr))
        stats = split[1]
    return found, stats


def row_reductions(text: str, kinds: dict[str, str], taken: set[str]) -> tuple | None:
    """A formula as a row normalisation: (compute, statistics), each `(E).mean(-1, keepdim=True)` or
    `.sum(-1, keepdim=True)` (E pointwise) a statistic named `mean0`, `sum1`, ... that compute reads;
    None where the formula, or an E, is not in the pointwise language. A reduction inside E is a
    statistic of its own, computed before E's, which reads it by name (layer_norm's variance, recomputed
    as `((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True)`)."""
    split = row_reductions_of([text], kinds, taken)
    return None if split is None else (split[0][0], split[1])


def row_reductions_of(texts: list[str], kinds: dict[str, str], taken: set[str]) -> tuple | None:
    """Several formulas as row_reductions splits each: ([compute of each], statistics), a reduction met
    in several formulas one statistic; None where any formula, or an E, is not in the pointwise language."""
    found: dict[tuple[str, str], str] = {}  # (reduction, E) -> the statistic's name, one per distinct pair

    class Reductions(ast.NodeTransformer):
        def visit_Call(self, node):
            kind = row_reduction(node)
            if kind is None:
                return self.generic_visit(node)
            self.generic_visit(node)  # the reductions inside E first: statistics before E's
            key = (kind, ast.unparse(node.func.value))
            if key not in found:
                found[key] = fresh(f"{kind}{len(found)}", taken | set(found.values()))
            return ast.Name(found[key], ast.Load())

    trees = [Reductions().visit(ast.parse(text, mode="eval")) for text in texts]
    computes = [pointwise_formula(ast.unparse(tree), {**kinds, **dict.fromkeys(found.values(), "tensor")})
                for tree in trees]
    stats = []
    for (kind, reduced_text), stat in found.items():
        earlier = {s.name: "tensor" for s in stats}
        reduced = pointwise_formula(reduced_text, {**kinds, **earlier})
        if reduced is None:
            return None
        stats.append(RowStat(stat, Reduction(kind), reduced, None, f"{kind}({reduced_text})"))
    if None in computes or any(e.tested for e in (*computes, *(s.reduced for s in stats))):
        return None
    return computes, tuple(stats)


def row_reduction(node: ast.Call) -> str | None:
    """`sum` or `mean` where the call is `E.sum(-1, keepdim=True)` (or dim=-1), else None."""
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr in ("sum", "mean")):
        return None
    dims = [*(ast.unparse(a) for a in node.args), *(ast.unparse(k.value) for k in node.keywords if k.arg == "dim")]
    keep = [ast.unparse(k.value) for k in node.keywords if k.arg == "keepdim"]
    if dims != ["-1"] or keep != ["True"] or len(node.args) + len(node.keywords) != 2:
        return None
    return func.attr


def _half_width(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (*shape[:-1], shape[-1] // 2) if shape else shape


def cat_halves(text: str) -> tuple[str, str] | None:
    """`torch.cat([A, B], -1)` (or dim=-1) as its two parts' text, else None."""
    call = ast.parse(text, mode="eval").body
    if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "torch.cat" and call.args
            and isinstance(call.args[0], ast.List) and len(call.args[0].elts) == 2):
        return None
    dims = [*call.args[1:], *(k.value for k in call.keywords if k.arg == "dim")]
    if len(dims) != 1 or len(call.args) + len(call.keywords) != 2 or ast.unparse(dims[0]) != "-1":
        return None
    first, second = call.args[0].elts
    return ast.unparse(first), ast.unparse(second)


def _pointwise(op: Op, gradients: list[Gradient], texts: list[str] | None = None) -> list:
    kinds = {"grad": "tensor", **{a.name: a.kind for a in op.args}, "result": "tensor"}
    return [pointwise_formula(text, kinds) for text in texts or [g.formula.text for g in gradients]]


def _per_row(text: str) -> str | None:
    """A row reduction's formula with each `grad.unsqueeze(-1)` and `result.unsqueeze(-1)` read as `grad`
    and `result` (the kernel broadcasts them along the row); None where grad or result is read otherwise
    (a row's value beside the row's elements)."""
    tree = ast.parse(text, mode="eval")
    per_row, columns = {"grad", "result"}, set()

    class Columns(ast.NodeTransformer):
        def visit_Call(self, node):
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "unsqueeze" and isinstance(func.value, ast.Name)
                    and func.value.id in per_row and [ast.unparse(a) for a in node.args] == ["-1"]):
                columns.add(id(func.value))
                return func.value
            return self.generic_visit(node)

    tree = Columns().visit(tree)
    if any(isinstance(n, ast.Name) and n.id in per_row and id(n) not in columns for n in ast.walk(tree)):
        return None  # a row's value read without its column: not one value per element
    return ast.unparse(tree)


def _in_kernel(op: Op) -> list[Gradient]:
    """The gradients the kernel computes: a gradient that is grad itself costs no kernel as a formula
    (sum_to_size returns grad), so it stays one."""
    return [g for g in op.backward.gradients if g.formula is not None and g.formula.text.strip() != "grad"]


def _calling(op: Op, kernel: Op, namespace: str, own_ops: set[str]) -> Op:
    """`op` with each formula indexing a call of its backward kernel; the formulas as written kept as `eager`."""
    context = FormulaContext(arg_kinds={a.name: a.kind for a in op.args}, num_outputs=1, namespace=namespace,
                             own_ops=frozenset(own_ops), own_op_returns={kernel.name: len(kernel.schema.returns)})
    call = f"{kernel.name}({', '.join(a.name for a in kernel.args)})"
    if isinstance(kernel.body, SplitGradient):  # one gradient, the split argument's: the call is it
        gradients = [Gradient(g.arg, parse_formula(call, context), eager=g.formula) if g.arg == op.body.source else g
                     for g in op.backward.gradients]
        return dataclasses.replace(op, backward=plan_backward(tuple(gradients), op.args, num_outputs=1))
    if isinstance(kernel.body, RowNormalization):  # the lead input's gradient, then the column sums' ones
        stats = op.body.stat_names
        context = dataclasses.replace(context, arg_kinds={**context.arg_kinds, **dict.fromkeys(stats, "tensor")})
        index = {op.lead.name: 0, **{c.like: k for k, c in enumerate(kernel.body.column_sums, 1)}}
        several = len(index) > 1  # one call serves them all (lang/autograd.py's shared calls)
        gradients = [Gradient(g.arg, parse_formula(f"{call}[{index[g.arg.name]}]" if several else call, context),
                              eager=g.formula) if g.arg.name in index else g
                     for g in op.backward.gradients]
        return dataclasses.replace(op, backward=plan_backward(tuple(gradients), op.args, num_outputs=1, stats=stats,
                                                              stat_reads=op.body.reads))
    several = len(kernel.schema.returns) > 1
    outputs = [w.expr.to_torch() for w in kernel.body.writes]
    in_kernel = _in_kernel(op)
    texts = [_per_row(g.formula.text) for g in in_kernel] if isinstance(kernel.body, RowGradient) else None
    exprs = dict(zip((g.arg.name for g in in_kernel), _pointwise(op, in_kernel, texts), strict=True))
    gradients = []
    for gradient in op.backward.gradients:
        if gradient.arg.name not in exprs:
            gradients.append(gradient)
            continue
        k = outputs.index(exprs[gradient.arg.name].to_torch())
        formula = parse_formula(f"{call}[{k}]" if several else call, context)
        gradients.append(Gradient(gradient.arg, formula, eager=gradient.formula))
    # Saved as the new formulas read: every Tensor the kernel reads, where any gradient is wanted.
    return dataclasses.replace(op, backward=plan_backward(tuple(gradients), op.args, num_outputs=1))


def kernel_name(op: Op) -> str | None:
    """The backward kernel `op`'s formulas call (None: they run as torch ops)."""
    gradient = next((g for g in op.backward.gradients if g.eager), None) if op.backward else None
    return gradient.formula.own_ops_called[0] if gradient else None
