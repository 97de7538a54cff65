"""This module translates the model into the generated Triton: the kernels of kernels/<op>.py and
the launchers that allocate, broadcast and launch them.

Functions over the model's Op, which the templates print; `kernel_template` takes the template of
the op's kind (pointwise or row reduction) from its body, the one place that chooses between kinds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..model import CustomKernel, Op, Write
from ..names import locals_for
from . import nans, python, split
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
    lines = python.typing_imports([op])
    if op.uses_triton or python.annotations_need_torch([op]):
        lines.append("import torch")
    lines += ["import triton", "import triton.language as tl"] if op.uses_triton else []
    lines.append("from torch import Tensor")
    if op.uses_interpreter and not isinstance(op.body, CustomKernel):  # a skeleton's: _support.interpreted
        lines.append("from triton.runtime.interpreter import InterpretedFunction")
    # A `python` kernel that only copies the reference into the arguments it writes needs no helper.
    helpers = op.uses_triton or op.num_outputs or op.mutated_writes
    own = ["_support"] * bool(helpers) + ["reference"] * has_python_kernel(op)
    return [*lines, "", f"from .. import {', '.join(own)}"]


def has_python_kernel(op: Op) -> bool:
    return "python" in op.kernel_languages


def kernel(op: Op) -> str:
    return locals_for(op).derived("kernel", op.stem)


def interpreted(op: Op) -> str:
    """The module-level name of the kernel in Triton's interpreter."""
    return locals_for(op).derived("interpreted", op.stem)


def interpreted_definition(op: Op) -> str:
    """`<kernel>_interpreted = InterpretedFunction(<kernel>.fn)` (a skeleton's: _support.interpreted), as ruff wraps it."""
    value = f"_support.interpreted({kernel(op)})" if isinstance(op.body, CustomKernel) else f"InterpretedFunction({kernel(op)}.fn)"
    return python.layout.assign(interpreted(op), value, 0)


def launcher(op: Op) -> str:
    return f"{op.stem}_triton"


# -- kernels


# The kernels' parameters that are compile-time constants.
CONSTEXPRS = frozenset({"BLOCK_SIZE", "BLOCK_ROWS", "BLOCK_COLS", "CONST_COLS", "COMPUTE_DTYPE", "ONE_PASS", "SAVE_STATS", "COLUMN_SUMS", "CONST_STEPS"})


def _parameter(op: Op, name: str) -> str:
    """A kernel parameter of names.PYTHON_LOCALS, as the kernel's `def` declares it."""
    return f"{getattr(locals_for(op), name)}: tl.constexpr" if name in CONSTEXPRS else getattr(locals_for(op), name)


def _strided(op: Op, size: str) -> list[str]:
    """The tensors a kernel indexes through their strides: all ("strides": a pointwise kernel's), or the
    inputs ("input_strides": a row reduction's, whose output holds one value per row)."""
    return [t.name for t in op.kernel_tensors if size == "strides" or t.name not in op.output_names]


def kernel_define(op: Op, *sizes: str, pointers: Sequence[str] = ()) -> str:
    """The kernel's `def`, one parameter per line: tensor pointers (then `pointers`, more of them), scalars,
    then `sizes` (the names of PYTHON_LOCALS; "strides": each strided tensor's row and column stride), the
    compute dtype and a HAS_x flag per optional Tensor the expressions test."""
    local = locals_for(op)
    constants = [_parameter(op, "COMPUTE_DTYPE"), *(f"{local.flag(a.name)}: tl.constexpr" for a in op.tested_optionals)]
    parameters = [local.pointer(t.name) for t in op.kernel_tensors] + list(pointers) + [a.name for a in op.kernel_scalars]
    for size in sizes:
        parameters += _stride_parameters(op, size) if size.endswith("strides") else [_parameter(op, size)]
    return wrap(f"def {kernel(op)}(", [*parameters, *constants], "):", explode=True)


def _stride_parameters(op: Op, size: str) -> list[str]:
    local = locals_for(op)
    return [local.derived(kind, name) for name in _strided(op, size) for kind in ("row_stride", "col_stride")]


def _offsets(op: Op, name: str) -> str:
    """The offsets of `name`'s elements in a block of rows x columns, through its strides."""
    local = locals_for(op)
    row, col = local.derived("row_stride", name), local.derived("col_stride", name)
    return f"{local.rows}[:, None] * {row} + {local.cols}[None, :] * {col}"


def loads(op: Op, indent: int) -> list[str]:
    """Each Tensor the expressions read, loaded into the compute dtype; an optional one only when given."""
    pad, local = " " * indent, locals_for(op)
    lines = []
    for arg in op.read_args:
        offsets, mask = f"{local.pointer(arg.name)} + {_offsets(op, arg.name)}", f"mask={local.mask}"
        value = f"tl.load({offsets}, {mask}).to({local.COMPUTE_DTYPE})"
        if arg.is_optional:
            lines += [f"{pad}if {local.flag(arg.name)}:", f"{pad}    {python.layout.assign(arg.name, value, indent + 4)}",
                      f"{pad}else:  # not given: a placeholder, which the present({arg.name}) branches never choose",
                      f"{pad}    {arg.name} = 0.0"]
        else:
            lines.append(pad + python.layout.assign(arg.name, value, indent))
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
        lines.append("    " + wrap("tl.store(", [f"{pointer} + {_offsets(op, name)}", stored, f"mask={local.mask}"], ")", 4))
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
    """The running totals with one more block of values, where the mask holds (a statement at column 8)."""
    local = locals_for(op)
    value = f"tl.where({local.mask}, {nans.combined(op.body.reduction.kind, local.total, local.values)}, {local.total})"
    return python.layout.assign(local.total, value, 8)


def reduce(op: Op) -> list[str]:
    """The rows' totals reduced: tl.reduce with tl.<f>'s own combine function, which Triton's
    interpreter runs in-process (it cannot call the @triton.jit tl.<f>)."""
    reduction, local, (out,) = op.body.reduction, locals_for(op), op.output_names
    function = f"tl.{'sum' if reduction.kind in ('sum', 'mean') else reduction.kind}"
    combine_function = {"max": "tl.standard._elementwise_max", "min": "tl.standard._elementwise_min"}.get(
        reduction.kind, "tl.standard._sum_combine"
    )
    lines = [] if reduction.kind in ("max", "min") else [  # nans.reduced explains its own
        f"    # tl.reduce with {function}'s own combine function: what {function} does, which Triton's",
        f"    # interpreter also runs in-process (it cannot call the @triton.jit {function} itself)."]
    lines += nans.reduced(op, reduction.kind, out, local.total, combine_function, 4)
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
    """A launcher's first lines: a `split` argument's halves, then its outputs allocated, or a mutating
    op's arguments checked."""
    if op.is_mutating:
        return [*split.bind(op), "    " + python.check_written(op, 4)]
    allocated = ("    " + python.layout.assign(out, python.allocate(op), 4) for out in op.output_names)
    return [*split.bind(op), *allocated, *split.bind_output(op)]


def empty_return(op: Op) -> str:
    """What a launcher returns without launching (no elements)."""
    return "return" if op.is_mutating else f"return {python.returned(op)}"


def tiles(op: Op) -> list[str]:
    """A pointwise launcher's `n_rows, n_cols, strides, block_rows, block_cols`: every tensor read
    through its strides, or the inputs copied dense where more than two dimensions are left."""
    local = locals_for(op)
    shape = f"{first_written(op)}.shape"
    arguments = [shape, local.BLOCK_SIZE, *kernel_arguments(op)[: len(op.kernel_tensors)]]
    return [*_layout(op, local.tiles, "tiles", arguments, "More than two dimensions left once merged"),
            f"    {local.n_rows}, {local.n_cols}, {local.strides}, {local.block_rows}, {local.block_cols} = {local.tiles}"]


def row_layout(op: Op) -> list[str]:
    """A row reduction's `n_rows, n_cols, strides`: its inputs read through their strides, or copied
    dense where their leading dimensions do not merge into rows."""
    local = locals_for(op)
    arguments = [local.shape, *_strided(op, "input_strides")]
    return [*_layout(op, local.layout, "row_layout", arguments, "Leading dimensions that do not merge into one"),
            f"    {local.n_rows}, {local.n_cols}, {local.strides} = {local.layout}"]


def _layout(op: Op, target: str, helper: str, arguments: list[str], why: str) -> list[str]:
    """`target = _support.<helper>(...)`; where it gives None, the inputs expanded to the shape (the first
    argument) and made dense, and the helper called again."""
    def call(indent: int) -> str:
        return " " * indent + wrap(f"{target} = _support.{helper}(", arguments, ")", indent)

    names = [a.name for a in op.input_args]
    if not names:  # dense tensors of one shape always have a layout
        return [call(4)]
    inputs = f"({names[0]},)" if len(names) == 1 else ", ".join(names)
    return [call(4), f"    # {why}: the kernel reads dense copies.", f"    if {target} is None:",
            "        " + wrap(f"{inputs} = _support.broadcast_contiguous(", [arguments[0], *names], ")", 8), call(8)]


def dense_buffers(op: Op) -> list[str]:
    """A mutating op's written arguments as dense tensors; strided ones get the values copied back."""
    if not op.is_mutating:
        return []
    return ["    # The kernel writes dense tensors; strided arguments get the values copied in afterwards.",
            *(f"    {dense(op, w)} = {w.name}.contiguous()" for w in op.mutated_writes)]


def custom_kernel_choice(op: Op) -> str:
    """`kernel = ...` in a custom kernel's skeleton: it follows the first tensor it writes."""
    return python.layout.statement(f"{locals_for(op).kernel} = {kernel_for(op, skeleton_lead(op))}", 4)


def kernel_choice(op: Op) -> list[str]:
    """`kernel = ...`: the launcher of a triton_op takes its kernel as a parameter instead."""
    if op.is_triton_op:
        return []
    return ["    " + python.layout.statement(f"{locals_for(op).kernel} = {kernel_for(op, first_written(op))}", 4)]


def compute_dtype(op: Op, tensor: str = "") -> str:
    """The dtype the kernel computes in, from `tensor`'s (the first written one's)."""
    tensor = tensor or first_written(op)
    return f"{locals_for(op).compute_dtype} = tl.float64 if {tensor}.dtype == torch.float64 else tl.float32"


def kernel_arguments(op: Op) -> list[str]:
    """What a launcher passes the kernel: its Tensors (dense copies of written ones), then its scalars."""
    # bools go in as ints: Triton's interpreter (3.6) cannot take a Python bool as a kernel scalar.
    scalars = [f"int({a.name})" if a.kind == "bool" else a.name for a in op.kernel_scalars]
    dense_by_name = {w.name: dense(op, w) for w in op.writes}
    return [dense_by_name.get(t.name, t.name) for t in op.kernel_tensors] + scalars


def grid(op: Op, *blocks: str) -> str:
    """`grid = ((n + BLOCK - 1) // BLOCK,)`: one program per block; `blocks` are the PYTHON_LOCALS of n and
    BLOCK. Not triton.cdiv, a constexpr_function that costs microseconds per call in host code."""
    local = locals_for(op)
    n, block = (getattr(local, name) for name in blocks)
    return f"{local.grid} = (({n} + {block} - 1) // {block},)  # one program per block"


def launch(op: Op, sizes: list[str], constants: list[str], pointers: Sequence[str] = ()) -> list[str]:
    """`kernel[grid](...)`, one argument per line; `_support.launch(kernel, grid, ...)` where the kernel
    runs compiled (the launch cached per specialisation, on the tensors' GPU). `sizes` are PYTHON_LOCALS
    passed as they are; `constants` (a PYTHON_LOCALS constexpr, its value) passed by keyword; `pointers`
    (more tensors) after the op's own."""
    local = locals_for(op)
    flags = [f"{local.flag(a.name)}={a.name} is not None" for a in op.tested_optionals]
    keywords = [f"{_keyword(local, name)}={value}" for name, value in constants]
    tensors = len(op.kernel_tensors)
    arguments = [*kernel_arguments(op)[:tensors], *pointers, *kernel_arguments(op)[tensors:],
                 *(_size(local, size) for size in sizes), *keywords,
                 f"{local.COMPUTE_DTYPE}={local.compute_dtype}", *flags]
    if op.uses_compiled_triton:
        return ["    " + wrap("_support.launch(", [local.kernel, local.grid, *arguments], ")", 4, explode=True)]
    return ["    " + wrap(_launch(op), arguments, ")", 4, explode=True)]


def _size(local, name: str) -> str:
    """A size `launch` passes: a local of PYTHON_LOCALS, or `*strides`, each tensor's two strides."""
    return f"*{local.strides}" if name == "strides" else getattr(local, name)


def _keyword(local, name: str) -> str:
    """A keyword `launch` passes: a constexpr of the kernel, or Triton's own num_warps."""
    return name if name == "num_warps" else getattr(local, name)


def block_constants(op: Op) -> list[tuple[str, str]]:
    """A kernel's block of rows and columns, as launch passes it."""
    local = locals_for(op)
    return [("BLOCK_ROWS", local.block_rows), ("BLOCK_COLS", local.block_cols)]


def row_constants(op: Op) -> list[tuple[str, str]]:
    """A row reduction's block of rows and columns, the row length where the interpreter needs it as a
    constexpr, and the warps that run it."""
    local = locals_for(op)
    const_cols = f"None if {first_written(op)}.is_cuda else {local.n_cols}"
    return [*block_constants(op), ("CONST_COLS", const_cols), ("num_warps", local.num_warps)]


def tile_grid(op: Op) -> str:
    """`grid = (...)`: one program per block of rows x columns."""
    local = locals_for(op)
    # Plain ceil division, not triton.cdiv (see grid).
    rows = f"(({local.n_rows} + {local.block_rows} - 1) // {local.block_rows})"
    cols = f"(({local.n_cols} + {local.block_cols} - 1) // {local.block_cols})"
    blocks = f"{rows} * {cols}"
    return python.layout.statement(f"{local.grid} = ({blocks},)", 4)


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
    sizes = [output.numel for output in skeleton_outputs(op)]
    constants = [_parameter(op, "BLOCK_SIZE"), _parameter(op, "COMPUTE_DTYPE")]
    constants += [f"{local.flag(a.name)}: tl.constexpr" for a in op.optional_args]
    return wrap(f"def {kernel(op)}(", [*tensors, *_skeleton_scalars(op), *sizes, *constants], "):", explode=True)


def _skeleton_scalars(op: Op) -> list[str]:
    """The arguments a Triton kernel can take as scalars (numbers and bools); the launcher keeps the others
    (a str, an int[], a dtype, a Generator) to use them itself."""
    return [a.name for a in op.args if a.kind in ("float", "int", "bool") or str(a.schema.type) == "Scalar"]


class SkeletonOutput(NamedTuple):
    """A tensor a custom kernel's skeleton writes, with its own size and mask (they may differ in shape)."""

    numel: str  # the kernel parameter holding its number of elements
    mask: str  # the kernel's local masking its stores
    name: str  # a mutated argument's name, or the output's: `out`, or `out0`, `out1`, ...
    size: str  # what the launcher passes for `numel`
    optional: bool = False  # a `Tensor!?`: written only where given (HAS_x)


def skeleton_outputs(op: Op) -> list[SkeletonOutput]:
    """What a custom kernel's skeleton writes, mutated arguments then outputs: a single one under the
    launcher's `n_elements` and `mask`."""
    local = locals_for(op)
    written = [(a.name, a.is_optional) for a in op.mutated_args] + [(name, False) for name in op.output_names]
    if len(written) == 1 and not written[0][1]:
        return [SkeletonOutput(local.n_elements, local.mask, written[0][0], local.n_elements)]
    return [SkeletonOutput(local.derived("numel", name), local.derived("mask", name), name,
                           f"0 if {name} is None else {name}.numel()" if optional else f"{name}.numel()", optional)
            for name, optional in written]


def skeleton_lead(op: Op) -> str:
    """The tensor a skeleton's launch follows (dtype, device): the first it always writes."""
    return next((o.name for o in skeleton_outputs(op) if not o.optional), op.lead.name)


def skeleton_stores(op: Op) -> list[str]:
    """The skeleton's placeholder stores: zeros, each tensor under its mask (a `Tensor!?` where given)."""
    local = locals_for(op)
    lines = []
    single = len(skeleton_outputs(op)) == 1
    for numel, mask, name, _, optional in skeleton_outputs(op):
        pad = "        " if optional else "    "
        block = [] if single else [f"{mask} = {local.offsets} < {numel}"]
        block.append(f"{name} = tl.full(({local.BLOCK_SIZE},), 0.0, dtype={local.COMPUTE_DTYPE})")
        pointer = local.pointer(name)
        stored = f"{name}.to({pointer}.dtype.element_ty)"
        block.append(wrap("tl.store(", [f"{pointer} + {local.offsets}", stored, f"mask={mask}"], ")", len(pad)))
        lines += ([f"    if {local.flag(name)}:"] if optional else []) + [pad + line for line in block]
    return lines


def skeleton_grid_size(op: Op) -> list[str]:
    """The elements the grid covers: those of the one tensor it writes, or of the largest."""
    n_elements, outputs = locals_for(op).n_elements, skeleton_outputs(op)
    if len(outputs) == 1:
        return [f"    {n_elements} = {outputs[0].name}.numel()"]
    sizes = ", ".join(output.size for output in outputs)
    return ["    # The grid covers the largest tensor it writes.", "    " + python.layout.statement(f"{n_elements} = max({sizes})", 4)]


def skeleton_launch(op: Op) -> list[str]:
    scalars = [f"int({a.name})" if a.kind == "bool" else a.name for a in op.args if a.name in _skeleton_scalars(op)]
    arguments = [a.name for a in op.tensor_args] + list(op.output_names) + scalars
    local = locals_for(op)
    constants = [f"{local.BLOCK_SIZE}={local.BLOCK_SIZE}", f"{local.COMPUTE_DTYPE}={local.compute_dtype}"]
    flags = [f"{local.flag(a.name)}={a.name} is not None" for a in op.optional_args]
    arguments += [output.size for output in skeleton_outputs(op)] + constants + flags
    if op.is_triton_op:  # kopgen's eager CUDA kernel guards the device; a trace needs no guard
        return ["    " + wrap(f"{local.wrap}({local.kernel})[{local.grid}](", arguments, ")", 4, explode=True)]
    if op.uses_compiled_triton:
        return _guarded(op, skeleton_lead(op), arguments)
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


def skeleton_return(op: Op) -> str:
    """What the launcher returns: the outputs, or nothing (a mutating op of `-> ()`)."""
    return f"return {python.returned(op)}" if op.output_names else "return"


def skeleton_end(op: Op) -> list[str]:
    """The launcher's last line: its outputs returned (none for `-> ()`, which ends with the launch)."""
    return [f"    {skeleton_return(op)}"] if op.output_names else []


def contiguous_inputs(op: Op) -> list[str]:
    """`contiguous:` applied: the inputs in it made dense (a Tensor list's elements too), the mutated
    arguments in it checked (a dense copy would lose the kernel's writes); the others passed with their strides."""
    dense = [a for a in op.args if a.name in op.body.contiguous]  # Tensors and Tensor lists
    lines = []
    checked = [f"{a.name}={a.name}" for a in dense if a.is_mutated]
    if checked:
        lines.append("    " + wrap("_support.check_contiguous(", [literal(op.qualname), *checked], ")", 4))
    required = [a.name for a in dense if a.kind == "tensor" and not a.is_mutated]
    if required:
        values = ", ".join(f"{name}.contiguous()" for name in required)
        lines.append("    " + python.layout.statement(f"{', '.join(required)} = {values}", 4))
    for a in dense:
        if a.kind != "tensor" and not a.is_mutated:  # an optional Tensor, a list of Tensors or of optional ones
            one = "None if {0} is None else {0}.contiguous()" if "?" in str(a.schema.type) else "{0}.contiguous()"
            value = f"[{one.format('tensor')} for tensor in {a.name}]" if a.is_tensor_list else one.format(a.name)
            lines.append("    " + python.layout.statement(f"{a.name} = {value}", 4))
    return lines


def not_implemented(op: Op, package_name: str) -> str:
    message = f"{op.qualname} has no kernel yet: write the body of {kernel(op)} in {package_name}/kernels/{op.name}.py"
    return wrap("raise NotImplementedError(", [literal(message)], ")", 4)


def skeleton_prologue(op: Op) -> list[str]:
    """The skeleton kernel's offsets, and where the user's code goes."""
    local = locals_for(op)
    offsets = f"    {program_offsets(op)}"
    todo = f"    # TODO: load what this block of {{}} needs ({_dense_note(op)}) and compute it."
    if len(skeleton_outputs(op)) == 1:
        written = "the output" if op.output_names else f"{skeleton_outputs(op)[0].name}"
        return [f"    # One program per BLOCK_SIZE elements of {written}; 64-bit offsets.", offsets,
                f"    {local.mask} = {local.offsets} < {local.n_elements}", todo.format(written)]
    return ["    # One program per BLOCK_SIZE elements of the largest tensor it writes; 64-bit offsets. The",
            "    # tensors may differ in size: each one is stored under its own mask.", offsets,
            todo.format("each tensor it writes")]


def _dense_note(op: Op) -> str:
    """Which Tensors the kernel can index flat: those `contiguous:` names."""
    dense = [a.name for a in op.tensor_args if a.name in op.body.contiguous]
    if len(dense) == len(op.tensor_args):
        return "the inputs are contiguous"
    return f"{', '.join(dense)} contiguous, the others strided" if dense else "the inputs keep their strides"


def skeleton_outputs_allocated(op: Op) -> str:
    if not op.output_names:
        return f"; it writes {python.names_of(op.mutated_args)} in place, as the op's schema declares"
    if python.sized_by_data(op):
        return ", and the launcher allocates the output itself: the data sizes it"
    return ", and the outputs are allocated as its `fake` describes" if op.num_outputs > 1 else \
        ", and the output is allocated as its `fake` describes"


def skeleton_outputs_call(op: Op) -> list[str]:
    """The skeleton launcher's outputs, allocated as the spec's `fake` describes (none for `-> ()`)."""
    if not op.output_names:
        return []
    if python.sized_by_data(op):  # kopgen cannot allocate from `fake` what only the data sizes
        return ["    # TODO: `fake` sizes the output from the data (dynamic()): count its size, then allocate it here.",
                *(f"    {name} = {python.empty_output(o, '(0,)', f'{op.lead.name}.device')}"
                  for name, o in zip(op.output_names, op.body.outputs, strict=True))]
    return ["    " + python.layout.assign(python.output_target(op), python.allocate(op), 4)]


def broadcast_shape(op: Op) -> str:
    """A reduction's broadcast input shape, whose last dimension it reduces."""
    tensors = ", ".join(a.name for a in op.tensor_args)
    shape = locals_for(op).shape
    return python.layout.statement(f"{shape} = _support.pointwise_shape({literal(op.qualname)}, {tensors})", 4)


def block_rows_offsets(op: Op) -> str:
    """The rows of a pointwise kernel's block."""
    local = locals_for(op)
    first = f"({local.tile} // {local.col_tiles}).to(tl.int64) * {local.BLOCK_ROWS}"
    return python.layout.assign(local.rows, f"{first} + tl.arange(0, {local.BLOCK_ROWS})", 4)


def block_cols_offsets(op: Op) -> str:
    """The columns of a pointwise kernel's block."""
    local = locals_for(op)
    first = f"({local.tile} % {local.col_tiles}).to(tl.int64) * {local.BLOCK_COLS}"
    return python.layout.assign(local.cols, f"{first} + tl.arange(0, {local.BLOCK_COLS})", 4)


def loop_end(op: Op) -> str:
    """Where a row reduction's loop over columns ends: n_cols, or CONST_COLS in the interpreter."""
    local = locals_for(op)
    return f"{local.n_cols} if {local.CONST_COLS} is None else {local.CONST_COLS}"


def row_blocks(op: Op) -> str:
    """`block_rows, block_cols, num_warps = ...`: a row reduction's block shape for its row length."""
    local = locals_for(op)
    blocks = f"{local.block_rows}, {local.block_cols}, {local.num_warps}"
    call = f"_support.row_blocks({local.n_rows}, {local.n_cols}, {op.output_names[0]}.element_size())"
    return python.layout.assign(blocks, call, 4)


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
