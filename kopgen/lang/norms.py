"""This module translates a row normalisation (`normalize`, model_kinds.RowNormalization) into its
PyTorch reference and its Triton kernel and launcher: the pieces its own templates print
(kernels/_normalization.py.j2, _support/norms.py.j2).

The kernel reads rows of the broadcast shape through each tensor's strides. Where a row fits in one
block (ONE_PASS) it is read once: each statistic is reduced from the loaded block, then `compute` is
written. Longer rows take a loop over their columns per statistic, then one that writes.
"""

from __future__ import annotations

import re

from ..model import Op
from ..model_kinds import RowStat
from ..names import locals_for
from . import python, triton
from .layout import wrap

# What a masked-out element holds in each reduction: its identity.
_IDENTITY = {"sum": "0.0", "mean": "0.0", "max": 'float("-inf")', "min": 'float("inf")'}
# tl.reduce's combine function per reduction: Triton's interpreter runs these in-process (it cannot
# call the @triton.jit tl.sum, tl.max themselves).
_COMBINE = {"sum": "tl.standard._sum_combine", "mean": "tl.standard._sum_combine",
            "max": "tl.standard._elementwise_max", "min": "tl.standard._elementwise_min"}


def _substitute(text: str, name: str, value: str) -> str:
    """`text` with the statistic's name (not an attribute, as in torch.exp) replaced by `value`, an operand."""
    return re.sub(rf"(?<![.\w]){re.escape(name)}\b", lambda _: value, text)


# -- the reference


def reference_return(op: Op) -> str:
    """The statistics, one line each (rows of one value, kept as a last dimension of 1), then `compute`."""
    dtype = locals_for(op).dtype
    lines = []
    for stat in op.body.stats:
        reduced = f"row_{stat.reduction.kind}({stat.reduced.to_torch()}).unsqueeze(-1)"
        value = reduced if stat.outer is None else _substitute(stat.outer.to_torch(), stat.name, reduced)
        lines.append(python.layout.assign(stat.name, value, 4))
    values = [f"{python.layout.operand(w.expr.to_torch())}.to({dtype})" for w in op.writes]
    returned = python.layout.assign("return", values[0], 4) if len(values) == 1 else \
        wrap("return (", values, ")", 4, explode=True)
    return "\n    ".join([*lines, returned])


# -- the Triton kernel


def loads(op: Op, names: set[str] | None, indent: int) -> list[str]:
    """The Tensors the kernel reads (those of `names` only, where given), loaded into the compute dtype."""
    lines = triton.loads(op, indent)
    if names is None:
        return lines
    # triton.loads gives one line per plain Tensor and four per optional one, in read_args' order.
    kept, i = [], 0
    for arg in op.read_args:
        size = 4 if arg.is_optional else 1
        if arg.name in names:
            kept += lines[i : i + size]
        i += size
    return kept


def one_pass_stats(op: Op, indent: int) -> list[str]:
    """Each statistic reduced from the loaded block: a column of one value per row."""
    local, pad = locals_for(op), " " * indent
    lines = []
    for stat in op.body.stats:
        values = f"{python.layout.operand(stat.reduced.to_triton())}.to({local.COMPUTE_DTYPE})"
        masked = f"tl.where({local.mask}, {values}, {_IDENTITY[stat.reduction.kind]})"
        lines.append(f"{pad}# {stat.name} = {stat.text.strip()}")
        lines.append(pad + wrap(f"{stat.name} = tl.reduce(", [masked, "1", _COMBINE[stat.reduction.kind]],
                                ")[:, None]", indent))
        lines += _finish(op, stat, indent)
    return lines


def _finish(op: Op, stat: RowStat, indent: int) -> list[str]:
    """After the reduction: a mean divided by the row length, then the expression around the reduction."""
    local, pad = locals_for(op), " " * indent
    lines = []
    if stat.reduction.is_mean:  # an empty row gives 0 / 0 = nan, as torch.mean
        lines.append(f"{pad}{stat.name} = {stat.name} / {local.n_cols}")
    if stat.outer is not None:
        # Cast: under torch.compile, Inductor passes float scalars as float64, which would widen it.
        value = f"{python.layout.operand(stat.outer.to_triton())}.to({local.COMPUTE_DTYPE})"
        lines.append(pad + python.layout.assign(stat.name, value, indent))
    return lines


def looped(op: Op, indent: int) -> list[str]:
    """Rows longer than a block: a loop over the columns per statistic, then one that writes."""
    local, pad = locals_for(op), " " * indent
    lines = []
    for stat in op.body.stats:
        values = f"{python.layout.operand(stat.reduced.to_triton())}.to({local.COMPUTE_DTYPE})"
        total = local.total
        combined = (f"{total} + {local.values}" if stat.reduction.kind in ("sum", "mean")
                    else f"tl.{stat.reduction.kind}imum({total}, {local.values})")
        lines.append(f"{pad}# {stat.name} = {stat.text.strip()}")
        lines.append(f"{pad}{total} = tl.full(({local.BLOCK_ROWS}, {local.BLOCK_COLS}), "
                     f"{_IDENTITY[stat.reduction.kind]}, dtype={local.COMPUTE_DTYPE})")
        lines += _column_loop(op, set(stat.reduced.names), indent)
        lines.append(f"{pad}    " + python.layout.assign(local.values, values, indent + 4))
        lines.append(f"{pad}    {total} = tl.where({local.mask}, {combined}, {total})")
        lines.append(pad + wrap(f"{stat.name} = tl.reduce(", [total, "1", _COMBINE[stat.reduction.kind]],
                                ")[:, None]", indent))
        lines += _finish(op, stat, indent)
    lines += _column_loop(op, {n for w in op.writes for n in (*w.expr.names, *w.expr.tested)}, indent)
    return lines + [f"{pad}    {line}" for line in store(op, indent + 4)]


def _column_loop(op: Op, names: set[str], indent: int) -> list[str]:
    """`for start in ...:` over a row's columns, BLOCK_COLS at a time, loading the Tensors of `names`."""
    local, pad = locals_for(op), " " * indent
    return [f"{pad}for {local.start} in range(0, {triton.loop_end(op)}, {local.BLOCK_COLS}):",
            f"{pad}    {local.cols} = {local.start} + tl.arange(0, {local.BLOCK_COLS}).to(tl.int64)",
            f"{pad}    {local.mask} = {local.row_mask}[:, None] & ({local.cols} < {local.n_cols})[None, :]",
            *loads(op, names, indent + 4)]


def store(op: Op, indent: int) -> list[str]:
    """`compute` over the block, stored in each written tensor's dtype (lines without their indent)."""
    local = locals_for(op)
    lines = []
    for write in op.writes:
        name, pointer = write.name, local.pointer(write.name)
        offsets = f"{local.rows}[:, None] * {local.derived('row_stride', name)} + {local.cols}[None, :] * " \
                  f"{local.derived('col_stride', name)}"
        if write.arg:  # a mutated argument: its name holds the loaded value, which later writes may read
            stored = f"{python.layout.operand(write.expr.to_triton())}.to({pointer}.dtype.element_ty)"
        else:
            lines.append(python.layout.assign(name, write.expr.to_triton(), indent))
            stored = f"{name}.to({pointer}.dtype.element_ty)"
        lines.append(wrap("tl.store(", [f"{pointer} + {offsets}", stored, f"mask={local.mask}"], ")", indent))
    return lines


# -- the launcher


def row_layout(op: Op) -> list[str]:
    """`n_rows, n_cols, strides`: the tensors the kernel reads and writes, through their strides as rows of
    the written shape, or the inputs copied dense where their leading dimensions do not merge into rows."""
    local = locals_for(op)
    arguments = [f"{triton.first_written(op)}.shape", *triton._arguments(op)[: len(op.kernel_tensors)]]
    return [*triton._layout(op, local.layout, "row_layout", arguments, "Leading dimensions that do not merge into one"),
            f"    {local.n_rows}, {local.n_cols}, {local.strides} = {local.layout}"]


def blocks(op: Op) -> str:
    """`block_rows, block_cols, one_pass, num_warps = ...`: the block for the row length."""
    local = locals_for(op)
    target = f"{local.block_rows}, {local.block_cols}, {local.one_pass}, {local.num_warps}"
    call = f"_support.norm_blocks({local.n_rows}, {local.n_cols}, {triton.first_written(op)}.element_size())"
    return python.layout.assign(target, call, 4)


def constants(op: Op) -> list[tuple[str, str]]:
    """The kernel's block, the row length where the interpreter needs it as a constexpr, one pass or
    not, and the warps that run it."""
    local = locals_for(op)
    return [*triton.row_constants(op)[:3], ("ONE_PASS", local.one_pass), ("num_warps", local.num_warps)]
