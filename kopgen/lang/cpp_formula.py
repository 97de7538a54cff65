"""This module translates one backward formula (its Python, lang/autograd's `Formula.python`) into C++ over
the locals of a generated `torch::autograd::Function`'s backward (lang/cpp_autograd.py): the subset that
module's docstring lists, and `Unsupported` with the reason for anything outside it."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..backward_kernel import row_reduction as _row_reduction
from ..expr.emitters import UNARY_FUNCS
from ..model import Op
from ..names import locals_for
from .autograd import SharedCall
from .split import is_split

# Argument and return types a Function's forward and the dispatcher handles take here.
TYPES = {"Tensor": "const Tensor&", "Tensor?": "const std::optional<Tensor>&", "float": "double", "int": "int64_t",
         "bool": "bool"}
# torch.<f> of the formulas with their ATen function: the pointwise language's functions, and a few more.
_ATEN = {f: f"at::{f}" for f in (*UNARY_FUNCS, "neg", "reciprocal", "sign", "square", "expm1", "exp2", "log2",
                                  "log10", "sinh", "cosh", "asin", "acos", "atan", "erfc", "trunc")}
_ATEN_BINARY = {f: f"at::{f}" for f in ("minimum", "maximum", "pow", "atan2")}
# torch.nn.functional.<f> of one Tensor, as gated ops' formulas write their activations.
_FUNCTIONAL = {f: f"at::{f}" for f in ("silu", "relu", "gelu", "sigmoid", "tanh")}
_ATOM = 100
# C++ precedences (higher binds tighter), for the operators the translation writes.
_PREC = {"?": 1, "||": 2, "&&": 3, "==": 5, "!=": 5, "<": 6, "<=": 6, ">": 6, ">=": 6, "+": 10, "-": 10,
         "*": 11, "/": 11, "unary": 12}
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


class Unsupported(Exception):
    """A formula, or the op, outside what the C++ translation takes: the reason, for `kopgen check`."""


@dataclass(frozen=True)
class _Value:
    code: str
    prec: int
    kind: str  # "tensor", "scalar" (double, int64_t, bool) or "returns" (an own op's std::tuple)
    count: int = 1  # an own op's returns


def signature_problem(op: Op) -> str | None:
    """Why the op's own arguments or returns keep it out of C++ autograd here, or None."""
    for arg in op.args:
        if str(arg.schema.type) not in TYPES:
            return (f"argument {arg.name!r} is a {arg.schema.type} (C++ autograd takes Tensor, Tensor?, float, int "
                    "and bool)")
    if not op.schema.returns or any(str(r.type) != "Tensor" for r in op.schema.returns):
        return "it does not return Tensors only"
    return None


class Formula:
    """One formula's Python (lang/autograd's `Formula.python`) as C++ over backward's locals."""

    def __init__(self, op: Op, ops: dict[str, Op], shared: tuple[SharedCall, ...]):
        self.op, self.ops, self.local = op, ops, locals_for(op)
        self.args = {a.name: a for a in op.args}
        self.halves = {h.name for h in op.body.halves} if is_split(op) else set()  # bound by _bind_halves
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
        if name in self.halves:
            return _Value(name, _ATOM, "tensor")
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
            return _Value(shared.local, _ATOM, returns_kind(self.ops[shared.called_op]),
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
        if path[:3] == ["torch", "nn", "functional"] and len(path) == 4 and path[3] in _FUNCTIONAL \
                and len(node.args) == 1:
            return self.call(_FUNCTIONAL[path[3]], node.args)
        if len(path) == 2 and path[0] == "torch":
            function = path[1]
            if function in _ATEN and len(node.args) == 1:
                return self.call(_ATEN[function], node.args)
            if function in _ATEN_BINARY and len(node.args) == 2:
                return self.call(_ATEN_BINARY[function], node.args, scalars_too=function == "pow")
            if function == "where" and len(node.args) == 3:
                return self.where(node.args)
            if function == "cat" and len(node.args) == 2:
                return self.cat(*node.args)
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

    def cat(self, tensors: ast.AST, dim: ast.AST) -> _Value:
        """`torch.cat([A, B, ...], dim)`, a split op's gradient as its formula writes it: at::cat."""
        if not isinstance(tensors, ast.List) or not isinstance(dim, (ast.Constant, ast.UnaryOp)):
            raise Unsupported(f"torch.cat({ast.unparse(tensors)}, {ast.unparse(dim)}): C++ autograd takes a list "
                              "of Tensors and a dimension")
        operands = [self.sub(t, 0) for t in tensors.elts]
        (axis, axis_kind) = self.sub(dim, 0)
        if any(kind != "tensor" for _, kind in operands) or axis_kind != "scalar":
            raise Unsupported(f"torch.cat({ast.unparse(tensors)}, {ast.unparse(dim)}) of a number")
        return _Value(f"at::cat({{{', '.join(code for code, _ in operands)}}}, {axis})", _ATOM, "tensor")

    def own_op(self, name: str, args: list[ast.AST]) -> _Value:
        """A call of an op of the namespace, through the dispatcher: every argument given, in order."""
        called = self.ops.get(name)
        if called is None or signature_problem(called):
            raise Unsupported(f"{name}() takes or returns types the C++ translation lacks")
        if len(args) != len(called.args):
            raise Unsupported(f"{name}() is called without all its arguments")
        operands = [self.sub(a, 0) for a in args]
        for (_, kind), param in zip(operands, called.args, strict=True):
            if (kind == "tensor") != param.is_tensor:
                raise Unsupported(f"{name}() is passed a {kind} for {param.name!r}")
        code = f"ops::{name}({', '.join(code for code, _ in operands)})"
        return _Value(code, _ATOM, returns_kind(called), len(called.schema.returns))


def returns_kind(op: Op) -> str:
    return "tensor" if len(op.schema.returns) == 1 else "returns"
