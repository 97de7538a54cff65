"""A Triton launcher's dense path: the common case, dense CUDA tensors (beside a weight or bias of one row
where the kind allows it), launched straight to the kernel by its kind's helper in _support.py, before the
general path works out the layout and classifies every argument for the launch key. Each kind's helper is its
own template (the kind's "dense" role): DenseLaunches (pointwise ops), DenseRows (row reductions),
DenseHalves (split ops), DenseNorms (row normalisations); launch.py.j2 holds what they share."""

from __future__ import annotations

from ..model import Op, PointwiseCompute, RowReduction
from ..model_kinds import RowNormalization
from ..names import locals_for
from ..split import GatedSplit
from . import norms, python, split, triton
from .layout import literal, wrap


def applies(op: Op) -> bool:
    """Whether the op's launcher has a dense path: a kernel compiled for CUDA, nothing written in place, and
    a pointwise op or row reduction whose kernel takes its inputs as given (none optional), then its
    outputs; a split op whose kernel takes the halves of its one Tensor; a row normalisation's forward. A
    triton_op's eager launcher has it, not the launch torch.compile traces."""
    return _pointwise_applies(op) or _reduction_applies(op) or _split_applies(op) or _norm_applies(op)


def _takes_inputs_as_given(op: Op, optionals: bool = False) -> bool:
    inputs = [a.name for a in op.input_args]
    return (
        op.uses_compiled_triton
        and not op.is_mutating
        and _flags_are_inputs(op)
        and not split.bind(op)  # halves, or a row gradient's columns
        and (optionals or not any(t.optional for t in op.kernel_tensors))
        and [t.name for t in op.kernel_tensors] == [*inputs, *op.output_names]
    )


def _flags_are_inputs(op: Op) -> bool:
    """Whether each optional Tensor the kernel tests (its HAS_ flag) is an input the dense helper is given: one
    that `present(bias)` tests but nothing reads is no input, so no helper could set its flag."""
    inputs = {a.name for a in op.input_args}
    return all(a.name in inputs for a in op.tested_optionals)


def _pointwise_applies(op: Op) -> bool:
    return (isinstance(op.body, PointwiseCompute) and _takes_inputs_as_given(op)
            and python.output_allocator(op) == "pointwise_output")


def _reduction_applies(op: Op) -> bool:
    return isinstance(op.body, RowReduction) and _takes_inputs_as_given(op)


def _split_applies(op: Op) -> bool:
    """A split op (not a split op's backward kernel) whose only Tensor argument is the one split."""
    if type(op.body) is not GatedSplit or not op.uses_compiled_triton or op.is_mutating:
        return False
    halves = [h.name for h in op.body.halves]
    return ([a.name for a in op.input_args] == halves
            and _flags_are_inputs(op)
            and not any(t.optional for t in op.kernel_tensors)
            and [t.name for t in op.kernel_tensors] == [*halves, *op.output_names]
            and python.output_allocator(op) == "pointwise_output")


def _norm_applies(op: Op) -> bool:
    """A row normalisation's forward (not a backward kernel's, with its saved statistics or column sums);
    not on triton_op, whose launch torch.compile traces."""
    return (isinstance(op.body, RowNormalization) and not op.body.row_stats and not op.body.column_sums
            and not op.is_triton_op and _takes_inputs_as_given(op, optionals=True) and len(op.output_names) == 1)


def any_applies(ops) -> bool:
    return any(applies(op) for op in ops)


def templates(ops) -> list[str]:
    """The _support templates of the ops' dense paths: each kind's "dense" template, where an op of it has one."""
    return list(dict.fromkeys(op.body.templates["dense"] for op in ops if applies(op)))


def definition(op: Op) -> list[str]:
    """The module-level helper of the op's dense path, before its launcher (none where it has none)."""
    local = locals_for(op)
    kernel = triton.kernel(op)
    comment = "# Dense CUDA tensors of one shape, dtype and GPU (the common case): straight to the kernel."
    if _pointwise_applies(op) or _split_applies(op):
        helper = "DenseLaunches" if _pointwise_applies(op) else "DenseHalves"
        names = _names(local.BLOCK_ROWS, local.BLOCK_COLS, local.COMPUTE_DTYPE)
        arguments = [kernel, local.BLOCK_SIZE, str(len(op.output_names)), names]
    elif _reduction_applies(op):
        helper = "DenseRows"
        arguments = [kernel, _names(local.BLOCK_ROWS, local.BLOCK_COLS, local.CONST_COLS, local.COMPUTE_DTYPE)]
    elif _norm_applies(op):
        helper = "DenseNorms"
        comment = "# Dense CUDA tensors (a weight or bias of one row beside them): straight to the kernel."
        stats = norms.saved_stats(op)
        saves = [local.SAVE_STATS] if stats else []
        names = _names(local.BLOCK_ROWS, local.BLOCK_COLS, local.CONST_COLS, local.ONE_PASS, *saves, local.COMPUTE_DTYPE)
        inputs = [a.name for a in op.input_args]
        flags = [python.tuple_expression([str(inputs.index(a.name)), literal(local.flag(a.name))])
                 for a in op.tested_optionals]  # each optional input's position and its HAS_ constexpr
        arguments = [kernel, str(len(stats)), names, python.tuple_expression(flags)]
    else:
        return []
    return [comment, wrap(f"{local.DENSE_LAUNCHES} = _support.{helper}(", arguments, ")"), "", ""]


def _names(*constexprs: str) -> str:
    """The kernel's names of the constexprs a helper passes on its general path's first launch, as a tuple."""
    return python.tuple_expression([literal(name) for name in constexprs])


def first_lines(op: Op) -> list[str]:
    """The eager launcher's first lines where it has a dense path: its outputs, where the tensors are dense."""
    if not applies(op):
        return []
    local = locals_for(op)
    scalars = triton.kernel_arguments(op)[len(op.kernel_tensors):]
    inputs = [op.body.source.name] if _split_applies(op) else [a.name for a in op.input_args]
    saving = [local.save_stats] if _norm_applies(op) and norms.saved_stats(op) else []
    call = wrap(f"{local.dense} = {local.DENSE_LAUNCHES}(", [python.tuple_expression(inputs),
                                                             python.tuple_expression(scalars), *saving], ")", 4)
    return [f"    {call}", f"    if {local.dense} is not None:", f"        return {local.dense}"]


def launch_lines(op: Op) -> list[str]:
    """The same lines at the top of the launch body, where that is the eager launcher: not a triton_op's,
    whose eager launcher has them (_launcher_triton_op.py.j2) and whose launch torch.compile traces."""
    return [] if op.is_triton_op else first_lines(op)
