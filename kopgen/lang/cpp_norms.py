"""This module writes the C++ and CUDA functor of a row normalisation (`normalize`,
model_kinds.RowNormalization): the methods csrc/pointwise.h's norms loop and cuda/pointwise.cuh's
norms_kernel call, one overload per statistic, beside the functor's operator() (lang/cpp.py).

    using Reductions = std::tuple<Mean<acc_t>>;  // each statistic's reduction, in order
    static constexpr int column_sums = 1;  // a backward kernel's: operator()'s last values summed over the rows
    acc_t reduced(Stat<0>, const acc_t* stat, acc_t x, acc_t weight) const  // its value per element
    acc_t finished(Stat<0>, const acc_t* stat, acc_t rstd) const  // the statistic from its total
    Values<acc_t, 1> operator()(const acc_t* stat, acc_t x, acc_t weight) const  // compute

`stat` holds the row's statistics computed so far; each method binds the ones it reads by name.
"""

from __future__ import annotations

from ..expr import Pointwise
from ..model import Op
from ..names import locals_for
from .cpp import wrap, wrap_expression

# The reductions of csrc/pointwise.h and cuda/pointwise.cuh, by statistic reduction.
_REDUCERS = {"sum": "Sum", "mean": "Mean", "max": "Max", "min": "Min"}


def stat_parameter(op: Op, read: set[str]) -> str:
    """The statistics parameter, unnamed where none of `read` is one."""
    return f"const acc_t* {locals_for(op).stat}" if read & set(op.body.stat_names) else "const acc_t*"


def stat_bindings(op: Op, read: set[str]) -> list[str]:
    """`const acc_t rstd = stat[0];` for each statistic in `read`."""
    return [
        f"const acc_t {name} = {locals_for(op).stat}[{k}];" for k, name in enumerate(op.body.stat_names) if name in read
    ]


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


def methods(op: Op, device: str) -> list[str]:
    """The lines of the functor's statistics: Reductions, then reduced and finished per statistic."""
    prefix = "__device__ " if device == "cuda" else ""
    stats = op.body.stats
    lines = [f"using Reductions = std::tuple<{', '.join(f'{_REDUCERS[s.reduction.kind]}<acc_t>' for s in stats)}>;"]
    if device == "cuda":
        lines += kept_inputs(op)
    sums = op.body.column_sums
    if sums:
        likes = " and ".join(f"{c.like}'s" for c in sums)
        which = "value" if len(sums) == 1 else f"{len(sums)} values"
        lines += [f"// operator()'s last {which}: {likes} gradient, which the loop sums over the rows",
                  f"static constexpr int column_sums = {len(sums)};"]
    for k, stat in enumerate(stats):
        lines.append(f"// {stat.name} = {' '.join(stat.text.split())}")
        read = set(stat.reduced.names)
        parameters = [f"Stat<{k}>", stat_parameter(op, read), *_inputs(op, stat.reduced)]
        lines.append(wrap(f"{prefix}acc_t reduced(", parameters, ") const {", after=2))
        lines += [f"  {b}" for b in stat_bindings(op, read)]
        lines.append(f"  return {wrap_expression(stat.reduced.to_cpp(), 11, 6)};")
        lines.append("}")
        # Its own name stands for the reduced total (the parameter) in the expression around it.
        read = set() if stat.outer is None else set(stat.outer.names) - {stat.name}
        parameters = [f"Stat<{k}>", stat_parameter(op, read), f"acc_t {stat.name}"]
        lines.append(wrap(f"{prefix}acc_t finished(", parameters, ") const {", after=2))
        lines += [f"  {b}" for b in stat_bindings(op, read)]
        value = stat.name if stat.outer is None else stat.outer.to_cpp()
        lines.append(f"  return {wrap_expression(value, 11, 6)};")
        lines.append("}")
    return [line.replace("\n", "\n  ") for line in lines]
