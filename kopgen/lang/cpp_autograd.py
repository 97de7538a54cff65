"""This module translates an op's backward formulas into C++ autograd (csrc/ops.cpp), as lang/autograd.py
does into Python: per op a `torch::autograd::Function` whose forward redispatches below autograd and
saves only what the formulas read, and whose backward computes each formula with ATen calls, calling
the namespace's own ops through the dispatcher (so a second backward goes through their autograd too).
It is registered at the Autograd key, so a call with inputs requiring grad never enters Python.

Only torch_library ops take it (the stable ABI has no autograd; docs/performance.md), and only where
every formula falls in the subset below: arithmetic and comparisons of Tensors and scalars, the
pointwise language's functions as torch.<f>, torch.where, row sums and means over the last dimension
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

from ..backward_kernel import row_reduction as _row_reduction
from ..expr.emitters import UNARY_FUNCS
from ..model import Op, Package, Route
from ..names import locals_for
from .autograd import SharedCall, shared_calls
from .cpp import SCALAR_TYPES, string_literal, wrap, wrap_expression
from .python import not_differentiable_message

# Argument and return types a Function's forward and the dispatcher handles take here.
_TYPES = {"Tensor": "const Tensor&", "Tensor?": "const std::optional<Tensor>&", "float": "double", "int": "int64_t",
          "bool": "bool"}
# torch.<f> of the formulas with their ATen function: the pointwise language's functions, and a few more.
_ATEN = {f: f"at::{f}" for f in (*UNARY_FUNCS, "neg", "reciprocal", "sign", "square", "expm1", "exp2", "log2",
                                  "log10", "sinh", "cosh", "asin", "acos", "atan", "erfc", "trunc")}
_ATEN_BINARY = {f: f"at::{f}" for f in ("minimum", "maximum", "pow", "atan2")}
_ATOM = 100
# C++ precedences (higher binds tighter), for the operators the translation writes.
_PREC = {"?": 1, "||": 2, "&&": 3, "==": 5, "!=": 5, "<": 6, "<=": 6, ">": 6, ">=": 6, "+": 10, "-": 10,
         "*": 11, "/": 11, "unary": 12}
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
# Named unqualified (csrc/ops.cpp's `using`s): names.CPP_TYPE_NAMES keeps arguments from taking them.
_CONTEXT, _VARIABLE_LIST = "AutogradContext", "variable_list"
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


class Unsupported(Exception):
    """A formula, or the op, outside what the C++ translation takes: the reason, for `kopgen check`."""


@dataclass(frozen=True)
class _Value:
    code: str
    prec: int
    kind: str  # "tensor", "scalar" (double, int64_t, bool) or "returns" (an own op's std::tuple)
    count: int = 1  # an own op's returns


def _signature_problem(op: Op) -> str | None:
    """Why the op's own arguments or returns keep it out of C++ autograd here, or None."""
    for arg in op.args:
        if str(arg.schema.type) not in _TYPES:
            return (f"argument {arg.name!r} is a {arg.schema.type} (C++ autograd takes Tensor, Tensor?, float, int "
                    "and bool)")
    if not op.schema.returns or any(str(r.type) != "Tensor" for r in op.schema.returns):
        return "it does not return Tensors only"
    return None


def python_reason(op: Op, ops: Sequence[Op]) -> str | None:
    """Why the op's autograd is registered from Python rather than generated in C++ (None: C++)."""
    if op.registration is Route.STABLE_ABI:
        return "the stable ABI has no autograd (docs/performance.md)"
    if op.registration is not Route.TORCH_LIBRARY:
        return f"{op.registration} is a Python route"
    problem = _signature_problem(op)
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
                _Formula(op, by_name, ()).emit(tree.body)
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
                and _signature_problem(op) is None)
    return op.has_gradients and python_reason(op, ops) is None


class _Formula:
    """One formula's Python (lang/autograd's `Formula.python`) as C++ over backward's locals."""

    def __init__(self, op: Op, ops: dict[str, Op], shared: tuple[SharedCall, ...]):
        self.op, self.ops, self.local = op, ops, locals_for(op)
        self.args = {a.name: a for a in op.args}
        self.shared = {call.python: call for call in shared}
        self.one = op.num_outputs == 1

    def emit(self, node: ast.AST) -> _Value:
        method = getattr(self, "emit_" + type(node).__name__, None)
        if method is None:
            raise Unsupported(f"{ast.unparse(node)!r} has no C++ translation")
        return method(node)

    def sub(self, node: ast.AST, prec: int) -> tuple[str, str]:
        value = self.emit(node)
        if value.kind == "returns":
            raise Unsupported(f"{ast.unparse(node)!r} returns {value.count} values; index it")
        return (value.code if value.prec >= prec else f"({value.code})"), value.kind

    def emit_Name(self, node: ast.Name) -> _Value:
        name = node.id
        arg = self.args.get(name)
        if arg is not None and arg.is_optional:
            raise Unsupported(f"{name!r} is a Tensor? (the C++ translation reads no optional Tensor)")
        if arg is not None:
            return _Value(name, _ATOM, "tensor" if arg.is_tensor else "scalar")
        if name == "grad" and self.one:  # the formulas' names, as backward binds them (names.Locals)
            return _Value(self.local.grad, _ATOM, "tensor")
        if name == "result" and self.one:
            return _Value(self.local.result("result"), _ATOM, "tensor")
        raise Unsupported(f"{name!r} has no C++ translation")

    def emit_Constant(self, node: ast.Constant) -> _Value:
        value = node.value
        if type(value) is bool:
            return _Value(str(value).lower(), _ATOM, "scalar")
        if type(value) is int and not -(2**63) <= value < 2**63:
            raise Unsupported(f"{value} is beyond C++'s int64_t")
        if type(value) in (int, float):
            text = repr(value)
            return _Value(text, _ATOM if value >= 0 else _PREC["unary"], "scalar")
        raise Unsupported(f"{value!r} has no C++ translation")

    def emit_BinOp(self, node: ast.BinOp) -> _Value:
        if isinstance(node.op, ast.Pow):
            return self.call("at::pow", [node.left, node.right], scalars_too=True)
        symbol = _BINARY.get(type(node.op))
        if symbol is None:
            raise Unsupported(f"{ast.unparse(node)!r}: C++ autograd takes + - * / and **")
        prec = _PREC[symbol]
        (left, left_kind), (right, right_kind) = self.sub(node.left, prec), self.sub(node.right, prec + 1)
        tensor = "tensor" in (left_kind, right_kind)
        if symbol == "/" and not tensor:  # Python's / of two numbers is a true division
            left = f"static_cast<double>({self.sub(node.left, 0)[0]})"
        return _Value(f"{left} {symbol} {right}", prec, "tensor" if tensor else "scalar")

    def emit_UnaryOp(self, node: ast.UnaryOp) -> _Value:
        if isinstance(node.op, ast.UAdd):
            return self.emit(node.operand)
        if isinstance(node.op, ast.USub):
            operand, kind = self.sub(node.operand, _PREC["unary"] + 1)
            return _Value(f"-{operand}", _PREC["unary"], kind)
        if not isinstance(node.op, ast.Not):  # ~: bitwise on numbers
            raise Unsupported(f"{ast.unparse(node)!r}: C++ autograd takes -, + and not")
        operand, kind = self.sub(node.operand, _PREC["unary"])
        if kind == "tensor":
            return _Value(f"at::logical_not({self.sub(node.operand, 0)[0]})", _ATOM, "tensor")
        return _Value(f"!{operand}", _PREC["unary"], "scalar")

    def emit_Compare(self, node: ast.Compare) -> _Value:
        symbol = _COMPARE.get(type(node.ops[0])) if len(node.ops) == 1 else None
        if symbol is None:
            raise Unsupported(f"{ast.unparse(node)!r}: C++ autograd takes one comparison at a time")
        prec = _PREC[symbol]
        (left, left_kind), (right, right_kind) = self.sub(node.left, prec + 1), self.sub(node.comparators[0], prec + 1)
        return _Value(f"{left} {symbol} {right}", prec, "tensor" if "tensor" in (left_kind, right_kind) else "scalar")

    def emit_BoolOp(self, node: ast.BoolOp) -> _Value:
        symbol = "&&" if isinstance(node.op, ast.And) else "||"
        operands = [self.sub(value, _PREC[symbol] + 1) for value in node.values]
        if any(kind == "tensor" for _, kind in operands):
            raise Unsupported(f"{ast.unparse(node)!r}: 'and'/'or' of Tensors")
        return _Value(f" {symbol} ".join(code for code, _ in operands), _PREC[symbol], "scalar")

    def emit_IfExp(self, node: ast.IfExp) -> _Value:
        test, test_kind = self.sub(node.test, _PREC["?"] + 1)
        (body, body_kind), (orelse, orelse_kind) = self.sub(node.body, _PREC["?"]), self.sub(node.orelse, _PREC["?"])
        if test_kind == "tensor" or body_kind != orelse_kind:
            raise Unsupported(f"{ast.unparse(node)!r}: a condition on a scalar, choosing between two Tensors "
                              "or two numbers")
        return _Value(f"{test} ? {body} : {orelse}", _PREC["?"], body_kind)

    def emit_Subscript(self, node: ast.Subscript) -> _Value:
        index = node.slice.value if isinstance(node.slice, ast.Constant) else None
        base = node.value
        if isinstance(base, ast.Name) and type(index) is int and base.id not in self.args:
            if base.id == "grads":
                return _Value(f"{self.local.grads}[{index}]", _ATOM, "tensor")
            if base.id == "results":
                return _Value(self.local.result(f"result{index}"), _ATOM, "tensor")
        value = self.emit(base)
        if value.kind != "returns" or type(index) is not int:
            raise Unsupported(f"{ast.unparse(node)!r} has no C++ translation")
        return _Value(f"std::get<{index}>({value.code})", _ATOM, "tensor")

    def emit_Call(self, node: ast.Call) -> _Value:
        shared = self.shared.get(ast.unparse(node))
        if shared is not None:
            return _Value(shared.local, _ATOM, _returns_kind(self.ops[shared.called_op]),
                          len(self.ops[shared.called_op].schema.returns))
        reduction = _row_reduction(node)
        if reduction is not None:  # `(E).mean(-1, keepdim=True)`: a row statistic of a normalisation's formula
            operand, kind = self.sub(node.func.value, 0)
            if kind != "tensor":
                raise Unsupported(f"{ast.unparse(node)!r} of a number")
            return _Value(f"at::{reduction}({operand}, at::IntArrayRef{{-1}}, true)", _ATOM, "tensor")
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("sum", "mean") and node.args:
            raise Unsupported(f"{ast.unparse(node)!r}: C++ autograd takes a sum or mean over the last dimension "
                              "with keepdim=True")
        path = ast.unparse(node.func).split(".")
        if node.keywords:
            raise Unsupported(f"{ast.unparse(node)!r}: keyword arguments")
        if path[:2] == ["torch", "ops"] and len(path) == 5:
            return self.own_op(path[3], node.args)
        if len(path) == 2 and path[0] == "torch":
            function = path[1]
            if function in _ATEN and len(node.args) == 1:
                return self.call(_ATEN[function], node.args)
            if function in _ATEN_BINARY and len(node.args) == 2:
                return self.call(_ATEN_BINARY[function], node.args, scalars_too=function == "pow")
            if function == "where" and len(node.args) == 3:
                return self.where(node.args)
        raise Unsupported(f"{ast.unparse(node.func)}() has no C++ translation")

    def call(self, function: str, args: list[ast.AST], scalars_too: bool = False) -> _Value:
        """`at::f(x, ...)` of Tensors (pow also of a number and a Tensor); std::pow of two numbers."""
        operands = [self.sub(a, 0) for a in args]
        kinds = [kind for _, kind in operands]
        if all(kind == "scalar" for kind in kinds) and function == "at::pow":
            function = "std::pow"
        elif not all(kind == "tensor" for kind in kinds) and not scalars_too:
            raise Unsupported(f"{function}() of a number")
        kind = "scalar" if function == "std::pow" else "tensor"
        return _Value(f"{function}({', '.join(code for code, _ in operands)})", _ATOM, kind)

    def where(self, args: list[ast.AST]) -> _Value:
        (condition, kind), *choices = (self.sub(a, 0) for a in args)
        if kind != "tensor":
            raise Unsupported("torch.where() on a number")
        return _Value(f"at::where({condition}, {', '.join(code for code, _ in choices)})", _ATOM, "tensor")

    def own_op(self, name: str, args: list[ast.AST]) -> _Value:
        """A call of an op of the namespace, through the dispatcher: every argument given, in order."""
        called = self.ops.get(name)
        if called is None or _signature_problem(called):
            raise Unsupported(f"{name}() takes or returns types the C++ translation lacks")
        if len(args) != len(called.args):
            raise Unsupported(f"{name}() is called without all its arguments")
        operands = [self.sub(a, 0) for a in args]
        for (_, kind), param in zip(operands, called.args, strict=True):
            if (kind == "tensor") != param.is_tensor:
                raise Unsupported(f"{name}() is passed a {kind} for {param.name!r}")
        code = f"ops::{name}({', '.join(code for code, _ in operands)})"
        return _Value(code, _ATOM, _returns_kind(called), len(called.schema.returns))


def _returns_kind(op: Op) -> str:
    return "tensor" if len(op.schema.returns) == 1 else "returns"


# -- what csrc/ops.cpp prints


def _return_type(op: Op) -> str:
    count = len(op.schema.returns)
    return "Tensor" if count == 1 else f"std::tuple<{', '.join(['Tensor'] * count)}>"


def _parameters(op: Op) -> list[str]:
    return [f"{_TYPES[str(a.schema.type)]} {a.name}" for a in op.args]


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
        code = _Formula(op, by_name, ()).emit(ast.parse(call.python, mode="eval").body).code
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
        types = ", ".join(_TYPES[str(a.schema.type)] for a in self.op.args)
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
        formula = _Formula(op, {o.name: o for o in self.ops}, shared)
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
