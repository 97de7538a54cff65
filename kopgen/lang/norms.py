"""This module translates a row normalisation (`normalize`, model_kinds.RowNormalization) into its
PyTorch reference and its Triton kernel and launcher: the pieces its own templates print
(kernels/_normalization.py.j2, _support/norms.py.j2).

The kernel reads rows of the broadcast shape through each tensor's strides. Where a row fits in one
block (ONE_PASS) it is read once: each statistic is reduced from the loaded block, then `compute` is
written. Longer rows take a loop over their columns per run of statistics, then one that writes. The
statistics' lines are lang/norm_stats.py's.
"""

from __future__ import annotations

import re

from ..model import Op
from ..names import locals_for, module_name
from . import norm_sums, python, triton
from .layout import literal, wrap
from .norm_stats import looped_stats, one_pass_stats, saved_stats, stat_pointer
from .norm_sums import column_sums


def _substitute(text: str, name: str, value: str) -> str:
    """`text` with the statistic's name (not an attribute, as in torch.exp) replaced by `value`, an operand."""
    return re.sub(rf"(?<![.\w]){re.escape(name)}\b", lambda _: value, text)


# -- the reference


def reference_return(op: Op) -> str:
    """The statistics, one line each (rows of one value, kept as a last dimension of 1), then `compute`."""
    dtype = locals_for(op).dtype
    lines = _stat_lines(op, "")
    values = [f"{python.layout.operand(w.expr.to_torch())}.to({dtype})" for w in op.writes]
    values += norm_sums.reference_values(op)  # the gradients summed over the rows
    returned = python.layout.assign("return", values[0], 4) if len(values) == 1 else \
        wrap("return (", values, ")", 4, explode=True)
    return "\n    ".join([*lines, returned])


def _stat_lines(op: Op, helpers: str, indent: int = 4) -> list[str]:
    """Each statistic in torch, one line each (`helpers`: where row_mean and the others are, `_support.`)."""
    lines = []
    for stat in op.body.stats:
        reduced = f"{helpers}row_{stat.reduction.kind}({stat.reduced.to_torch()}).unsqueeze(-1)"
        value = reduced if stat.outer is None else _substitute(stat.outer.to_torch(), stat.name, reduced)
        lines.append(python.layout.assign(stat.name, value, indent))
    return lines


def reference_forward(op: Op) -> list[str]:
    """reference.py's `<op>_forward` (after the op's reference), where the op saves statistics: the
    output and each saved statistic, as `_<op>_forward` returns them."""
    stats = saved_stats(op)
    if not stats:
        return []
    local, names = locals_for(op), [a.name for a in op.read_args]
    values = [f"{python.layout.operand(w.expr.to_torch())}.to({local.dtype})" for w in op.writes]
    return ["", "", python.define(forward_reference(op), op, returns=f"tuple[{', '.join(['Tensor'] * (1 + len(stats)))}]"),
            f'    """{forward_qualname(op)} in plain PyTorch: the output, and each row\'s {", ".join(stats)}',
            '    computed in float32 at least."""',
            f"    {local.dtype} = {op.lead.name}.dtype",
            "    " + wrap(f"{python.tuple_target(names)} = upcast(", names, ")", 4),
            *("    " + line for line in _stat_lines(op, "")),
            "    " + python.layout.statement(f"return {', '.join([*values, *stats])}", 4)]


def forward_reference(op: Op) -> str:
    return f"{op.stem}_forward"


def python_forward_kernel(op: Op) -> list[str]:
    """After a `python` kernel (lines that follow its body): `_<op>_forward`'s, its reference's values
    with the output written into fresh contiguous memory."""
    stats = saved_stats(op)
    if not stats:
        return []
    local = locals_for(op)
    return ["", "", python.define(f"{op.stem}_forward_python", op, returns=f"tuple[{', '.join(['Tensor'] * (1 + len(stats)))}]"),
            f'    """{forward_qualname(op)}\'s python kernel: its reference, the output written into',
            '    fresh contiguous output."""',
            "    " + python.layout.assign(local.expected, python.call_text(f"reference.{forward_reference(op)}", op), 4),
            "    " + python.layout.assign(triton.first_written(op), python.allocate(op), 4),
            f"    return {triton.first_written(op)}.copy_({local.expected}[0]), *{local.expected}[1:]"]


# -- the Triton kernel


def kernel_body(op: Op) -> list[str]:
    """The kernel's body: one program's block of rows, one pass or looped; with column sums
    (norm_sums.py), a loop over the program's blocks around it."""
    local, summed = locals_for(op), bool(column_sums(op))
    pad = "    " if summed else ""
    inner = 8 + len(pad)
    lines = ["    # One program normalises BLOCK_ROWS rows, each tensor read through its strides (0 where it is",
             "    # broadcast); 64-bit offsets. The statistics are columns of one value per row, in COMPUTE_DTYPE.",
             *(norm_sums.column_sum_head(op) if summed else []),
             f"    {pad}{local.rows} = {norm_sums.first_row(op)} + tl.arange(0, {local.BLOCK_ROWS})",
             f"    {pad}{local.row_mask} = {local.rows} < {local.n_rows}",
             f"    {pad}if {local.ONE_PASS}:",
             f"        {pad}# The rows fit in the block: read once, each statistic reduced from it, then written.",
             f"        {pad}{local.cols} = tl.arange(0, {local.BLOCK_COLS}).to(tl.int64)",
             f"        {pad}{local.mask} = {local.row_mask}[:, None] & ({local.cols} < {local.n_cols})[None, :]",
             *one_pass(op, inner), *(f"        {pad}{line}" for line in store(op, inner)),
             f"    {pad}else:",
             f"        {pad}# Longer rows: a loop over the columns per run of statistics, then one that writes. The compiled",
             f"        {pad}# kernel loops to the row length at run time (CONST_COLS is None); Triton 3.6's interpreter cannot.",
             *looped(op, inner)]
    return lines + (norm_sums.column_sum_tail(op) if summed else [])


def one_pass(op: Op, indent: int) -> list[str]:
    """A block of whole rows: the Tensors the statistics read, loaded; the statistics; then the other Tensors
    (a weight, a bias), as a hand-written kernel orders them. Loaded first, they were held through the
    statistics' reductions: bfloat16 layer_norm at hidden 8192 took 49.8 us, 37.7 loaded after; float32 66.1
    and 68.8 (H200, rows 4096, `.gpu/r72` in docs/performance.md)."""
    read = {name for stat in op.body.stats for name in (*stat.reduced.names, *(stat.outer.names if stat.outer else ()))}
    others = {a.name for a in op.read_args} - read
    return [*loads(op, read, indent, row_stats=True), *one_pass_stats(op, indent), *loads(op, others, indent)]


def loads(op: Op, names: set[str] | None, indent: int, row_stats: bool | None = None) -> list[str]:
    """The Tensors the kernel reads (those of `names` only, where given), loaded into the compute dtype;
    a backward kernel's saved statistics as columns, one value per row (row_stat_loads), where `row_stats`
    (by default where `names` is not given)."""
    lines = triton.loads(op, indent)
    saved = op.body.row_stats
    kept, i = [], 0
    # triton.loads gives one line per plain Tensor and four per optional one, in read_args' order.
    for arg in op.read_args:
        size = 4 if arg.is_optional else 1
        if (names is None or arg.name in names) and arg.name not in saved:
            kept += lines[i : i + size]
        i += size
    with_row_stats = names is None if row_stats is None else row_stats
    return (row_stat_loads(op, indent) if with_row_stats else []) + kept


def row_stat_loads(op: Op, indent: int) -> list[str]:
    """A backward kernel's saved statistics (a value per row, the column stride 0): each row's value
    loaded once, as a column that broadcasts along the row."""
    local, pad = locals_for(op), " " * indent
    lines = []
    for name in op.body.row_stats:
        if name not in {a.name for a in op.read_args}:
            continue
        pointer = f"{local.pointer(name)} + {local.rows} * {local.derived('row_stride', name)}"
        value = f"tl.load({pointer}, mask={local.row_mask}).to({local.COMPUTE_DTYPE})[:, None]"
        lines.append(pad + python.layout.assign(name, value, indent))
    return lines


def looped(op: Op, indent: int) -> list[str]:
    """Rows longer than a block: a loop over the columns per run of statistics, then one that writes."""
    pad = " " * indent
    lines = row_stat_loads(op, indent)
    lines += looped_stats(op, indent, lambda names: _column_loop(op, names, indent))
    written = (*(w.expr for w in op.writes), *(c.expr for c in column_sums(op)))
    lines += _column_loop(op, {n for e in written for n in (*e.names, *e.tested)}, indent)
    return lines + [f"{pad}    {line}" for line in store(op, indent + 4, looped=True)]


def _column_loop(op: Op, names: set[str], indent: int) -> list[str]:
    """`for start in ...:` over a row's columns, BLOCK_COLS at a time, loading the Tensors of `names`."""
    local, pad = locals_for(op), " " * indent
    return [pad + wrap(f"for {local.start} in range(", ["0", triton.loop_end(op), local.BLOCK_COLS], "):", indent),
            f"{pad}    {local.cols} = {local.start} + tl.arange(0, {local.BLOCK_COLS}).to(tl.int64)",
            f"{pad}    {local.mask} = {local.row_mask}[:, None] & ({local.cols} < {local.n_cols})[None, :]",
            *loads(op, names, indent + 4)]


def store(op: Op, indent: int, looped: bool = False) -> list[str]:
    """`compute` over the block, stored in each written tensor's dtype, then each column sum's part
    (lines without their indent)."""
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
    return lines + norm_sums.column_sum_parts(op, indent, looped)


# -- the launcher


def row_layout(op: Op) -> list[str]:
    """`n_rows, n_cols, strides`: the tensors the kernel reads and writes, through their strides as rows of
    the written shape, or the inputs copied dense where their leading dimensions do not merge into rows."""
    local = locals_for(op)
    arguments = [f"{triton.first_written(op)}.shape", *triton.kernel_arguments(op)[: len(op.kernel_tensors)]]
    return [*triton._layout(op, local.layout, "row_layout", arguments, "Leading dimensions that do not merge into one"),
            f"    {local.n_rows}, {local.n_cols}, {local.strides} = {local.layout}"]


def blocks(op: Op) -> str:
    """`block_rows, block_cols, one_pass, num_warps = ...`: the block for the row length; a backward kernel
    with column sums (whose programs take many blocks each) takes blocks of its own, and its programs a
    multiprocessor."""
    local = locals_for(op)
    target = f"{local.block_rows}, {local.block_cols}, {local.one_pass}, {local.num_warps}"
    helper = "norm_blocks"
    if column_sums(op):
        target, helper = f"{target}, {local.per_sm}", "norm_sum_blocks"
    call = f"_support.{helper}({local.n_rows}, {local.n_cols}, {triton.first_written(op)}.element_size())"
    return python.layout.assign(target, call, 4)


def constants(op: Op) -> list[tuple[str, str]]:
    """The kernel's block, the row length where the interpreter needs it as a constexpr, one pass or
    not, and the warps that run it."""
    local = locals_for(op)
    return [*triton.row_constants(op)[:3], ("ONE_PASS", local.one_pass), ("num_warps", local.num_warps)]


# -- the statistics saved for backward: the launcher of `_<op>_forward` beside the op's own


def kernel_define(op: Op) -> str:
    """The kernel's `def`: a pointer per saved statistic after the tensors, and SAVE_STATS, whether to write them."""
    saves = ("SAVE_STATS",) if saved_stats(op) else ()
    sums = ("COLUMN_SUMS", "CONST_STEPS") if column_sums(op) else ()
    steps = ("n_programs", "steps") if column_sums(op) else ()
    sizes = ("n_rows", "n_cols", *steps, "strides", "BLOCK_ROWS", "BLOCK_COLS", "CONST_COLS", "ONE_PASS", *saves, *sums)
    partials = [locals_for(op).partials_ptr] if column_sums(op) else []
    return triton.kernel_define(op, *sizes, pointers=[*(stat_pointer(n) for n in saved_stats(op)), *partials])


def forward_launcher(op: Op) -> str:
    """The launcher of the internal op `_<op>_forward`: the output and the saved statistics."""
    return f"{op.stem}_forward_triton"


def _launch_function(op: Op) -> str:
    return f"_{triton.launcher(op)}"


def launcher_head(op: Op) -> list[str]:
    """The launcher's `def` and docstring; with saved statistics, the op's launcher and `_<op>_forward`'s,
    both calling one that launches the kernel, writing the statistics or not."""
    doc = f'    """The bare launcher of {triton.kernel(op)}; the operator calls it on real tensors."""'
    if not saved_stats(op):
        return [python.define(triton.launcher(op), op), doc]
    local, stats, count = locals_for(op), ", ".join(saved_stats(op)), len(saved_stats(op))
    launch = _launch_function(op)
    return [python.define(triton.launcher(op), op), doc,
            "    " + python.layout.statement(f"return {python.call_text(launch, op, ['False'])}[0]", 4),
            "", "",
            python.define(forward_launcher(op), op, returns=f"tuple[{', '.join(['Tensor'] * (1 + count))}]"),
            f'    """The launcher of {forward_qualname(op)}: the output and each row\'s {stats}, in float32',
            '    (float64 for float64 inputs), which the backward formulas read."""',
            "    " + python.layout.statement(f"return {python.call_text(launch, op, ['True'])}", 4),
            "", "",
            python.define(launch, op, first=[f"{local.save_stats}: bool"],
                          returns=f"tuple[Tensor, {', '.join(['Tensor | None'] * count)}]"),
            f'    """Launches {triton.kernel(op)}: the output, and each row\'s {stats} where {local.save_stats} (else None)."""']


def forward_qualname(op: Op) -> str:
    """The internal op that also returns the saved statistics."""
    return f"{op.namespace}::_{op.name}_forward"


def launcher_template(op: Op) -> str:
    """The launcher's head: with saved statistics, that of the op and of `_<op>_forward` (launcher_head)."""
    return "package/kernels/_norm_launchers.py.j2" if saved_stats(op) else triton.launcher_template(op)


def outputs(op: Op) -> list[str]:
    """The launcher's output, then each saved statistic (None where not asked for)."""
    local, first = locals_for(op), triton.first_written(op)
    if column_sums(op):  # one call allocates the output and each column sum's
        return norm_sums.outputs(op)
    return [*triton.outputs(op), *(f"    {name} = _support.norm_stat({first}) if {local.save_stats} else None"
                                   for name in saved_stats(op))]


def empty_return(op: Op) -> str:
    """What the launcher returns without launching: the output, and the saved statistics."""
    return f"return {', '.join([python.returned(op), *saved_stats(op)])}" if saved_stats(op) else triton.empty_return(op)


def epilogue(op: Op) -> list[str]:
    if column_sums(op):
        return norm_sums.epilogue(op)
    return ["    " + empty_return(op)] if saved_stats(op) else triton.epilogue(op)


def launch(op: Op) -> list[str]:
    if column_sums(op):  # fewer programs than blocks of rows, and their partial rows
        return norm_sums.launch(op, constants(op))
    saves = [("SAVE_STATS", locals_for(op).save_stats)] if saved_stats(op) else []
    return triton.launch(op, ["n_rows", "n_cols", "strides"], [*constants(op), *saves], pointers=saved_stats(op))


def any_saved_stats(package) -> bool:
    return any(saved_stats(op) for op in package.ops)


# -- _registration.py: the op that saves the statistics, and the autograd kernel that calls it


def setup_context_define(op: Op) -> str:
    """setup_context, called by the op's autograd.Function with the statistics after the output."""
    keyword_only = ["keyword_only_inputs"] if op.keyword_only_names else []
    return wrap(f"def {python.setup_context_function(op)}(", ["ctx", "inputs", *keyword_only, "output", *saved_stats(op)],
                "):")


def backward_body(op: Op) -> list[str]:
    """autograd.py's backward, the statistics recomputed before the formulas where autograd differentiates it."""
    from . import autograd  # autograd imports python, as this module does; it is needed only here

    lines = autograd.backward_body(op)
    first = next(g for g in op.backward.gradients if g.formula)
    at = lines.index(f"    {locals_for(op).derived('gradient', first.arg.name)} = None")
    recomputed = recomputed_when_differentiated(op)
    # Where backward runs a backward kernel, create_graph runs the formulas as written (autograd.py):
    # the statistics are recomputed first, in that branch.
    eager = next((i for i, line in enumerate(lines[:at]) if line.startswith("    if torch.is_grad_enabled():")), None)
    if eager is not None:
        return [*lines[: eager + 1], "        # the statistics too, which autograd differentiates", *recomputed[1:],
                *lines[eager + 1 :]]
    return [*lines[:at], *recomputed, *lines[at:]]


def recomputed_when_differentiated(op: Op) -> list[str]:
    """The saved statistics are constants to autograd: a backward that autograd differentiates again
    (create_graph, grad mode on) recomputes them in torch ops, from what setup_context saved for that."""
    read = [a.name for a in op.tensor_args if a.name in op.body.reads]
    return ["    if torch.is_grad_enabled():  # create_graph: statistics that autograd differentiates",
            "        " + wrap(f"{python.tuple_target(read)} = _support.upcast(", read, ")", 8),
            *("        " + line.replace("\n    ", "\n        ") for line in _stat_lines(op, "_support.", 8))]


def _forward_schema(op: Op) -> str:
    arguments = op.schema_signature.rsplit(" -> ", 1)[0]
    return f"_{op.name}_forward{arguments} -> ({', '.join(['Tensor'] * (1 + len(saved_stats(op))))})"


def _forward_kernel(op: Op, kernel: str) -> str:
    """The internal op's kernel beside `kernel`, the op's: rms_norm_triton -> rms_norm_forward_triton."""
    module, _, name = kernel.rpartition(".")
    return f"{module}.{name.replace(op.stem + '_', op.stem + '_forward_', 1)}"


def saved_stats_registration(op: Op) -> list[str]:
    """`_<op>_forward` defined with its kernels and fake kernel; the autograd.Function that saves its
    statistics; the op's autograd kernel, at the Autograd keys of the devices it has kernels for."""
    local = locals_for(op)
    name, forward, stats = f"_{op.name}_forward", module_name(op, "forward_op"), list(saved_stats(op))
    kernels = [wrap("_lib.impl(", [literal(name), _forward_kernel(op, python.registered_kernel(op, k)),
                                   literal(k.dispatch_key)]) for k in op.kernels]
    fake = python.fake_define(op).replace(module_name(op, "fake"), module_name(op, "forward_fake"), 1)
    allocate = python.layout.assign(local.output, python.allocate(op), 4)
    # setup_context's inputs as torch.library passes them: the positional ones, then the keyword-only ones
    positional = [a.name for a in op.args if not a.schema.kwarg_only]
    inputs = python.tuple_expression(positional)
    if op.keyword_only_names:
        inputs += ", {" + ", ".join(f'"{name}": {name}' for name in op.keyword_only_names) + "}"
    function, kernel = saving_function(op), module_name(op, "autograd_kernel")
    tensors = ", ".join(a.name for a in op.tensor_args)
    return [
        "", "",
        f"# {op.qualname} with grad runs {op.namespace}::{name}, which also returns each row's {', '.join(stats)}",
        "# for the backward formulas: an op of its own, so that torch.compile and export see it.",
        wrap("_lib.define(", [literal(_forward_schema(op)), f"tags={python.tags_literal(op)}"] if op.tags
             else [literal(_forward_schema(op))]),
        *kernels, "", "",
        wrap("@torch.library.register_fake(", [literal(f"{op.namespace}::{name}")]),
        fake,
        f"    # The output as {python.fake_target(op)}'s fake kernel describes it, and a float statistic per row.",
        "    " + allocate,
        f"    return {local.output}, " + ", ".join(f"_support.norm_stat({local.output})" for _ in stats),
        "", "",
        python.layout.assign(forward, f"torch.ops.{op.namespace}.{name}.default", 0),
        "# torch.compile traces it as its PyTorch reference too, which Inductor fuses (fusion.py).",
        wrap("_support.trace_as_reference(", [literal(f"{op.namespace}::{name}"), f"reference.{forward_reference(op)}"]),
        "", "",
        f"class {function}(torch.autograd.Function):",
        f'    """{op.qualname} with grad: {name}, its statistics saved for backward."""',
        "", "    @staticmethod",
        "    " + wrap("def forward(", [local.ctx, *(a.name for a in op.args)], "):", 4),
        "        " + python.layout.assign(f"{local.output}, {', '.join(stats)}", python.call_text(forward, op), 8),
        "        " + python.layout.statement(f"{python.setup_context_function(op)}({local.ctx}, {inputs}, "
                                              f"{local.output}, {', '.join(stats)})", 8),
        f"        return {local.output}", "",
        *_function_backward(op),
        "", "",
        wrap(f"def {kernel}(", [local.keyset, *_untyped_parameters(op)], "):"),
        f'    """{op.qualname}\'s autograd kernel, where torch.library would register the formulas."""',
        f"    if torch.is_grad_enabled() and torch._C._any_requires_grad({tensors}):",
        # autograd.Function.apply takes its arguments by position
        "        " + python.layout.statement(f"return {function}.apply({', '.join(a.name for a in op.args)})", 8),
        "    with torch._C._AutoDispatchBelowAutograd():",
        "        " + python.call(f"torch.ops.{op.namespace}.{op.name}.default.redispatch", op, 8,
                                first=[f"{local.keyset} & torch._C._after_autograd_keyset"], prefix="return "),
        "", "",
        *(wrap("_lib.impl(", [literal(op.name), kernel, literal(f"Autograd{k.dispatch_key}"), "with_keyset=True"])
          for k in op.kernels),
    ]


def _function_backward(op: Op) -> list[str]:
    """The Function's backward: the op's, and a None for each keyword-only argument it was applied to."""
    if not op.keyword_only_names:
        return [f"    backward = staticmethod({python.backward_function(op)})"]
    local, nones = locals_for(op), ", None" * len(op.keyword_only_names)
    return ["    @staticmethod", f"    def backward({local.ctx}, {local.grad}):",
            f"        return *{python.backward_function(op)}({local.ctx}, {local.grad}){nones}"]


def _untyped_parameters(op: Op) -> list[str]:
    """The op's parameters as its fake kernel takes them: untyped, with the schema's defaults."""
    parts = []
    for arg in op.args:
        default = python.python_default(arg.schema)
        parts.append(arg.name if default is None else f"{arg.name}={python.layout.requote(default)}")
    return python._with_star(op, parts)


def eager_forward(op: Op, kernel: str) -> str:
    """What the typed API's autograd.Function calls for the output and the statistics: the launcher
    beside the op's one kernel, or `_<op>_forward` where the devices' kernels differ."""
    if kernel.endswith("]"):  # looked up per device type
        return module_name(op, "forward_op")
    return _forward_kernel(op, kernel)


def saving_function(op: Op) -> str:
    """The autograd.Function that runs `_<op>_forward` and saves its statistics: `_RmsNormSavingStats`."""
    return "_" + "".join(part.capitalize() for part in op.stem.split("_")) + "SavingStats"


# -- the generated suite: the contract's check of a normalisation that saves statistics (after two blank lines)

CONTRACT = '''

class SavesStatistics(Contract):
    """A normalisation whose backward formulas read the statistics its forward saved: with grad,
    the op runs _<op>_forward (an op of its own, with its fake kernel) once, and no kernel of
    the op itself; _<op>_forward passes opcheck, torch.compile and torch.export."""

    def forward_op(self):
        namespace, name = self.data.op._schema.name.split("::")
        return getattr(getattr(torch.ops, namespace), f"_{name}_forward").default

    def test_grad_runs_the_forward_op_that_saves_the_statistics(self, device):
        args = self.normal_args(device, requires_grad=True)
        with Calls() as calls:
            output = self.call(self.data.op, args)
            torch.autograd.grad(total(output), requiring_grad(args))
        seen = calls.seen
        assert seen.count(self.forward_op()) == 1 and self.data.op not in seen, seen

    def test_forward_op_opcheck_compile_and_export(self, device):
        args = self.normal_args(device)
        positional, keywords = self.split(args)
        forward = self.forward_op()
        results = torch.library.opcheck(
            forward, positional, keywords, raise_exception=False
        )
        failed = {test: got for test, got in results.items() if got != "SUCCESS"}
        assert not failed, failed
        want = forward(*positional, **keywords)
        # The op's kernel without the statistics' stores: compiled apart, it may round apart (CUDA)
        assert_all_close(want[0], self.call(self.data.op, args), **self.data.tolerances)
        torch._dynamo.reset()
        # torch.compile traces _<op>_forward as its reference: equal within the tolerances
        compiled = torch.compile(forward, backend="aot_eager", fullgraph=True)
        got = compiled(*positional, **keywords)
        assert_all_close(got, want, **self.data.tolerances)
        where = [i for i, arg in enumerate(positional) if isinstance(arg, torch.Tensor)]

        class Model(torch.nn.Module):
            def forward(self, *tensors):
                inputs = list(positional)
                for i, tensor in zip(where, tensors, strict=True):
                    inputs[i] = tensor
                return forward(*inputs, **keywords)

        exported = torch.export.export(Model(), tuple(positional[i] for i in where))
        calls = [n.target for n in exported.graph.nodes if n.op == "call_function"]
        assert calls.count(forward) == 1, calls
        got = exported.module()(*(positional[i] for i in where))
        assert_all_close(got, want, rtol=0, atol=0)'''


def contract(package) -> tuple[str, ...]:
    return tuple(CONTRACT.split("\n")) if any_saved_stats(package) else ()
