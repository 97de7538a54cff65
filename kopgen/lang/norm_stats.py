"""This module writes a row normalisation's statistics in its Triton kernel (lang/norms.py writes the rest):
each reduced from a block of whole rows (one pass), or accumulated over a long row's columns in a loop
(looped), then finished and saved for backward.

In one pass each statistic is reduced alone from the loaded block. A long row's runs of statistics
(RowNormalization.stat_groups: consecutive sums and means none of which reads another) are each accumulated in
one loop over its columns, which loads the Tensors the run reads once, not once a statistic. (One `tl.reduce`
of a tuple for a run in one pass measured no faster on an H100: docs/performance.md, 2026-12-06.)
"""

from __future__ import annotations

from ..model import Op
from ..model_kinds import RowStat
from ..names import DERIVED_NAMES, locals_for
from . import nans, python
from .layout import expression_comment, wrap

# What a masked-out element holds in each reduction: its identity.
_IDENTITY = {"sum": "0.0", "mean": "0.0", "max": 'float("-inf")', "min": 'float("inf")'}
# tl.reduce's combine function per reduction: Triton's interpreter runs these in-process (it cannot
# call the @triton.jit tl.sum, tl.max themselves).
_COMBINE = {"sum": "tl.standard._sum_combine", "mean": "tl.standard._sum_combine",
            "max": "tl.standard._elementwise_max", "min": "tl.standard._elementwise_min"}


def saved_stats(op: Op) -> tuple[str, ...]:
    """A normalisation's statistics its backward formulas read: its forward saves them for backward."""
    return op.backward.stats if op.backward is not None else ()


def stat_pointer(name: str) -> str:
    """A saved statistic's kernel parameter (statistics are named off the generated locals: normalize.py)."""
    return DERIVED_NAMES["pointer"].format(name)


def one_pass_stats(op: Op, indent: int) -> list[str]:
    """Each statistic reduced from the loaded block: a column of one value per row."""
    local, pad = locals_for(op), " " * indent
    lines = []
    for stat in op.body.stats:
        lines.append(f"{pad}# {stat.name} = {expression_comment(stat.text)}")
        values = f"{python.layout.operand(stat.reduced.to_triton())}.to({local.COMPUTE_DTYPE})"
        masked = f"tl.where({local.mask}, {values}, {_IDENTITY[stat.reduction.kind]})"
        if stat.reduction.kind in ("max", "min"):  # the block again in the NaN count: named once
            lines.append(pad + python.layout.assign(local.values, masked, indent))
            masked = local.values
        lines += nans.reduced(op, stat.reduction.kind, stat.name, masked, _COMBINE[stat.reduction.kind], indent,
                              keep_dims=True)
        lines += _finish(op, stat, indent) + _save(op, stat, indent)
    return lines


def looped_stats(op: Op, indent: int, column_loop) -> list[str]:
    """Each run of statistics accumulated over a long row's columns in one loop (`column_loop(names)`: the
    loop's head, loading those Tensors), then reduced, finished and saved. A lone statistic accumulates in
    `total`; a run's in blocks named as its statistics."""
    local, pad = locals_for(op), " " * indent
    lines = []
    for run in op.body.stat_groups:
        totals = [local.total] if len(run) == 1 else [stat.name for stat in run]
        for stat, total in zip(run, totals, strict=True):
            lines.append(f"{pad}# {stat.name} = {expression_comment(stat.text)}")
            lines.append(f"{pad}{total} = tl.full(({local.BLOCK_ROWS}, {local.BLOCK_COLS}), "
                         f"{_IDENTITY[stat.reduction.kind]}, dtype={local.COMPUTE_DTYPE})")
        lines += column_loop({name for stat in run for name in stat.reduced.names})
        for stat, total in zip(run, totals, strict=True):
            values = f"{python.layout.operand(stat.reduced.to_triton())}.to({local.COMPUTE_DTYPE})"
            combined = nans.combined(stat.reduction.kind, total, local.values)
            lines.append(f"{pad}    " + python.layout.assign(local.values, values, indent + 4))
            lines.append(f"{pad}    " + python.layout.assign(total, f"tl.where({local.mask}, {combined}, {total})",
                                                              indent + 4))
        for stat, total in zip(run, totals, strict=True):
            lines += nans.reduced(op, stat.reduction.kind, stat.name, total, _COMBINE[stat.reduction.kind], indent,
                                  keep_dims=True)
            lines += _finish(op, stat, indent) + _save(op, stat, indent)
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


def _save(op: Op, stat: RowStat, indent: int) -> list[str]:
    """A statistic the backward reads, stored per row (in COMPUTE_DTYPE) where the launch asks for it."""
    if stat.name not in saved_stats(op):
        return []
    local, pad = locals_for(op), " " * indent
    store = wrap("tl.store(", [f"{stat_pointer(stat.name)} + {local.rows}[:, None]", stat.name,
                               f"mask={local.row_mask}[:, None]"], ")", indent + 4)
    return [f"{pad}if {local.SAVE_STATS}:", f"{pad}    {store}"]
