"""The op kinds added after model.py filled up: frozen data, as model.py's kinds are.

`RowNormalization` (`normalize`): per row of the lead Tensor, statistics (each one reduction over the
row, in order), then a pointwise expression over the row that reads them. model.py's `Body` and
`KINDS` include it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from .expr import Pointwise
    from .model import Reduction, Write


@dataclass(frozen=True)
class RowStat:
    """One statistic of a row: `outer` over the reduction of `reduced` (`rsqrt(mean(x * x) + eps)`:
    reduced `x * x` by mean, then outer `rsqrt(rstd + eps)`, where the stat's own name stands for the
    reduced value). Computed in float32 (float64 for float64 inputs)."""

    name: str
    reduction: Reduction
    reduced: Pointwise  # over the arguments and the statistics before it
    outer: Pointwise | None  # None: the statistic is the reduced value itself (`max(x)`)
    text: str  # as the spec writes it

    @property
    def exprs(self) -> tuple[Pointwise, ...]:
        return (self.reduced,) if self.outer is None else (self.reduced, self.outer)


@dataclass(frozen=True)
class ColumnSum:
    """A backward kernel's gradient of an input broadcast along the rows (a weight [N]): `expr`, pointwise
    over the row, summed over the rows (each Triton program, C++ part of the rows or CUDA block its partial
    row, in float32, then their total), returned as `name` in the shape and dtype of the input `like`."""

    name: str
    expr: Pointwise
    like: str


@dataclass(frozen=True)
class RowNormalization:
    """`normalize: {stats, compute}`: the statistics of each row of the lead Tensor's last dimension,
    then `compute` over the row, reading them: the output, of the broadcast shape of the inputs, or each
    mutated argument (`compute: {arg: EXPR}`, every expression reading the values before the op)."""

    stats: tuple[RowStat, ...]
    writes: tuple[Write, ...]  # `compute`, written to `out`, or to each mutated argument
    # A backward kernel's saved statistics (backward_kernel.py): Tensors of one value per row, in
    # float32 beside bf16 or float16 ones, which the output's allocation does not take.
    row_stats: tuple[str, ...] = ()
    # A backward kernel's gradients of inputs read by all rows, returned after `compute`'s output.
    column_sums: tuple[ColumnSum, ...] = ()
    templates: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "kernels": "package/kernels/op.py.j2",
            "triton": "package/kernels/_normalization.py.j2",
            "support": "package/_support/norms.py.j2",
            "rows": "package/_support/rows.py.j2",  # row_layout and the row references, shared with RowReduction
            "dense": "package/_support/dense_norms.py.j2",
        }
    )
    user_writes_kernel: ClassVar[bool] = False

    @property
    def output_names(self) -> tuple[str, ...]:
        return (*(w.name for w in self.writes if w.arg is None), *(c.name for c in self.column_sums))

    @property
    def stat_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.stats)

    @property
    def stat_groups(self) -> tuple[tuple[RowStat, ...], ...]:
        """The statistics in order, in runs reduced together: consecutive sums and means none of which
        reads another of its run (layer_norm's backward: mean(grad * weight) and mean(grad * weight *
        xhat)), so one pass over a long row's columns and one reduction of a block serve the run. A max or
        min stays alone: its NaN check reduces its block twice."""
        groups: list[list[RowStat]] = []
        for stat in self.stats:
            run = groups[-1] if groups else []
            summed = stat.reduction.kind in ("sum", "mean")
            if run and summed and run[0].reduction.kind in ("sum", "mean") \
                    and not set(stat.reduced.names) & {s.name for s in run}:
                run.append(stat)
            else:
                groups.append([stat])
        return tuple(map(tuple, groups))

    @property
    def reads(self) -> tuple[str, ...]:
        """The names the statistics read (arguments and earlier statistics), beside those of `compute`."""
        exprs = (*(e for s in self.stats for e in s.exprs), *(c.expr for c in self.column_sums))
        return tuple(dict.fromkeys(n for e in exprs for n in e.names))

    @property
    def imports(self) -> frozenset[str]:
        exprs = (*(w.expr for w in self.writes), *(e for s in self.stats for e in s.exprs), *(c.expr for c in self.column_sums))
        return frozenset(m for e in exprs for m in e.imports)
