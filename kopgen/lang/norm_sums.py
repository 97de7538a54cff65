"""A normalisation's backward kernel's gradients of inputs read by all rows (model_kinds.ColumnSum): the
pieces of its Triton kernel and launcher, and of its reference, that sum them over the rows (lang/norms.py
prints them; the compiled routes' norms loops sum them in csrc/pointwise.h and cuda/pointwise.cuh). Each
program takes several blocks of rows, its sums kept in registers (one pass) or added to
its own partial row (longer rows); the launcher sums the programs' partial rows."""

from __future__ import annotations

from ..model import Op
from ..model_kinds import ColumnSum
from ..names import locals_for
from . import python, triton
from .layout import expression_comment, wrap

_SUM = "tl.standard._sum_combine"  # tl.reduce's combine function (the interpreter cannot call tl.sum)


def column_sums(op: Op) -> tuple[ColumnSum, ...]:
    """A backward kernel's gradients of inputs read by all rows, which it sums over the rows."""
    return getattr(op.body, "column_sums", ())


def reference_dtypes(op: Op) -> list[str]:
    """The reference's dtype lines: the lead input's, and each column sum's input's (its gradient's)."""
    lines = [f"{locals_for(op).dtype} = {op.lead.name}.dtype"]
    if column_sums(op):
        dtypes = ", ".join(f"{c.like}.dtype" for c in column_sums(op))
        lines.append(f"{locals_for(op).dtypes} = ({dtypes},)")
    return lines


def column_sum_parts(op: Op, indent: int, looped: bool) -> list[str]:
    """Each gradient summed over the rows: its formula over the block summed over the block's rows, added
    to its sum over the program's blocks: in registers (one pass; column_sum_tail stores it), or, for
    longer rows, to the program's partial row of `partials` (programs x column sums x columns; its first
    block's sums stored, not added), which the launcher sums."""
    sums = column_sums(op)
    if not sums:
        return []
    local = locals_for(op)
    lines = [f"if {local.COLUMN_SUMS}:"]
    if looped:
        lines += ["    # the program's partial rows: stored at its first block, added to after", f"    {local.offsets} = {_partial_row(op)} + {local.cols}"]
    for k, total in enumerate(sums):
        values = f"tl.where({local.mask}, {python.layout.operand(total.expr.to_triton())}.to({local.COMPUTE_DTYPE}), 0.0)"
        lines.append(f"    # {total.like}'s gradient: {expression_comment(total.expr.text)}, summed over the rows")
        if not looped:
            lines.append("    " + wrap(f"{total.name} += tl.reduce(", [values, "0", _SUM], ")", indent + 4))
            continue
        lines.append("    " + wrap(f"{local.values} = tl.reduce(", [values, "0", _SUM], ")", indent + 4))
        pointer = _partial_pointer(op, k)
        partial = f"tl.load({pointer}, mask=({local.cols} < {local.n_cols}) & ({local.step} > 0), other=0.0)"
        lines.append("    " + wrap("tl.store(", [pointer, f"{partial} + {local.values}", f"mask={local.cols} < {local.n_cols}"],
                                   ")", indent + 4))
    if looped:  # the next step's load may be another thread's (a column held by several): after this store
        lines.append("    tl.debug_barrier()")
    return lines


def _partial_row(op: Op) -> str:
    """The offset of the program's partial rows in `partials`."""
    local, count = locals_for(op), len(column_sums(op))
    return f"{local.program} * {local.n_cols}" if count == 1 else f"{local.program} * ({count} * {local.n_cols})"


def _partial_pointer(op: Op, k: int) -> str:
    """Where column sum k's part of the program's partial rows starts, at the block's columns."""
    local = locals_for(op)
    return f"{local.partials_ptr} + {local.offsets}" + (f" + {k} * {local.n_cols}" if k else "")


def first_row(op: Op) -> str:
    """The first row of the program's block: of its step's block where the program takes several."""
    local = locals_for(op)
    if column_sums(op):
        return f"({local.program} + {local.step} * {local.n_programs}) * {local.BLOCK_ROWS}"
    return f"tl.program_id(0).to(tl.int64) * {local.BLOCK_ROWS}"


def column_sum_head(op: Op) -> list[str]:
    """A kernel with column sums: each program takes `steps` blocks of rows, every n_programs-th, its sum of
    each column sum over them in registers (one pass), from zeros."""
    local = locals_for(op)
    lines = ["    # Each program takes every n_programs-th block of rows, `steps` of them, and sums the gradients of",
             "    # the inputs read by all rows over them: in registers (one pass) or in its partial rows (longer).",
             f"    {local.program} = tl.program_id(0).to(tl.int64)"]
    lines += [f"    {c.name} = tl.full(({local.BLOCK_COLS},), 0.0, dtype={local.COMPUTE_DTYPE})" for c in column_sums(op)]
    steps = f"{local.steps} if {local.CONST_STEPS} is None else {local.CONST_STEPS}"
    lines.append("    " + wrap(f"for {local.step} in range(", [steps], "):", 4))
    return lines


def column_sum_tail(op: Op) -> list[str]:
    """After the blocks, one pass: each column sum's total over the program's blocks stored in its partial row."""
    local = locals_for(op)
    lines = [f"    if {local.ONE_PASS} and {local.COLUMN_SUMS}:",  # constexprs: Triton's `and` of constexprs
             f"        {local.cols} = tl.arange(0, {local.BLOCK_COLS}).to(tl.int64)",
             f"        {local.offsets} = {_partial_row(op)} + {local.cols}"]
    for k, total in enumerate(column_sums(op)):
        lines.append("        " + wrap("tl.store(", [_partial_pointer(op, k), total.name, f"mask={local.cols} < {local.n_cols}"], ")", 8))
    return lines


def any_column_sums(package) -> bool:
    return any(column_sums(op) for op in package.ops)


def any_launched_column_sums(package) -> bool:
    """Whether a Triton launcher sums column sums (the compiled routes' KernelCall does its own)."""
    return any(column_sums(op) and not op.is_compiled for op in package.ops)


def reference_values(op: Op) -> list[str]:
    """The reference's values of the gradients summed over the rows: each formula summed to its input's
    shape, in its dtype (read before upcast: dtypes)."""
    dtypes = locals_for(op).dtypes
    return [f"summed_to({c.expr.to_torch()}, {c.like}.shape, {dtypes}[{k}])" for k, c in enumerate(column_sums(op))]


def outputs(op: Op) -> list[str]:
    """The launcher's outputs, allocated by one call, and whether the kernel sums the column sums."""
    local, likes = locals_for(op), [c.like for c in column_sums(op)]
    which = "it is" if len(likes) == 1 else "each is"
    return ["    " + python.layout.assign(python.output_target(op), python.allocate(op), 4),
            f"    # The gradient of {' and '.join(likes)} summed in the kernel where {which} one row read by all rows",
            "    " + python.layout.assign(local.column_sums, f"_support.norm_one_row({', '.join(likes)})", 4)]


def epilogue(op: Op) -> list[str]:
    """After the launch: the programs' partial rows summed, or the formulas in torch."""
    sums, local = column_sums(op), locals_for(op)
    lines = [f"    if {local.column_sums}:"]
    # summed by a kernel launched as the backward kernel was (compiled, through wrap_triton or interpreted)
    lines += ["        " + python.layout.assign(c.name, f"_support.norm_column_sum({local.partials}, {k}, {c.name}, {local.kernel})", 8)
              for k, c in enumerate(sums)]
    lines.append("    else:  # an input with rows of its own: its formula in torch, summed to its shape")
    lines += ["        " + python.layout.assign(c.name, f"_support.summed_to({c.expr.to_torch()}, {c.name}.shape, {c.name}.dtype)", 8)
              for c in sums]
    return lines + triton.epilogue(op)


def launch(op: Op, constants: list[tuple[str, str]]) -> list[str]:
    """The programs, each taking several blocks of rows, their partial rows, then the launch."""
    local = locals_for(op)
    first = triton.first_written(op)
    programs = python.layout.assign(f"{local.n_programs}, {local.steps}",
                                    f"_support.norm_programs({local.grid}[0], {first}, {local.per_sm})", 4)
    # Each program's partial row of each column sum, in COMPUTE_DTYPE (a placeholder where none is summed)
    partials = python.layout.assign(local.partials, f"_support.norm_partials({first}, {local.n_programs}, "
                                    f"{len(column_sums(op))}, {local.n_cols}, {local.column_sums})", 4)
    constants_ = [*constants, ("COLUMN_SUMS", local.column_sums),
                  ("CONST_STEPS", f"None if {first}.is_cuda else {local.steps}")]
    return ["    # Fewer programs than blocks, each summing its blocks' column sums: few partial rows to sum.",
            "    " + programs, f"    {local.grid} = ({local.n_programs},)", "    " + partials,
            *triton.launch(op, ["n_rows", "n_cols", "n_programs", "steps", "strides"], constants_,
                           pointers=[local.partials])]
