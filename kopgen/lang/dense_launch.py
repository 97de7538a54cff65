"""A pointwise launcher's dense path: dense CUDA tensors of one shape, dtype and GPU (the common case)
launched straight to the kernel by _support.DenseLaunches (_support/launch.py.j2), before the general
path works out their layout and classifies every argument for the launch key."""

from __future__ import annotations

from ..model import Op, PointwiseCompute
from ..names import locals_for
from . import python, split, triton
from .layout import literal, wrap


def applies(op: Op) -> bool:
    """Whether the op's launcher takes dense CUDA tensors of one shape, dtype and GPU straight to its kernel
    (_support.DenseLaunches): a pointwise op compiled for CUDA whose kernel takes its inputs as given, then
    outputs of their shape (no `split` halves, no row gradient's columns, nothing mutated, no optional
    Tensor). A triton_op's eager launcher has them, not the launch torch.compile traces."""
    inputs = [a.name for a in op.input_args]
    return (
        isinstance(op.body, PointwiseCompute)
        and op.uses_compiled_triton
        and not op.is_mutating
        and not split.bind(op)  # halves, or a row gradient's columns
        and python.output_allocator(op) == "pointwise_output"
        and not any(t.optional for t in op.kernel_tensors)
        and [t.name for t in op.kernel_tensors] == [*inputs, *op.output_names]
    )


def any_applies(ops) -> bool:
    return any(applies(op) for op in ops)


def definition(op: Op) -> list[str]:
    """The module-level DenseLaunches of the op's kernel, before its launcher (none where it has none)."""
    if not applies(op):
        return []
    local = locals_for(op)
    names = python.tuple_expression([literal(local.BLOCK_ROWS), literal(local.BLOCK_COLS), literal(local.COMPUTE_DTYPE)])
    arguments = [triton.kernel(op), local.BLOCK_SIZE, str(len(op.output_names)), names]
    return ["# Dense CUDA tensors of one shape, dtype and GPU (the common case): straight to the kernel.",
            wrap(f"{local.DENSE_LAUNCHES} = _support.DenseLaunches(", arguments, ")"), "", ""]


def first_lines(op: Op) -> list[str]:
    """The eager launcher's first lines where it has DenseLaunches: their outputs, where the tensors are dense."""
    if not applies(op):
        return []
    local = locals_for(op)
    scalars = triton.kernel_arguments(op)[len(op.kernel_tensors):]
    call = wrap(f"{local.dense} = {local.DENSE_LAUNCHES}(", [python.tuple_expression([a.name for a in op.input_args]),
                                                             python.tuple_expression(scalars)], ")", 4)
    return [f"    {call}", f"    if {local.dense} is not None:", f"        return {local.dense}"]


def launch_lines(op: Op) -> list[str]:
    """The same lines at the top of the launch body, where that is the eager launcher: not a triton_op's,
    whose eager launcher has them (_launcher_triton_op.py.j2) and whose launch torch.compile traces."""
    return [] if op.is_triton_op else first_lines(op)
