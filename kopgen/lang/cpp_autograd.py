"""This module translates an op's backward formulas into C++ autograd (csrc/ops.cpp), as lang/autograd.py
does into Python: per op a `torch::autograd::Function` whose forward redispatches below autograd and
saves only what the formulas read, and whose backward computes each formula with ATen calls, calling
the namespace's own ops through the dispatcher (so a second backward goes through their autograd too).
It is registered at the Autograd key, so a call with inputs requiring grad never enters Python.

Only torch_library ops take it (the stable ABI has no autograd; docs/performance.md), and only where
every formula falls in the subset below: arithmetic and comparisons of Tensors and scalars, the
pointwise language's functions as torch.<f> (a few as torch.nn.functional.<f>), torch.where, torch.cat (a
split op's gradient; its halves bound from the saved argument), row sums and means over the last dimension
(`(E).sum(-1, keepdim=True)`, as a normalisation's formulas write them), the namespace's ops called
with every argument, grad(s) and result(s). Anything else (methods, .shape, keywords, a formula reading a
`Tensor?`) keeps the Python registration; `python_reason` says why, and `kopgen check` prints it.

A `Tensor?` argument (layer_norm's bias) is taken where no formula reads it. Where it is absent it is no
edge of the graph: ctx->needs_input_grad counts the Tensors given, so the indices after it move down one,
and its gradient is never computed.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from ..model import Op, Package, Route
from ..names import locals_for
from .autograd import SharedCall, shared_calls
from .cpp import SCALAR_TYPES, string_literal, wrap, wrap_expression
from .cpp_formula import TYPES, Formula, Unsupported, signature_problem
from .python import not_differentiable_message
from .split import cpp_bind_for_eager

# Named unqualified (csrc/ops.cpp's `using`s): names.CPP_TYPE_NAMES keeps arguments from taking them.
_CONTEXT, _VARIABLE_LIST = "AutogradContext", "variable_list"


def python_reason(op: Op, ops: Sequence[Op]) -> str | None:
    """Why the op's autograd is registered from Python rather than generated in C++ (None: C++)."""
    if op.registration is Route.STABLE_ABI:
        return "the stable ABI has no autograd (docs/performance.md)"
    if op.registration is not Route.TORCH_LIBRARY:
        return f"{op.registration} is a Python route"
    problem = signature_problem(op)
    if problem:
        return problem
    by_name = {o.name: o for o in ops}
    optional = {a.name for a in op.args if a.is_optional}
    for gradient in op.backward.gradients:
        for formula in (gradient.formula, gradient.eager):  # the kernel's call, and the formula as written
            if not formula:
                continue
            tree = ast.parse(formula.python, mode="eval")
            read = sorted(optional & {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})
            if read:
                return (f"{gradient.arg.name}'s formula reads the Tensor? {read[0]!r} (C++ autograd takes an "
                        "optional Tensor only where no formula reads it)")
            try:
                Formula(op, by_name, ()).emit(tree.body)
            except Unsupported as why:
                return f"{gradient.arg.name}'s formula: {why}"
    return None


def autograd_in_cpp(op: Op, ops: Sequence[Op]) -> bool:
    """Whether the op's autograd is generated in C++: resolved once per op (model.Op.cpp_autograd). An op
    without formulas gets a Function whose backward raises, unless it writes its arguments (no autograd
    then): its calls, with grad or without, never enter Python (a Python Autograd kernel cost rowsum
    15 us a call on the H200, docs/performance.md), nor do C++ backwards that call a backward kernel."""
    if op.backward is None:
        return (op.registration is Route.TORCH_LIBRARY and not op.is_mutating and bool(op.tensor_args)
                and signature_problem(op) is None)
    return op.has_gradients and python_reason(op, ops) is None


# -- what csrc/ops.cpp prints


def _return_type(op: Op) -> str:
    count = len(op.schema.returns)
    return "Tensor" if count == 1 else f"std::tuple<{', '.join(['Tensor'] * count)}>"


def _parameters(op: Op) -> list[str]:
    return [f"{TYPES[str(a.schema.type)]} {a.name}" for a in op.args]


def _given(arg) -> str:
    """Whether a Tensor argument is given: a Tensor? may be absent, or an undefined Tensor."""
    return f"{arg.name}.has_value() && {arg.name}->defined()"


def _requires_grad(arg) -> str:
    return f"({arg.name}.has_value() && {arg.name}->requires_grad())" if arg.is_optional else f"{arg.name}.requires_grad()"


def _wanted(op: Op, arg_name: str, ctx: str) -> str:
    """Whether backward is asked for the input's gradient. ctx->needs_input_grad counts the Tensors given:
    each absent Tensor? before the input moves its index down one, and an absent one has none."""
    local, tensors = locals_for(op), op.tensor_args
    position = [a.name for a in tensors].index(arg_name)
    before = [local.derived("cpp_flag", a.name) for a in tensors[:position] if a.is_optional]
    index = " + ".join([*(f"{flag}" for flag in before), str(position - len(before))]) if before else str(position)
    wanted = f"{ctx}->needs_input_grad({index})"
    if tensors[position].is_optional:
        return f"{local.derived('cpp_flag', arg_name)} && {wanted}"
    return wanted


def _raise(message: str, column: int) -> str:
    """TORCH_CHECK(false, message) at `column`: torch raises it in Python as a RuntimeError."""
    opening = "TORCH_CHECK(false, "
    return f"{opening}{string_literal(message, column + len(opening))});"


def _shared_calls(op: Op, ops: Sequence[Op], shared: tuple[SharedCall, ...]) -> list[str]:
    """Each own-op call that several gradients read, made once into its local where one is wanted."""
    ctx, lines = locals_for(op).ctx, []
    by_name, names = {o.name: o for o in ops}, {a.index: a.name for a in op.args}
    for call in shared:
        readers = " and ".join(names[i] for i in call.users)
        each = [_wanted(op, names[i], ctx) for i in call.users]
        wanted = " || ".join(f"({w})" if "&&" in w and len(each) > 1 else w for w in each)
        code = Formula(op, by_name, ()).emit(ast.parse(call.python, mode="eval").body).code
        lines += [f"// One {call.called_op} call serves the gradients of {readers}, where one is wanted.",
                  f"{_return_type(by_name[call.called_op])} {call.local};",
                  f"if ({wanted}) {{", f"  {call.local} = {code};", "}"]
    return lines


@dataclass(frozen=True)
class DispatchedOp:
    """An op called through its dispatcher handle: the forward's redispatch, and the formulas' own-op calls."""

    op: Op

    @property
    def signature(self) -> str:
        return wrap(f"{_return_type(self.op)} {self.op.name}(", _parameters(self.op), ") {")

    @property
    def body(self) -> list[str]:
        types = ", ".join(TYPES[str(a.schema.type)] for a in self.op.args)
        handle = locals_for(self.op).handle
        opening = f"static auto {handle} = "
        pad = " " * (len(opening) + 4)
        signature = f"{_return_type(self.op)}({types})"
        alias = []
        if len(f"  {pad}.typed<{signature}>();") > 100:  # csrc's line length: the signature named first
            alias, signature = [f"using Signature = {signature};"], "Signature"
        return [
            *alias,
            f"{opening}c10::Dispatcher::singleton()",
            f'{pad}.findSchemaOrThrow("{self.op.qualname}", "")',
            f"{pad}.typed<{signature}>();",
            f"return {handle}.call({', '.join(a.name for a in self.op.args)});",
        ]


@dataclass(frozen=True)
class CppAutograd:
    """An op whose autograd csrc/ops.cpp defines: its Function and its Autograd kernel."""

    op: Op
    ops: tuple[Op, ...]

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def function(self) -> str:
        """The Function's struct: `<op>_function`, which never hides a namespace (`at`, `ops`) the way a
        struct named after the op could (ops named `at` and `at_function` give at_function, at_function_function)."""
        return f"{self.op.name}_function"

    @property
    def opening(self) -> str:
        """The struct's first line; its base on a line of its own where one line would pass 100 columns."""
        name, base = f"struct {self.function}", f": public torch::autograd::Function<{self.function}> {{"
        return f"{name} {base}" if len(name) + len(base) + 1 <= 100 else f"{name}\n    {base}"

    @property
    def _local(self):
        return locals_for(self.op)

    @property
    def _multiple(self) -> bool:
        return self.op.num_outputs > 1

    @property
    def forward_signature(self) -> str:
        returned = _VARIABLE_LIST if self._multiple else "Tensor"
        parameters = [f"{_CONTEXT}* {self._local.ctx}", *_parameters(self.op)]
        return wrap(f"static {returned} forward(", parameters, ") {", indent=2)

    def _saved_sources(self) -> list[str]:
        """What save_for_backward keeps, each only where a gradient that reads it is wanted."""
        saved = []
        for s in self.op.backward.saved_tensors:
            source = s.name  # an argument; else an output: setup_context's `output` or `output[i]`
            if s.source != s.name:
                source = self._outputs[0 if s.source == "output" else int(s.source.removeprefix("output[")[:-1])]
            # requires_grad, not ctx->needs_input_grad: in a backward that builds a graph (create_graph), the
            # latter asks the running backward's graph task, which knows nothing of this new node.
            needed = " || ".join(_requires_grad(self.op.args[i]) for i in s.needed_by)
            saved.append(f"{needed} ? {source} : Tensor()")
        return saved

    @property
    def _flagged(self) -> list:
        """The Tensor? arguments backward asks about: each up to the last input with a gradient formula."""
        with_formula = [i for i, a in enumerate(self.op.args) if (g := self.op.backward.gradient_for(a)) and g.formula]
        last = max(with_formula, default=-1)
        return [a for a in self.op.args[: last + 1] if a.is_optional]

    @property
    def _outputs(self) -> list[str]:
        return list(self.op.output_names)

    @property
    def forward_body(self) -> list[str]:
        """Below autograd at once (the op's kernels, not this Function again), then what backward reads."""
        local, op = self._local, self.op
        call = f"ops::{op.name}({', '.join(a.name for a in op.args)})"
        lines = ["// The op's own kernels: below autograd, where this Function is not met again.",
                 f"at::AutoDispatchBelowADInplaceOrView {local.guard};"]
        outputs = self._outputs
        if self._multiple:
            lines.append(f"auto [{', '.join(outputs)}] = {call};")
        else:
            lines.append(f"Tensor {outputs[0]} = {call};")
        if op.backward is None:  # backward only raises: nothing to keep
            lines.append(f"return {{{', '.join(outputs)}}};" if self._multiple else f"return {outputs[0]};")
            return lines
        for arg in self._flagged:  # where each Tensor? is an edge of the graph (_wanted)
            lines.append(f'{local.ctx}->saved_data["{local.derived("cpp_flag", arg.name)}"] = {_given(arg)};')
        for gradient in op.backward.gradients:
            if gradient.formula:
                arg, key = gradient.arg, local.derived("shape", gradient.arg.name)
                if arg.is_optional:
                    lines += [f"if ({_given(arg)}) {{",
                              f'  {local.ctx}->saved_data["{key}"] = {arg.name}->sym_sizes();', "}"]
                else:
                    lines.append(f'{local.ctx}->saved_data["{key}"] = {arg.name}.sym_sizes();')
        lines += [f'{local.ctx}->saved_data["{local.attribute(name)}"] = {name};' for name in op.backward.scalars]
        if op.backward.saved_tensors:
            lines.append("// Only what the formulas read, and only where a gradient that reads it is wanted.")
            lines.append(wrap(f"{local.ctx}->save_for_backward({{", self._saved_sources(), "});", indent=4))
        lines.append(f"return {{{', '.join(outputs)}}};" if self._multiple else f"return {outputs[0]};")
        return lines

    @property
    def backward_signature(self) -> str:
        local = self._local
        return f"static {_VARIABLE_LIST} backward({_CONTEXT}* {local.ctx}, {_VARIABLE_LIST} {local.grads}) {{"

    @property
    def _reads_grad(self) -> bool:
        """Whether a formula names `grad` (one output; not an argument of that name): backward binds it."""
        if self._multiple or "grad" in {a.name for a in self.op.args}:
            return False
        trees = [ast.parse(g.formula.python) for g in self.op.backward.gradients if g.formula]
        return any(isinstance(n, ast.Name) and n.id == "grad" for tree in trees for n in ast.walk(tree))

    def _saved_name(self, saved) -> str:
        return saved.name if saved.source == saved.name else self._local.result(saved.name)

    @property
    def backward_body(self) -> list[str]:
        op, local = self.op, self._local
        bw, ctx = op.backward, local.ctx
        if bw is None:  # the error the Python registration raises (a RuntimeError there too)
            return [_raise(not_differentiable_message(op), column=4), "return {};"]
        lines = []
        if bw.saved_tensors:
            lines.append(f"{_VARIABLE_LIST} {local.saved} = {ctx}->get_saved_variables();")
            lines += [f"const Tensor& {self._saved_name(s)} = {local.saved}[{i}];" for i, s in enumerate(bw.saved_tensors)]
        scalar_types = {a.name: SCALAR_TYPES[a.kind] for a in op.args if not a.is_tensor}
        to = {"double": "toDouble", "int64_t": "toInt", "bool": "toBool"}
        for name in bw.scalars:
            cpp = scalar_types[name]
            lines.append(f'{cpp} {name} = {ctx}->saved_data["{local.attribute(name)}"].{to[cpp]}();')
        if self._flagged:
            lines.append("// A Tensor? not given is no edge: needs_input_grad's indices after it move down one.")
        for arg in self._flagged:
            flag = local.derived("cpp_flag", arg.name)
            lines.append(f'const bool {flag} = {ctx}->saved_data["{flag}"].toBool();')
        if self._reads_grad:
            lines.append(f"const Tensor& {local.grad} = {local.grads}[0];")
        shared = shared_calls(op)
        gradients = [g for g in bw.gradients if g.formula]
        lines.append(f"Tensor {', '.join(local.derived('gradient', g.arg.name) for g in gradients)};")
        eager = [g for g in gradients if g.eager]
        if eager:  # backward_kernel.py: the kernel has no derivative; a differentiated backward takes the formulas
            lines.append("if (torch::autograd::GradMode::is_enabled()) {  // create_graph: the formulas as written")
            lines += ["  " + line for line in cpp_bind_for_eager(op)]
            lines += ["  " + line for line in self._summed(gradients, "eager", ())]
            lines.append("} else {")
        kernel_lines = _shared_calls(op, self.ops, shared) + self._summed(gradients, "formula", shared)
        lines += ["  " + line for line in kernel_lines] + ["}"] if eager else kernel_lines
        returned = []
        for arg in op.args:  # one per forward argument: undefined for the scalars and the non-differentiable
            gradient = bw.gradient_for(arg)
            returned.append(local.derived("gradient", arg.name) if gradient and gradient.formula else "Tensor()")
        lines.append(wrap("return {", returned, "};", indent=4))
        return lines

    def _summed(self, gradients: list, which: str, shared: tuple[SharedCall, ...]) -> list[str]:
        """Each wanted gradient, its formula (`which`: the Gradient's, or "eager": as written) summed to its input's shape."""
        op, local = self.op, self._local
        ctx, indent = local.ctx, 6 + 2 * any(g.eager for g in gradients)
        formula = Formula(op, {o.name: o for o in self.ops}, shared)
        lines = ["// Each gradient is summed back to its input's shape, where the input was broadcast."]
        for g in gradients:
            written = g.eager or g.formula if which == "eager" else g.formula
            expression = formula.emit(ast.parse(written.python, mode="eval").body).code
            shape = f'{ctx}->saved_data["{local.derived("shape", g.arg.name)}"].toSymIntVector()'
            gradient = local.derived("gradient", g.arg.name)
            lines.append(f"if ({_wanted(op, g.arg.name, ctx)}) {{")
            # wrap() lays out the lines at their columns in csrc/ops.cpp: the statement's is 6 (8 in a branch).
            summed = wrap(f"{gradient} = at::sum_to(", [wrap_expression(expression, indent + 4, indent + 4), shape],
                          ");", indent=indent)
            lines.append(f"  {summed}")
            lines.append("}")
        return lines

    @property
    def kernel_signature(self) -> str:
        return wrap(f"{_return_type(self.op)} {self.name}(", _parameters(self.op), ") {")

    @property
    def kernel_body(self) -> list[str]:
        """No gradient wanted: the kernels at once, no node built; else the Function."""
        op, local = self.op, self._local
        arguments = ", ".join(a.name for a in op.args)
        tensors = ", ".join(a.name for a in op.tensor_args)
        lines = [f"if (!torch::autograd::compute_requires_grad({tensors})) {{",
                 f"  at::AutoDispatchBelowADInplaceOrView {local.guard};",
                 f"  return ops::{op.name}({arguments});",
                 "}"]
        if self._multiple:
            outputs = local.outputs
            unpacked = ", ".join(f"{outputs}[{i}]" for i in range(op.num_outputs))
            return lines + [f"{_VARIABLE_LIST} {outputs} = {self.function}::apply({arguments});",
                            f"return {{{unpacked}}};"]
        return lines + [f"return {self.function}::apply({arguments});"]

    @property
    def impl(self) -> str:
        return f'm.impl("{self.name}", &{self.op.namespace}::autograd::kernels::{self.name});'


def ops(package: Package) -> tuple[CppAutograd, ...]:
    """The ops whose autograd csrc/ops.cpp defines."""
    return tuple(CppAutograd(op, package.ops) for op in package.ops if op.cpp_autograd)


def dispatched_ops(package: Package) -> tuple[DispatchedOp, ...]:
    """The ops the Functions call through the dispatcher: their own (forward) and those their formulas call."""
    called = {op.name for op in package.ops if op.cpp_autograd}
    called |= {name for op in package.ops if op.cpp_autograd and op.backward for g in op.backward.gradients if g.formula
               for name in g.formula.own_ops_called}
    return tuple(DispatchedOp(op) for op in package.ops if op.name in called)
