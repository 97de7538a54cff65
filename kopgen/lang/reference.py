"""This module translates the model into reference.py, the PyTorch references the generated tests compare
each op with, and into the `python` kernels, which are those references written into the op's outputs.

A module of its own, as each generated file's language is (lang/python.py has the API and the
registration): each op kind has its row in `_KINDS` below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ..backward_kernel import RowGradient
from ..model import Arg, CustomKernel, MutationReference, Op, Package, PointwiseCompute, RowNormalization, RowReduction
from ..names import locals_for
from ..split import GatedSplit, SplitGradient
from . import layout, norm_sums, norms, split, tests
from .layout import wrap
from .python import (
    allocate,
    allocates_all,
    annotations_need_torch,
    call_text,
    check_written,
    define,
    names_of,
    return_annotation,
    returns,
    returns_list,
    sized_by_data,
    tuple_target,
    typing_imports,
)


def imports(package: Package) -> list[str]:
    """reference.py's imports: the modules its expressions call into, recorded when they were parsed."""
    modules = set()
    for op in package.ops:
        modules |= op.body.imports
    standard = (["import math"] if "math" in modules else []) + typing_imports(package.ops)[:1]
    lines = [*standard, ""] if standard else []
    lines += ["import torch"] if "torch" in modules or annotations_need_torch(package.ops) else []
    upcasts = any(_kind(op).inputs(op) for op in package.ops)
    helpers = sorted([f"row_{kind}" for kind in package.reductions] + ["upcast"] * upcasts + ["split_halves"] * split.any_split(package)
                     + ["summed_to"] * norm_sums.any_column_sums(package))
    return [*lines, "from torch import Tensor", *(["", f"from ._support import {', '.join(helpers)}"] if helpers else [])]


def define_reference(op: Op) -> str:
    """The reference returns what a mutating op writes (None for a `Tensor!?` left out), then what the op returns."""
    types = ["Tensor | None" if a.is_optional else "Tensor" for a in op.mutated_args] + ["Tensor"] * op.num_outputs
    returns = types[0] if len(types) == 1 else f"tuple[{', '.join(types)}]"
    if returns_list(op):  # `-> Tensor[]` (never a mutating op's)
        returns = return_annotation(op)
    return define(op.name, op, returns=returns)


def doc(op: Op) -> str:
    if op.is_mutating:
        also = ", and what it returns," if op.num_outputs else ","
        return f"What {op.qualname} writes to {names_of(op.mutated_args)}{also} in plain PyTorch (float32 at least)."
    return f"{op.qualname} in plain PyTorch, computed in float32 at least."


def dtype_lines(op: Op) -> list[str]:
    """The dtype the reference returns (its lead input's, or the dtypes of a custom op's `fake`),
    read before upcast() changes the inputs' dtypes; none where it returns only values written in place,
    which the tests compare in the dtype of the argument written."""
    return _kind(op).dtype_lines(op)


def _lead_dtype(op: Op) -> list[str]:
    return [f"{locals_for(op).dtype} = {op.lead.name}.dtype"]


def _fake_dtypes(op: Op) -> list[str] | None:
    """The dtypes of a custom op's outputs where `fake` gives one other than the lead input's, else None."""
    dtypes = [output.dtype for output in op.body.outputs]
    return None if all(d == f"{op.lead.name}.dtype" for d in dtypes) else dtypes


def _custom_dtype(op: Op) -> list[str]:
    if not op.num_outputs:
        return []
    dtypes = _fake_dtypes(op)
    if dtypes is None:
        return _lead_dtype(op)
    if len(dtypes) == 1 and not returns_list(op):
        return [layout.assign(locals_for(op).dtype, dtypes[0], 4)]
    return [layout.assign(locals_for(op).dtypes, f"({', '.join(dtypes)}{',' * (len(dtypes) == 1)})", 4)]


def upcast(op: Op) -> list[str]:
    """The Tensors the reference computes with, in float32 at least (none where every Tensor keeps a dtype of
    its own: `tests: args:` gives each its dtype)."""
    names = [a.name for a in _kind(op).inputs(op)]
    return [wrap(f"{tuple_target(names)} = upcast(", names, ")", 4)] if names else []


def return_line(op: Op) -> str:
    """What the reference returns, in the dtype of the op's lead input."""
    return _kind(op).return_line(op)


def _custom_reference_inputs(op: Op) -> tuple[Arg, ...]:
    """The Tensors a custom op's reference upcasts: not those of their own dtype (an int64 target stays int64)."""
    return tuple(a for a in op.tensor_args if not tests.own_dtype(op, a))


def _custom_return(op: Op) -> str:
    """What a mutating op writes (as computed), then its returns in the dtypes of `fake`."""
    if returns_list(op):  # `-> Tensor[]` (never a mutating op's): the reference's list (or tuple), as a list
        return _custom_list_return(op)
    values = [_mutation_value(m) for m in op.body.mutations]
    if op.num_outputs:
        values.append(_custom_returned(op, spread=bool(values)))
    if len(values) == 1:
        return layout.assign("return", values[0], 4)
    return wrap("return (", values, ")", 4, explode=True)


def _custom_list_return(op: Op) -> str:
    """The reference's Tensors, named first (a comprehension over them fits a line), as a list in their dtypes."""
    local = locals_for(op)
    output, dtype, outputs = local.output, local.dtype, local.outputs
    pairs = f"{output} in {outputs}" if _fake_dtypes(op) is None else \
        f"{output}, {dtype} in zip({outputs}, {local.dtypes}, strict=True)"
    return (layout.assign(outputs, op.body.reference.python, 4) + "\n    "
            + layout.statement(f"return [{output}.to({dtype}) for {pairs}]", 4))


def _mutation_value(mutation: MutationReference) -> str:
    """The value a mutated argument holds after the op; None for a `Tensor!?` left out."""
    value = mutation.reference.python
    name = mutation.arg.name
    return f"None if {name} is None else {value}" if mutation.arg.is_optional else value


def _custom_returned(op: Op, spread: bool) -> str:
    """The returned Tensors in their dtypes: one value, or a tuple (`spread` into the values written before)."""
    local = locals_for(op)
    dtype, output, reference = local.dtype, local.output, op.body.reference.python
    if op.num_outputs == 1 and not returns_list(op):
        return f"{layout.operand(reference)}.to({dtype})"
    if _fake_dtypes(op) is None:
        generator = f"{output}.to({dtype}) for {output} in {reference}"
    else:
        generator = f"{output}.to({dtype}) for {output}, {dtype} in zip({reference}, {local.dtypes}, strict=True)"
    return f"*({generator})" if spread else f"tuple({generator})"


def _reduction_return(op: Op) -> str:
    dtype = locals_for(op).dtype
    return layout.assign("return", f"row_{op.body.reduction.kind}({op.writes[0].expr.to_torch()}).to({dtype})", 4)


def _pointwise_return(op: Op) -> str:
    dtype = locals_for(op).dtype
    values = [f"{layout.operand(w.expr.to_torch())}.to({dtype})" for w in op.writes]
    if len(values) == 1:
        return layout.assign("return", values[0], 4)
    return wrap("return (", values, ")", 4, explode=True)


def _joined_return(op: Op) -> str:
    """A split op's backward kernel: the halves' gradients side by side, as the formula's cat has them
    (broadcast to one shape first, where one half's gradient reads fewer tensors)."""
    parts = [f"{layout.operand(w.expr.to_torch())}.to({locals_for(op).dtype})" for w in op.writes]
    return wrap("return torch.cat(torch.broadcast_tensors(", parts, "), -1)", 4)


def _row_gradient_kernel_body(op: Op) -> list[str]:
    """A row reduction's backward kernel: the reference, called on grad (and result) as given, since it binds
    them as columns itself; its output is fresh memory of the output's shape, made contiguous."""
    reference = call_text(f"reference.{op.name}", op)
    lines = ['    """The PyTorch reference as a kernel: fresh contiguous output."""']
    if op.num_outputs == 1:
        return lines + ["    " + layout.assign("return", f"{layout.operand(reference)}.contiguous()", 4)]
    output = locals_for(op).output
    return lines + ["    " + layout.statement(f"return tuple({output}.contiguous() for {output} in {reference})", 4)]


# -- the `python` kernels (kernels/<op>.py): the reference, written into the outputs


def python_kernel(op: Op) -> str:
    return f"{op.stem}_python"


def python_kernel_body(op: Op) -> list[str]:
    """The PyTorch reference as a kernel, as the op's kind has it."""
    return _kind(op).python_kernel_body(op)


def _written_kernel_body(op: Op) -> list[str]:
    """The reference written into the mutated arguments, or into fresh outputs (pointwise ops, row reductions)."""
    reference = call_text(f"reference.{op.name}", op)
    local, outs = locals_for(op), op.output_names
    expected = local.expected
    if op.is_mutating:
        lines = ['    """The PyTorch reference as a kernel, written into the mutated arguments."""',
                 "    " + check_written(op, 4)]
        if len(op.writes) == 1:
            return lines + ["    " + layout.statement(f"{op.writes[0].name}.copy_({reference})", 4)]
        if any(w.expr.text.strip().isidentifier() for w in op.writes):  # `{a: b, b: a}`: b itself, copied first
            reference = f"tuple({local.output}.clone() for {local.output} in {reference})"
        lines.append("    " + layout.assign(expected, reference, 4))
        return lines + [f"    {w.name}.copy_({expected}[{i}])" for i, w in enumerate(op.writes)]
    lines = ['    """The PyTorch reference as a kernel, written into fresh contiguous output."""']
    if allocates_all(op):
        lines.append("    " + layout.assign(", ".join(outs), allocate(op), 4))
    else:
        lines += ["    " + layout.assign(out, allocate(op), 4) for out in outs]
    if len(outs) == 1:
        tensors = [a.name for a in op.tensor_args]
        written = f"_support.written_to({', '.join([outs[0], reference, *tensors])})"
        return lines + ["    " + layout.statement(f"return {written}", 4)]
    lines.append("    " + layout.assign(expected, reference, 4))
    copies = [f"{out}.copy_({expected}[{i}])" for i, out in enumerate(outs)]
    return lines + ["    " + returns(copies, 4)]


def writes_result(op: Op) -> bool:
    """Whether the op's Python kernel returns its reference's result through _support.written_to: one
    fresh output, of a kind whose kernel writes the reference into its outputs (_Kind.written)."""
    return "python" in op.kernel_languages and _kind(op).written and not op.is_mutating and op.num_outputs == 1


def any_written_result(package: Package) -> bool:
    return any(writes_result(op) for op in package.ops)


def _custom_kernel_body(op: Op) -> list[str]:
    """The reference written into the outputs of the op's own allocator."""
    if op.is_mutating:
        return _custom_mutating_body(op)
    reference = call_text(f"reference.{op.name}", op)
    if sized_by_data(op):  # only the data sizes the output: the reference's own, copied (an output aliases no input)
        return ['    """The PyTorch reference as a kernel: it allocates its output, whose size the data decides."""',
                "    " + layout.assign("return", _clone(op, reference), 4)]
    local, outs = locals_for(op), op.output_names
    lines = ['    """The PyTorch reference as a kernel, written into outputs allocated as `fake` describes."""']
    if op.num_outputs == 1 and not returns_list(op):
        return lines + ["    " + layout.assign(outs[0], allocate(op), 4),
                        "    " + layout.assign("return", f"{outs[0]}.copy_({reference})", 4)]
    output, want, outputs, expected = local.output, local.want, local.outputs, local.expected
    pairs = f"zip({outputs}, {expected}, strict=True)"
    copies = f"{output}.copy_({want}) for {output}, {want} in {pairs}"
    return lines + ["    " + layout.assign(outputs, allocate(op), 4),
                    "    " + layout.assign(expected, reference, 4),
                    "    " + layout.statement(f"return [{copies}]" if returns_list(op) else f"return tuple({copies})", 4)]


def _clone(op: Op, reference: str) -> str:
    """The reference's outputs copied, so that none is a view of an input."""
    if op.num_outputs == 1:
        return f"{reference}.clone()"
    local = locals_for(op)
    return f"tuple({local.output}.clone() for {local.output} in {reference})"


def _custom_mutating_body(op: Op) -> list[str]:
    """The reference written into the mutated arguments (those given), then into the returns."""
    reference = call_text(f"reference.{op.name}", op)
    local, outs, written = locals_for(op), op.output_names, op.mutated_args
    lines = ['    """The PyTorch reference as a kernel, written into the mutated arguments."""']
    if len(written) == 1 and not outs:  # the reference returns the one value
        name = written[0].name
        if not written[0].is_optional:
            return lines + ["    " + layout.statement(f"{name}.copy_({reference})", 4)]
        return lines + [f"    if {name} is not None:", "        " + layout.statement(f"{name}.copy_({reference})", 8)]
    if outs:
        allocated = local.outputs if len(outs) > 1 else outs[0]
        lines.append("    " + layout.assign(allocated, allocate(op), 4))
    if len(written) > 1:  # a value may be another written argument itself (a swap): copied before any write
        value = local.output
        reference = f"tuple(None if {value} is None else {value}.clone() for {value} in {reference})"
    lines.append("    " + layout.assign(local.expected, reference, 4))  # before any argument is written
    for i, arg in enumerate(written):
        copy = f"{arg.name}.copy_({local.expected}[{i}])"
        lines += [f"    if {arg.name} is not None:", f"        {copy}"] if arg.is_optional else [f"    {copy}"]
    if len(outs) == 1:
        return lines + [f"    return {outs[0]}.copy_({local.expected}[{len(written)}])"]
    if outs:
        output, want, pairs = local.output, local.want, f"zip({local.outputs}, {local.expected}[{len(written)}:], strict=True)"
        return lines + ["    " + layout.statement(f"return tuple({output}.copy_({want}) for {output}, {want} in {pairs})", 4)]
    return lines


def _split_kernel_body(op: Op) -> list[str]:
    """A `split` op's: the halves bound after the docstring, for the outputs' allocation."""
    doc, *body = _written_kernel_body(op)
    return [doc, *split.bind(op), *body]


# -- what differs between op kinds: one row per kind


class _Kind(NamedTuple):
    inputs: Callable[[Op], tuple[Arg, ...]]  # the Tensors its reference upcasts
    return_line: Callable[[Op], str]  # the reference's `return`
    python_kernel_body: Callable[[Op], list[str]]
    dtype_lines: Callable[[Op], list[str]] = _lead_dtype  # the reference's line that reads the dtype(s) it returns
    written: bool = True  # python_kernel_body is _written_kernel_body's (writes_result)


_KINDS = {
    PointwiseCompute: _Kind(lambda op: op.read_args, _pointwise_return, _written_kernel_body),
    RowReduction: _Kind(lambda op: op.read_args, _reduction_return, _written_kernel_body),
    RowNormalization: _Kind(lambda op: op.read_args, norms.reference_return,
                            lambda op: _written_kernel_body(op) + norms.python_forward_kernel(op),
                            dtype_lines=norm_sums.reference_dtypes),
    GatedSplit: _Kind(lambda op: op.read_args, _pointwise_return, _split_kernel_body,
                      dtype_lines=lambda op: _lead_dtype(op) + split.bind(op, 0, "")),
    SplitGradient: _Kind(lambda op: op.read_args, _joined_return, _split_kernel_body,
                         dtype_lines=lambda op: _lead_dtype(op) + split.bind(op, 0, "")),
    RowGradient: _Kind(lambda op: op.read_args, _pointwise_return, _row_gradient_kernel_body,
                       dtype_lines=lambda op: _lead_dtype(op) + split.bind(op, 0, ""), written=False),
    CustomKernel: _Kind(_custom_reference_inputs, _custom_return, _custom_kernel_body, dtype_lines=_custom_dtype,
                        written=False),
}


def _kind(op: Op) -> _Kind:
    return _KINDS[type(op.body)]
