"""This module translates the model into the generated Triton: the kernels of kernels/<op>.py and
the launchers that allocate, broadcast and launch them.

Functions over the model's Op, which the templates print; `kernel_template` takes the template of
the op's kind (pointwise or row reduction) from its body, the one place that chooses between kinds.
"""

from __future__ import annotations

from typing import NamedTuple

from ..model import Op, Write
from ..names import locals_for
from . import python
from .layout import literal, wrap

# -- the module


def kernel_template(op: Op) -> str:
    """The template of the op's kind: its Triton kernel and launcher."""
    return op.body.templates["triton"]


def module_doc(op: Op) -> str:
    return f"Kernels of {op.qualname}: a Triton kernel and its launcher." if op.uses_triton else f"Kernels of {op.qualname}."


def imports(op: Op) -> list[str]:
    """The imports of a kernels module: Triton where the op has a Triton kernel, its interpreter for CPU
    tensors, the reference for a `python` kernel."""
    lines = ["import torch", "import triton", "import triton.language as tl"] if op.uses_triton else []
    lines.append("from torch import Tensor")
    if op.uses_interpreter:
        lines.append("from triton.runtime.interpreter import InterpretedFunction")
    own = "_support, reference" if has_python_kernel(op) else "_support"
    return [*lines, "", f"from .. import {own}"]


def has_python_kernel(op: Op) -> bool:
    return "python" in op.kernel_languages


def kernel(op: Op) -> str:
    return locals_for(op).derived("kernel", op.stem)


def interpreted(op: Op) -> str:
    """The module-level name of the kernel in Triton's interpreter."""
    return locals_for(op).derived("interpreted", op.stem)


def launcher(op: Op) -> str:
    return f"{op.stem}_triton"


# -- kernels


# The kernels' parameters that are compile-time constants.
CONSTEXPRS = frozenset({"BLOCK_SIZE", "BLOCK_ROWS", "BLOCK_COLS", "COL_BLOCKS", "COMPUTE_DTYPE"})


def _parameter(op: Op, name: str) -> str:
    """A kernel parameter of names.PYTHON_LOCALS, as the kernel's `def` declares it."""
    return f"{getattr(locals_for(op), name)}: tl.constexpr" if name in CONSTEXPRS else getattr(locals_for(op), name)


def kernel_define(op: Op, *sizes: str) -> str:
    """The kernel's `def`, one parameter per line: tensor pointers, scalars, then `sizes` (the names of
    PYTHON_LOCALS), the compute dtype and a HAS_x flag per optional Tensor the expressions test."""
    local = locals_for(op)
    constants = [_parameter(op, "COMPUTE_DTYPE"), *(f"{local.flag(a.name)}: tl.constexpr" for a in op.tested_optionals)]
    parameters = [local.pointer(t.name) for t in op.kernel_tensors] + [a.name for a in op.kernel_scalars]
    return wrap(f"def {kernel(op)}(", [*parameters, *(_parameter(op, size) for size in sizes), *constants], "):", explode=True)


def loads(op: Op, indent: int) -> list[str]:
    """Each Tensor the expressions read, loaded into the compute dtype; an optional one only when given."""
    pad, local = " " * indent, locals_for(op)
    lines = []
    for arg in op.read_args:
        offsets, mask = f"{local.pointer(arg.name)} + {local.offsets}", f"mask={local.mask}"
        load = f"{arg.name} = tl.load({offsets}, {mask}).to({local.COMPUTE_DTYPE})"
        if arg.is_optional:
            lines += [f"{pad}if {local.flag(arg.name)}:", f"{pad}    {load}",
                      f"{pad}else:  # not given: a placeholder, which the present({arg.name}) branches never choose",
                      f"{pad}    {arg.name} = 0.0"]
        else:
            lines.append(pad + load)
    return lines


def stores(op: Op) -> list[str]:
    """A pointwise kernel's writes: each value stored in its tensor's dtype."""
    local = locals_for(op)
    lines = []
    for write in op.writes:
        value, name = write.expr.to_triton(), write.name
        pointer = local.pointer(name)
        if write.arg:  # a mutated argument: its name holds the loaded value, which later writes may read
            stored = f"{python.layout.operand(value)}.to({pointer}.dtype.element_ty)"
        else:
            lines.append("    " + python.layout.assign(name, value, 4))
            stored = f"{name}.to({pointer}.dtype.element_ty)"
        lines.append("    " + wrap("tl.store(", [f"{pointer} + {local.offsets}", stored, f"mask={local.mask}"], ")", 4))
    return lines


def dense(op: Op, write: Write) -> str:
    """The dense tensor the kernel writes: a returned output itself, a copy of a strided argument."""
    return locals_for(op).derived("dense", write.name) if write.arg else write.name


def reduced_values(op: Op) -> str:
    """The values a reduction sums up, cast: under torch.compile, Inductor passes float scalars as float64."""
    local = locals_for(op)
    value = f"{python.layout.operand(op.writes[0].expr.to_triton())}.to({local.COMPUTE_DTYPE})"
    return python.layout.assign(local.values, value, 8)


def identity(op: Op) -> str:
    """The running totals of a block of rows before any column is read."""
    # tl.full, not tl.zeros: the interpreter cannot call Triton's @triton.jit helpers in-process.
    local = locals_for(op)
    value = {"max": 'float("-inf")', "min": 'float("inf")'}.get(op.body.reduction.kind, "0.0")
    return f"tl.full(({local.BLOCK_ROWS}, {local.BLOCK_COLS}), {value}, dtype={local.COMPUTE_DTYPE})"


def combine(op: Op) -> str:
    """The running totals with one more block of values."""
    local = locals_for(op)
    if op.body.reduction.kind in ("max", "min"):
        return f"tl.{op.body.reduction.kind}imum({local.total}, {local.values})"
    return f"{local.total} + {local.values}"


def reduce(op: Op) -> list[str]:
    """The rows' totals reduced: tl.reduce with tl.<f>'s own combine function, which Triton's
    interpreter runs in-process (it cannot call the @triton.jit tl.<f>)."""
    reduction, local, (out,) = op.body.reduction, locals_for(op), op.output_names
    function = f"tl.{'sum' if reduction.kind in ('sum', 'mean') else reduction.kind}"
    combine_function = {"max": "tl.standard._elementwise_max", "min": "tl.standard._elementwise_min"}.get(
        reduction.kind, "tl.standard._sum_combine"
    )
    lines = [f"    # tl.reduce with {function}'s own combine function: what {function} does, which Triton's",
             f"    # interpreter also runs in-process (it cannot call the @triton.jit {function} itself).",
             f"    {out} = tl.reduce({local.total}, 1, {combine_function})"]
    if reduction.is_mean:
        lines += ["    # An empty row gives 0 / 0 = nan, as torch.mean.", f"    {out} = {out} / {local.n_cols}"]
    return lines


def store_rows(op: Op) -> str:
    """A row reduction's store: each row's result, in the output's dtype."""
    local, out = locals_for(op), op.output_names[0]
    pointer = local.pointer(out)
    return f"tl.store({pointer} + {local.rows}, {out}.to({pointer}.dtype.element_ty), mask={local.row_mask})"


# -- launchers


def kernel_for(op: Op, tensor: str) -> str:
    """The Triton kernel a launcher runs: compiled for CUDA tensors, interpreted for CPU ones."""
    if op.uses_interpreter and op.uses_compiled_triton:
        return f"{kernel(op)} if {tensor}.is_cuda else {interpreted(op)}"
    return interpreted(op) if op.uses_interpreter else kernel(op)


def launcher_template(op: Op) -> str:
    """The launcher's head: a triton_op's splits into the eager launcher and the launch its body traces."""
    return "package/kernels/_launcher_triton_op.py.j2" if op.is_triton_op else "package/kernels/_launcher.py.j2"


def first_written(op: Op) -> str:
    """The tensor whose shape, dtype and device a launch follows: the first output, or the first written argument."""
    return op.writes[0].name


def outputs(op: Op) -> list[str]:
    """A launcher's first lines: its outputs allocated, or a mutating op's arguments checked."""
    if op.is_mutating:
        return ["    " + python.check_written(op, 4)]
    return ["    " + python.layout.assign(out, python.allocate(op), 4) for out in op.output_names]


def empty_return(op: Op) -> str:
    """What a launcher returns without launching (no elements)."""
    return "return" if op.is_mutating else f"return {', '.join(op.output_names)}"


def broadcast(op: Op, shape: str = "") -> list[str]:
    """The inputs, expanded to the first written tensor's shape (or to the local `shape` of
    PYTHON_LOCALS) and made dense, so that the kernel indexes them flat."""
    shape = getattr(locals_for(op), shape) if shape else f"{first_written(op)}.shape"
    names = [a.name for a in op.input_args]
    if not names:
        return []
    target = f"({names[0]},)" if len(names) == 1 else ", ".join(names)
    return ["    " + wrap(f"{target} = _support.broadcast_contiguous(", [shape, *names], ")", 4)]


def dense_buffers(op: Op) -> list[str]:
    """A mutating op's written arguments as dense tensors; strided ones get the values copied back."""
    if not op.is_mutating:
        return []
    return ["    # The kernel writes dense tensors; strided arguments get the values copied in afterwards.",
            *(f"    {dense(op, w)} = {w.name}.contiguous()" for w in op.mutated_writes)]


def custom_kernel_choice(op: Op) -> str:
    """`kernel = ...` in a custom kernel's skeleton: it follows the first output."""
    return python.layout.statement(f"{locals_for(op).kernel} = {kernel_for(op, op.output_names[0])}", 4)


def kernel_choice(op: Op) -> list[str]:
    """`kernel = ...`: the launcher of a triton_op takes its kernel as a parameter instead."""
    if op.is_triton_op:
        return []
    return ["    " + python.layout.statement(f"{locals_for(op).kernel} = {kernel_for(op, first_written(op))}", 4)]


def compute_dtype(op: Op, tensor: str = "") -> str:
    """The dtype the kernel computes in, from `tensor`'s (the first written one's)."""
    tensor = tensor or first_written(op)
    return f"{locals_for(op).compute_dtype} = tl.float64 if {tensor}.dtype == torch.float64 else tl.float32"


def _arguments(op: Op) -> list[str]:
    # bools go in as ints: Triton's interpreter (3.6) cannot take a Python bool as a kernel scalar.
    scalars = [f"int({a.name})" if a.kind == "bool" else a.name for a in op.kernel_scalars]
    dense_by_name = {w.name: dense(op, w) for w in op.writes}
    return [dense_by_name.get(t.name, t.name) for t in op.kernel_tensors] + scalars


def grid(op: Op, *blocks: str) -> str:
    """`grid = (triton.cdiv(n, BLOCK),)`: one program per block; `blocks` are the PYTHON_LOCALS of n and BLOCK."""
    local = locals_for(op)
    n, block = (getattr(local, name) for name in blocks)
    return f"{local.grid} = (triton.cdiv({n}, {block}),)"


def launch(op: Op, sizes: list[str], constants: list[str]) -> list[str]:
    """`kernel[grid](...)`, one argument per line; inside a device guard where a launcher of its own
    runs CUDA tensors (a triton_op's launch runs where its callers put it). `sizes` are PYTHON_LOCALS
    passed as they are; `constants` (a PYTHON_LOCALS constexpr, its value) passed by keyword."""
    local = locals_for(op)
    flags = [f"{local.flag(a.name)}={a.name} is not None" for a in op.tested_optionals]
    keywords = [f"{getattr(local, name)}={value}" for name, value in constants]
    arguments = [*_arguments(op), *(getattr(local, size) for size in sizes), *keywords,
                 f"{local.COMPUTE_DTYPE}={local.compute_dtype}", *flags]
    if op.uses_compiled_triton and not op.is_triton_op:
        return _guarded(op, first_written(op), arguments)
    return ["    " + wrap(_launch(op), arguments, ")", 4, explode=True)]


def pointwise_constants(op: Op) -> list[tuple[str, str]]:
    """A pointwise kernel's block size, as launch passes it."""
    return [("BLOCK_SIZE", locals_for(op).BLOCK_SIZE)]


def row_constants(op: Op) -> list[tuple[str, str]]:
    """A row reduction's block of rows and columns, and how many blocks of columns make a row."""
    local = locals_for(op)
    return [("BLOCK_ROWS", local.block_rows), ("BLOCK_COLS", local.block_cols),
            ("COL_BLOCKS", f"triton.cdiv({local.n_cols}, {local.block_cols})")]


def _launch(op: Op) -> str:
    local = locals_for(op)
    return f"{local.kernel}[{local.grid}]("


def _guarded(op: Op, tensor: str, arguments: list[str]) -> list[str]:
    return ["    # On the tensors' GPU, which need not be the current one.",
            f"    with _support.device_guard({tensor}):",
            "        " + wrap(_launch(op), arguments, ")", 8, explode=True)]


def epilogue(op: Op) -> list[str]:
    """After the launch: strided written arguments get their values, or the outputs are returned."""
    if not op.is_mutating:
        return [f"    return {', '.join(op.output_names)}"]
    lines = []
    for write in op.mutated_writes:
        lines += [f"    if {dense(op, write)} is not {write.name}:", f"        {write.name}.copy_({dense(op, write)})"]
    return lines


# -- custom kernels' skeletons


def skeleton_define(op: Op) -> str:
    local = locals_for(op)
    tensors = [local.pointer(name) for name in [a.name for a in op.tensor_args] + list(op.output_names)]
    scalars = [a.name for a in op.args if not a.is_tensor]
    sizes = [output.numel for output in skeleton_outputs(op)]
    constants = [_parameter(op, "BLOCK_SIZE"), _parameter(op, "COMPUTE_DTYPE")]
    return wrap(f"def {kernel(op)}(", [*tensors, *scalars, *sizes, *constants], "):", explode=True)


class SkeletonOutput(NamedTuple):
    """An output of a custom kernel's skeleton, with its own size and mask (outputs may differ in shape)."""

    numel: str  # the kernel parameter holding its number of elements
    mask: str  # the kernel's local masking its stores
    name: str  # `out`, or `out0`, `out1`, ...
    size: str  # what the launcher passes for `numel`


def skeleton_outputs(op: Op) -> list[SkeletonOutput]:
    """The outputs of a custom kernel's skeleton: a single one under the launcher's `n_elements` and `mask`."""
    local = locals_for(op)
    if op.num_outputs == 1:
        return [SkeletonOutput(local.n_elements, local.mask, op.output_names[0], local.n_elements)]
    return [SkeletonOutput(local.derived("numel", name), local.derived("mask", name), name, f"{name}.numel()")
            for name in op.output_names]


def skeleton_stores(op: Op) -> list[str]:
    """The skeleton's placeholder stores: zeros, each output under its mask."""
    local = locals_for(op)
    lines = []
    for numel, mask, name, _ in skeleton_outputs(op):
        if op.num_outputs > 1:
            lines.append(f"    {mask} = {local.offsets} < {numel}")
        lines.append(f"    {name} = tl.full(({local.BLOCK_SIZE},), 0.0, dtype={local.COMPUTE_DTYPE})")
        pointer = local.pointer(name)
        stored = f"{name}.to({pointer}.dtype.element_ty)"
        lines.append("    " + wrap("tl.store(", [f"{pointer} + {local.offsets}", stored, f"mask={mask}"], ")", 4))
    return lines


def skeleton_grid_size(op: Op) -> list[str]:
    """The elements the grid covers: the output's, or the largest output's."""
    n_elements = locals_for(op).n_elements
    if op.num_outputs == 1:
        return [f"    {n_elements} = {op.output_names[0]}.numel()"]
    sizes = ", ".join(f"{name}.numel()" for name in op.output_names)
    return ["    # The grid covers the largest output.", f"    {n_elements} = max({sizes})"]


def skeleton_launch(op: Op) -> list[str]:
    scalars = [f"int({a.name})" if a.kind == "bool" else a.name for a in op.args if not a.is_tensor]
    arguments = [a.name for a in op.tensor_args] + list(op.output_names) + scalars
    local = locals_for(op)
    constants = [f"{local.BLOCK_SIZE}={local.BLOCK_SIZE}", f"{local.COMPUTE_DTYPE}={local.compute_dtype}"]
    arguments += [output.size for output in skeleton_outputs(op)] + constants
    if op.is_triton_op:  # kopgen's eager CUDA kernel guards the device; a trace needs no guard
        local = locals_for(op)
        return ["    " + wrap(f"{local.wrap}({local.kernel})[{local.grid}](", arguments, ")", 4, explode=True)]
    if op.uses_compiled_triton:
        return _guarded(op, op.output_names[0], arguments)
    return ["    " + wrap(_launch(op), arguments, ")", 4, explode=True)]


def custom_launcher_template(op: Op) -> str:
    """The head of a custom kernel's launcher: a triton_op's takes `wrap`, what torch.compile traces it with."""
    if op.is_triton_op:
        return "package/kernels/_custom_launcher_triton_op.py.j2"
    return "package/kernels/_custom_launcher.py.j2"


def wrapped_launcher_define(op: Op) -> str:
    """`def <op>_triton(<the op's arguments>, *, wrap=_identity) -> ...:`."""
    keyword = f"{locals_for(op).wrap}=_identity"
    parameters = python.parameters(op)
    parameters += [keyword] if "*" in parameters else ["*", keyword]
    returns = python.return_annotation(op)
    return wrap(f"def {launcher(op)}(", parameters, f") -> {returns}:")


def contiguous_inputs(op: Op) -> str:
    """The inputs made dense, so that the kernel can index them flat."""
    names = [a.name for a in op.tensor_args]
    values = [f"{name}.contiguous()" for name in names]
    if len(names) == 1:
        return f"{names[0]} = {values[0]}"
    return python.layout.statement(f"{', '.join(names)} = {', '.join(values)}", 4)


def not_implemented(op: Op, package_name: str) -> str:
    message = f"{op.qualname} has no kernel yet: write the body of {kernel(op)} in {package_name}/kernels/{op.name}.py"
    return wrap("raise NotImplementedError(", [literal(message)], ")", 4)



def skeleton_prologue(op: Op) -> list[str]:
    """The skeleton kernel's offsets, and where the user's code goes."""
    local = locals_for(op)
    offsets = f"    {program_offsets(op)}"
    if op.num_outputs == 1:
        return ["    # One program per BLOCK_SIZE elements of the output; 64-bit offsets.", offsets,
                f"    {local.mask} = {local.offsets} < {local.n_elements}",
                "    # TODO: load what this block of the output needs (the inputs are contiguous) and compute it."]
    return ["    # One program per BLOCK_SIZE elements of the largest output; 64-bit offsets. The outputs",
            "    # may differ in size: each one is stored under its own mask.", offsets,
            "    # TODO: load what this block of each output needs (the inputs are contiguous) and compute it."]


def skeleton_outputs_allocated(op: Op) -> str:
    return "the outputs are allocated" if op.num_outputs > 1 else "the output is allocated"


def skeleton_outputs_call(op: Op) -> str:
    """The skeleton launcher's outputs, allocated as the spec's `fake` describes."""
    return python.layout.assign(", ".join(op.output_names), python.allocate(op), 4)


def broadcast_shape(op: Op) -> str:
    """A reduction's broadcast input shape, whose last dimension it reduces."""
    tensors = ", ".join(a.name for a in op.tensor_args)
    shape = locals_for(op).shape
    return python.layout.statement(f"{shape} = _support.pointwise_shape({literal(op.qualname)}, {tensors})", 4)


def program_offsets(op: Op) -> str:
    """A pointwise kernel's first line: the offsets of its program's block, in 64 bits."""
    local = locals_for(op)
    return f"{local.offsets} = tl.program_id(0).to(tl.int64) * {local.BLOCK_SIZE} + tl.arange(0, {local.BLOCK_SIZE})"


def launch_function(op: Op) -> str:
    """A triton_op's launch of any kernel (bare, interpreted, or wrapped by wrap_triton)."""
    return locals_for(op).derived("launch", op.stem)


def launch_with(op: Op, indent: int) -> str:
    """The eager launcher of a triton_op: its launch, with the kernel for the tensors' device."""
    return python.call(launch_function(op), op, indent, first=[kernel_for(op, op.lead.name)], prefix="return ")
