"""This module translates an op's backward formulas into the generated autograd of _registration.py:
setup_context, which keeps on ctx what the formulas read, and backward, which evaluates them and sums
each gradient back to its input's shape (as torchgen's api/autograd.py does for derivatives.yaml).

The formulas' names (grad, grads, result, results) and backward's locals are those of names.Locals:
renamed where an argument of the op takes them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..expr.formula import Formula
from ..expr.syntax import unparse
from ..model import Arg, Backward, Op, Saved
from ..names import Locals, locals_for
from . import layout, split, tests
from .layout import literal, wrap
from .python import backward_function, returns, setup_context_function, tuple_target


def register_autograd(op: Op) -> str:
    return wrap("torch.library.register_autograd(",
                [literal(op.qualname), backward_function(op), f"setup_context={setup_context_function(op)}"])


def setup_context_define(op: Op) -> str:
    # torch calls setup_context by keyword: its parameters keep torch's names (names.SETUP_CONTEXT_PARAMETERS).
    keyword_only = ["keyword_only_inputs"] if op.keyword_only_names else []
    return wrap(f"def {setup_context_function(op)}(", ["ctx", "inputs", *keyword_only, "output"], "):")


def _needs_input_grad(backward: Backward, local: Locals, ctx: str) -> str:
    """What setup_context and backward test: ctx's own tuple, or one padded to every input."""
    return local.needs_input_grad if backward.droppable_inputs else f"{ctx}.needs_input_grad"


def _padded_needs_input_grad(backward: Backward, local: Locals, ctx: str) -> list[str]:
    """ctx.needs_input_grad has one entry per input the call passed on: padded to every input."""
    count = len(backward.arg_names)
    padded = f"{ctx}.needs_input_grad + (False,) * ({count} - len({ctx}.needs_input_grad))"
    return ["    # The dispatcher drops trailing arguments left at their defaults (None): they want no gradient.",
            "    " + layout.assign(local.needs_input_grad, padded, 4)]


def _metadata(saved: Saved, source: str) -> str:
    """What setup_context keeps of a tensor read only for its metadata (None for an absent optional)."""
    value = f"_support.TensorMetadata({source})"
    return f"None if {source} is None else {value}" if saved.optional else value


def _source(local: Locals, saved: Saved) -> str:
    """How setup_context reaches a saved value: an argument as it unpacked it, or torch's `output`."""
    return local.unpacked(saved.source) if saved.source == saved.name else saved.source


def _saved_name(local: Locals, saved: Saved) -> str:
    """A saved value's name in backward: an argument's own, or the local of a saved output (result, ...)."""
    return saved.name if saved.source == saved.name else local.result(saved.name)


def setup_context_body(op: Op) -> list[str]:
    """setup_context: what backward reads, kept on ctx; tensors saved only where a wanted gradient reads them."""
    bw, local = op.backward, locals_for(op)
    kept = {s.source for s in bw.saved_tensors + bw.saved_metadata} | set(bw.scalars)
    kept |= {g.arg.name for g in bw.gradients if g.formula}
    lines = [f"    {tuple_target([local.unpacked(n) if n in kept else local._ for n in bw.arg_names])} = inputs"]
    if bw.droppable_inputs and bw.saved_tensors:
        lines += _padded_needs_input_grad(bw, local, "ctx")
    lines += [f'    {local.unpacked(name)} = keyword_only_inputs["{name}"]' for name in bw.scalars if name in bw.keyword_only]
    for gradient in bw.gradients:
        if gradient.formula:
            name, arg = local.unpacked(gradient.arg.name), gradient.arg.name
            shape = f"None if {name} is None else {name}.shape" if gradient.arg.is_optional else f"{name}.shape"
            lines.append(f"    ctx.{local.derived('shape', arg)} = {shape}")
    lines += [f"    ctx.{local.attribute(name)} = {local.unpacked(name)}" for name in bw.scalars]
    lines += ["    " + layout.assign(f"ctx.{local.attribute(s.name)}", _metadata(s, _source(local, s)), 4)
              for s in bw.saved_metadata]
    if bw.saved_tensors:
        needs = _needs_input_grad(bw, local, "ctx")
        lines.append("    # Save only what the formulas read, and only when a gradient that reads it is wanted.")
        saved = [f"{_source(local, s)} if {' or '.join(f'{needs}[{i}]' for i in s.needed_by)} else None"
                 for s in bw.saved_tensors]
        lines.append("    " + wrap("ctx.save_for_backward(", saved, ")", 4, explode=True))
    return lines


def backward_define(op: Op) -> str:
    local = locals_for(op)
    return f"def {backward_function(op)}({local.ctx}, {local.grad if op.backward.num_outputs == 1 else '*' + local.grads}):"


class _FormulaNames(ast.NodeTransformer):
    """A formula's grad, grads, result and results as backward binds them: renamed where the op's names
    take them; with one output, grads[0] and results[0] are grad and result."""

    def __init__(self, local: Locals, args: set[str], one: bool):
        names = {"grad": local.grad, "grads": local.grads, "results": local.results}
        if one:
            names["result"] = local.result("result")
        self.names = {name: value for name, value in names.items() if name not in args}
        self.local, self.args, self.one = local, args, one

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.names.get(node.id, node.id), node.ctx)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        base = node.value
        if self.one and isinstance(base, ast.Name) and base.id in ("grads", "results") and base.id not in self.args:
            return ast.Name(self.local.grad if base.id == "grads" else self.local.result("result"), ast.Load())
        return self.generic_visit(node)


class _SharedCalls(ast.NodeTransformer):
    """A formula with each call that backward runs once beforehand read from its local."""

    def __init__(self, locals_by_call: dict[str, str]):
        self.locals_by_call = locals_by_call

    def visit_Call(self, node: ast.Call) -> ast.AST:
        local = self.locals_by_call.get(ast.unparse(node))
        return ast.Name(local, ast.Load()) if local else self.generic_visit(node)


class _DirectCalls(ast.NodeTransformer):
    """A formula with each call of an op that ops.py runs directly (lang/eager.py) made through
    _support.kernel_or_op: in a plain eager backward its kernel, else the operator."""

    def __init__(self, kernels: dict[str, str]):
        self.kernels = kernels

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = _own_op_called(node)
        if name not in self.kernels:
            return node
        helper = ast.Attribute(ast.Name("_support", ast.Load()), "kernel_or_op", ast.Load())
        return ast.Call(helper, [ast.Name(self.kernels[name], ast.Load()), node.func, *node.args], node.keywords)


def _formula(op: Op, python: str, shared: tuple[SharedCall, ...] = (), direct: bool = False) -> str:
    """A formula's Python (over the arguments, grad(s) and result(s)) in the names of backward; `direct`:
    the calls of ops that ops.py runs without the dispatcher made as it makes them (not where autograd
    differentiates the backward: there the operator's own autograd must run)."""
    args = {a.name for a in op.args}
    tree = _SharedCalls({call.python: call.local for call in shared}).visit(ast.parse(python))
    if direct and op.backward.direct_calls:
        tree = _DirectCalls(dict(op.backward.direct_calls)).visit(tree)
    return unparse(_FormulaNames(locals_for(op), args, op.backward.num_outputs == 1).visit(tree))


@dataclass(frozen=True)
class SharedCall:
    """A call of an op of the namespace that several gradients' formulas make (a fused backward giving
    each of them one of its returns): backward runs it once, into a local, when one of them is wanted."""

    python: str  # the call, as the formulas' Python has it (torch.ops.<namespace>.<op>.default(...))
    called_op: str
    local: str
    users: tuple[int, ...]  # the indices of the inputs whose gradients read it


def _own_op_calls(python: str) -> dict[str, str]:
    """The calls of the namespace's ops in a formula's Python (a formula reaches torch.ops in no other
    way), as text: the op each calls."""
    return {ast.unparse(node): name for node in ast.walk(ast.parse(python))
            if isinstance(node, ast.Call) and (name := _own_op_called(node))}


def _own_op_called(node: ast.Call) -> str | None:
    """The op a call of torch.ops.<namespace>.<op>.default calls, else None."""
    func = node.func
    return func.value.attr if isinstance(func, ast.Attribute) and ast.unparse(func).startswith("torch.ops.") else None


def shared_calls(op: Op) -> tuple[SharedCall, ...]:
    """The own-op calls that more than one gradient's formula makes, in the order the formulas make them;
    one per op (a second call of the same op with other arguments stays in its formulas)."""
    users: dict[str, list[int]] = {}
    called_op = {}
    for gradient in op.backward.gradients:
        for text, name in (_own_op_calls(gradient.formula.python) if gradient.formula else {}).items():
            users.setdefault(text, []).append(gradient.arg.index)
            called_op[text] = name
    shared, seen = [], set()
    for text, indices in users.items():
        name = called_op[text]
        if len(indices) > 1 and name not in seen:
            seen.add(name)
            shared.append(SharedCall(text, name, locals_for(op).shared_call(name), tuple(indices)))
    return tuple(shared)


def backward_body(op: Op) -> list[str]:
    """backward: the saved values unpacked, then each wanted gradient summed back to its input's shape."""
    bw, local = op.backward, locals_for(op)
    ctx = local.ctx
    lines = []
    if bw.saved_tensors:
        lines.append(f"    {tuple_target([_saved_name(local, s) for s in bw.saved_tensors])} = {ctx}.saved_tensors")
    saved = {s.name for s in bw.saved_tensors if s.source != s.name}
    if bw.num_outputs > 1 and saved:
        results = [local.result(f"result{i}") if f"result{i}" in saved else "None" for i in range(bw.num_outputs)]
        lines.append("    " + layout.statement(f"{local.results} = ({', '.join(results)})", 4))
    lines += [f"    {name} = {ctx}.{local.attribute(name)}" for name in bw.scalars]
    lines += [f"    {s.name} = {ctx}.{local.attribute(s.name)}" for s in bw.saved_metadata]
    lines += split.bind_in_backward(op)
    if bw.droppable_inputs:
        lines += _padded_needs_input_grad(bw, local, ctx)
    gradients = [g for g in bw.gradients if g.formula]
    needs = _needs_input_grad(bw, local, ctx)
    lines += _eager_when_differentiated(op, needs)
    lines += [f"    {local.derived('gradient', g.arg.name)} = None" for g in gradients]
    shared = shared_calls(op)
    names = {a.index: a.name for a in op.args}
    for call in shared:
        readers = " and ".join(names[i] for i in call.users)
        lines.append(f"    # One {call.called_op} call serves the gradients of {readers}: it runs once, if one is wanted.")
        lines.append(f"    if {' or '.join(f'{needs}[{i}]' for i in call.users)}:")
        lines.append("        " + layout.assign(call.local, _formula(op, call.python, direct=True), 8))

    def gradient_lines(g) -> list[str]:
        formula = _formula(op, g.formula.python, shared, direct=True)
        summed = f"_support.sum_to_shape({formula}, {ctx}.{local.derived('shape', g.arg.name)})"
        return [f"    if {needs}[{g.arg.index}]:", "        " + layout.assign(local.derived("gradient", g.arg.name), summed, 8)]

    lines.append("    # Each gradient is summed back to its input's shape, where the input was broadcast.")
    # The gradients computed in torch ops (no kernel, no op of the namespace) last: the Tensors they read are
    # widened first, not those a kernel takes.
    in_torch = [g for g in gradients if g.eager is None and not g.formula.own_ops_called]
    for g in gradients:
        if g not in in_torch:
            lines += gradient_lines(g)
    lines += _widened(op, [g.formula for g in in_torch])
    for g in in_torch:
        lines += gradient_lines(g)
    gradients_returned = []
    for arg in op.args[: op.positional_count]:
        gradient = bw.gradient_for(arg)
        gradients_returned.append(local.derived("gradient", arg.name) if gradient and gradient.formula
                                  else _no_gradient(op, arg, needs))
    lines.append("    " + returns(gradients_returned, 4))
    return lines


def _no_gradient(op: Op, arg: Arg, needs: str) -> str:
    """What backward returns for an argument without a formula: None; for a Tensor list (which takes no
    formula) None per element, and an error where one wants a gradient, never a silent None."""
    if not arg.is_any_tensor_list:
        return "None"
    return f"_support.no_gradient({literal(op.qualname)}, {literal(arg.name)}, {needs}[{arg.index}])"


def any_tensor_list_input(package) -> bool:
    """Whether an op with a backward in Python takes a Tensor list (its gradient: _support.no_gradient)."""
    return any(op.backward and not op.cpp_autograd and any(a.is_any_tensor_list for a in op.args) for op in package.ops)


def _widened(op: Op, formulas: list[Formula], indent: int = 4) -> list[str]:
    """Before `formulas` (computed in torch ops: no kernel, no op of the namespace), where the op takes 16-bit
    dtypes: the Tensors they read widened to float32, as the reference computes (autograd casts each gradient
    back to its input's dtype). In 16 bits every step of a formula rounds: bfloat16 layer_norm's weight
    gradient, its formula subtracting the row's mean, was 0.0425 where the reference gives 0.0293."""
    if not formulas or not {"float16", "bfloat16"} & set(op.dtypes) or any(f.own_ops_called for f in formulas):
        return []
    local = locals_for(op)
    read = {node.id for f in formulas for node in ast.walk(ast.parse(_formula(op, f.python))) if isinstance(node, ast.Name)}
    args = {a.name: a for a in op.args}
    # Single Tensors only: an argument (not a Tensor[], not one of its own dtype, as an int64 index), grad, result
    candidates = [_saved_name(local, s) for s in op.backward.saved_tensors
                  if s.name in args and args[s.name].kind in ("tensor", "optional") and not tests.own_dtype(op, args[s.name])]
    if op.backward.num_outputs == 1:
        candidates += [local.grad, local.result("result")]
    names = [name for name in dict.fromkeys(candidates) if name in read]
    if not names:
        return []
    pad = " " * indent
    return [f"{pad}# The formulas below in float32, as the reference computes them: in 16 bits each step rounds.",
            pad + wrap(f"{tuple_target(names)} = _support.upcast(", names, ")", indent)]


def any_python_backward(package) -> bool:
    """Whether an op of the package has backward formulas in Python (backward_body), which sum_to_shape."""
    return any(op.backward and not op.cpp_autograd for op in package.ops)


def _eager_when_differentiated(op: Op, needs: str) -> list[str]:
    """Where backward runs the op's backward kernel (backward_kernel.py), which has no derivative of its
    own: a backward that autograd differentiates again (create_graph, grad mode on) runs the formulas as
    written, in torch ops."""
    bw, local = op.backward, locals_for(op)
    if not any(g.eager for g in bw.gradients):
        return []
    values = []
    for arg in op.args[: op.positional_count]:
        gradient = bw.gradient_for(arg)
        if gradient is None or gradient.formula is None:
            values.append(_no_gradient(op, arg, needs))
            continue
        written = gradient.eager or gradient.formula  # a gradient that is grad itself has no kernel
        summed = f"_support.sum_to_shape({_formula(op, written.python)}, {local.ctx}.{local.derived('shape', arg.name)})"
        values.append(f"{summed} if {needs}[{arg.index}] else None")
    formulas = [g.eager or g.formula for g in bw.gradients if g.formula]
    return ["    if torch.is_grad_enabled():  # create_graph: differentiable formulas, not the kernel",
            *split.bind_for_eager(op), *_widened(op, formulas, 8), "        " + returns(values, 8)]
