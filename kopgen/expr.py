"""The two small expression languages of an op spec.

* Pointwise expressions (``compute``, ``reduce.expr``): arithmetic over the op's
  arguments, translated to PyTorch, Triton and C++ text.
* Backward formulas (``derivatives``): a restricted PyTorch expression, checked
  and turned into executable Python.

Both are parsed with :mod:`ast` and checked against an allow-list; user text is
never evaluated here.  Positions in errors are 0-based (line, column) within the
text, columns counted in characters.
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_CHARS = 2000
MAX_DEPTH = 50
# x ** 8 and tan(x) repeat their argument in Triton; this stops nested ones from exploding.
MAX_OUTPUT_CHARS = 100_000
ARG_KINDS = ("tensor", "float", "int", "bool")


class ExprError(ValueError):
    """A problem in an expression; ``str(err)`` is the message alone."""

    def __init__(self, message: str, line: int = 0, column: int = 0):
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


def _error(text: str, node: ast.AST, message: str, byte_col: int | None = None) -> ExprError:
    """An ExprError at `node` (ast columns are UTF-8 byte offsets: convert them)."""
    lineno = getattr(node, "lineno", 1)
    col = node.col_offset if byte_col is None else byte_col
    line = text.split("\n")[lineno - 1]
    return ExprError(message, lineno - 1, len(line.encode()[:col].decode(errors="ignore")))


def _attr_error(text: str, node: ast.Attribute, message: str) -> ExprError:
    """An error pointing at the attribute name of `node` rather than at its start."""
    where = ast.Name(lineno=node.end_lineno, col_offset=0)
    return _error(text, where, message, node.end_col_offset - len(node.attr.encode()))


def _parse(text: str) -> ast.expr:
    if not isinstance(text, str):
        raise ExprError(f"expected the expression as a string, got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise ExprError(f"the expression is too long ({len(text)} characters, at most {MAX_CHARS})")
    if not text.strip():
        raise ExprError("the expression is empty")
    try:
        body = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise ExprError(e.msg, max((e.lineno or 1) - 1, 0), max((e.offset or 1) - 1, 0)) from None
    except (ValueError, RecursionError, MemoryError):
        raise ExprError("the expression cannot be parsed") from None
    # Iterative, so that a deep tree cannot hit Python's recursion limit before we say so.
    stack = [(body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _error(text, node, f"the expression is nested too deeply (at most {MAX_DEPTH} levels)")
        for child in ast.iter_child_nodes(node):
            stack.append((child, depth + isinstance(child, ast.expr)))
    return body


def _did_you_mean(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


_FORBIDDEN = {
    ast.Attribute: "attributes", ast.Subscript: "subscripts", ast.Lambda: "lambdas",
    ast.ListComp: "comprehensions", ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions", ast.GeneratorExp: "comprehensions",
    ast.NamedExpr: "':=' assignments", ast.Starred: "'*' arguments", ast.JoinedStr: "f-strings",
    ast.List: "lists", ast.Tuple: "tuples", ast.Dict: "dicts", ast.Set: "sets",
    ast.Slice: "slices", ast.Await: "await expressions", ast.Yield: "yield expressions",
    ast.YieldFrom: "yield expressions", ast.keyword: "keyword arguments",
}


def _forbidden(node: ast.AST) -> str:
    if isinstance(node, ast.Constant):
        kinds = {str: "strings", bytes: "bytes literals", complex: "complex numbers"}
        return kinds.get(type(node.value), f"{node.value!r} values")
    return _FORBIDDEN.get(type(node), f"{type(node).__name__} expressions")


_OP_SYMBOLS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.Mod: "%",
    ast.FloorDiv: "//", ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&",
    ast.BitOr: "|", ast.BitXor: "^", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in",
    ast.NotIn: "not in", ast.Invert: "~",
}
_ARITH = ("+", "-", "*", "/", "**")
_COMPARE = ("<", "<=", ">", ">=", "==", "!=")

# ---------------------------------------------------------------------------------------------
# Pointwise expressions
# ---------------------------------------------------------------------------------------------

_UNARY_FUNCS = ("abs", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
                "sigmoid", "relu", "erf", "floor", "ceil")
_ARITY = {**{f: 1 for f in _UNARY_FUNCS}, "minimum": 2, "maximum": 2, "pow": 2, "where": 3}
# Argument names that would shadow something in the generated code (modules, builtins, C++).
_RESERVED = frozenset({
    "torch", "math", "tl", "triton", "std", "acc_t", "abs", "min", "max", "int", "float",
    "double", "bool", "char", "long", "short", "signed", "unsigned", "auto", "new", "delete",
    "this", "template", "typename", "class", "struct", "union", "namespace", "operator",
    "static", "const", "register", "default", "switch", "case", "goto", "do", "sizeof", "void",
})


@dataclass(frozen=True)
class _Kind:
    tensor: bool  # depends on a tensor argument (else: a scalar)
    boolean: bool  # a truth value (else: a number)


class _PointwiseChecker:
    """Infer a _Kind for every node; reject anything outside the pointwise language."""

    def __init__(self, text: str, args: Mapping[str, str]):
        self.text, self.args = text, args
        self.kinds: dict[ast.AST, _Kind] = {}
        self.uses: list[tuple[int, int, str]] = []

    def error(self, node: ast.AST, message: str) -> ExprError:
        return _error(self.text, node, message)

    def check(self, node: ast.AST) -> _Kind:
        visit = getattr(self, "visit_" + type(node).__name__, None)
        if visit is None:
            raise self.error(node, f"{_forbidden(node)} are not allowed in a pointwise expression")
        self.kinds[node] = kind = visit(node)
        return kind

    def number(self, node: ast.AST, what: str) -> _Kind:
        kind = self.check(node)
        if kind.boolean:
            raise self.error(node, f"{what} needs numbers, not booleans (use where(cond, x, y))")
        return kind

    def boolean(self, node: ast.AST, what: str) -> _Kind:
        kind = self.check(node)
        if not kind.boolean:
            raise self.error(node, f"{what} needs boolean operands (comparisons or bool arguments)")
        return kind

    def visit_Name(self, node: ast.Name) -> _Kind:
        kind = self.args.get(node.id)
        if kind is None:
            if node.id in _ARITY:
                raise self.error(node, f"{node.id!r} is a function; call it, like {node.id}(x)")
            hint = _did_you_mean(node.id, [*self.args, *_ARITY])
            raise self.error(node, f"unknown name {node.id!r}" + (
                hint or f"; the arguments are {', '.join(self.args) or '(none)'}"))
        if node.id in _RESERVED:
            raise self.error(node, f"the argument name {node.id!r} clashes with generated code; "
                                   "rename the argument")
        self.uses.append((node.lineno, node.col_offset, node.id))
        return _Kind(tensor=kind == "tensor", boolean=kind == "bool")

    def visit_Constant(self, node: ast.Constant) -> _Kind:
        value = node.value
        if isinstance(value, bool):
            return _Kind(False, True)
        if type(value) not in (int, float):
            raise self.error(node, f"{_forbidden(node)} are not allowed in a pointwise expression")
        if not math.isfinite(float(value)) or abs(value) > 1e300:
            raise self.error(node, "this number is too large")
        return _Kind(False, False)

    def visit_BinOp(self, node: ast.BinOp) -> _Kind:
        sym = _OP_SYMBOLS[type(node.op)]
        if sym not in _ARITH:
            raise self.error(node, f"operator {sym!r} is not allowed; use + - * / ** or and/or/not")
        left = self.number(node.left, repr(sym))
        right = self.number(node.right, repr(sym))
        return _Kind(left.tensor or right.tensor, False)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> _Kind:
        if isinstance(node.op, ast.Not):
            return _Kind(self.boolean(node.operand, "'not'").tensor, True)
        if isinstance(node.op, ast.Invert):
            raise self.error(node, "operator '~' is not allowed; use 'not'")
        return _Kind(self.number(node.operand, "unary minus").tensor, False)

    def visit_Compare(self, node: ast.Compare) -> _Kind:
        if len(node.ops) > 1:
            raise self.error(node, "chained comparisons are not allowed; write 'a < b and b < c'")
        sym = _OP_SYMBOLS[type(node.ops[0])]
        if sym not in _COMPARE:
            raise self.error(node, f"{sym!r} is not allowed; compare with < <= > >= == !=")
        left = self.number(node.left, repr(sym))
        right = self.number(node.comparators[0], repr(sym))
        return _Kind(left.tensor or right.tensor, True)

    def visit_BoolOp(self, node: ast.BoolOp) -> _Kind:
        what = "'and'" if isinstance(node.op, ast.And) else "'or'"
        kinds = [self.boolean(value, what) for value in node.values]
        return _Kind(any(k.tensor for k in kinds), True)

    def where(self, cond: ast.AST, x: ast.AST, y: ast.AST, what: str) -> _Kind:
        kinds = [self.check(cond), self.number(x, what), self.number(y, what)]
        if not kinds[0].boolean:
            raise self.error(cond, f"the condition of {what} must be a boolean "
                                   "(a comparison or a bool argument)")
        return _Kind(any(k.tensor for k in kinds), False)

    def visit_IfExp(self, node: ast.IfExp) -> _Kind:
        return self.where(node.test, node.body, node.orelse, "'if'")

    def visit_Call(self, node: ast.Call) -> _Kind:
        if node.keywords:
            raise self.error(node.keywords[0], "keyword arguments are not allowed; pass them "
                                               "by position")
        if not isinstance(node.func, ast.Name):
            raise self.error(node.func, "only the built-in functions can be called, like exp(x)")
        name = node.func.id
        if name in self.args:
            raise self.error(node.func, f"{name!r} is an argument, not a function")
        if name not in _ARITY:
            raise self.error(node.func, f"unknown function {name!r}{_did_you_mean(name, _ARITY)};"
                                        f" allowed: {', '.join(_ARITY)}")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.error(arg, "'*' arguments are not allowed")
        if len(node.args) != _ARITY[name]:
            n = _ARITY[name]
            raise self.error(node, f"{name}() takes {n} argument{'s' * (n > 1)}, "
                                   f"got {len(node.args)}")
        if name == "where":
            return self.where(*node.args, "where()")
        kinds = [self.number(arg, f"{name}()") for arg in node.args]
        return _Kind(any(k.tensor for k in kinds), False)


_ATOM = 100
# Python precedences (higher binds tighter).  The C++ operators kopgen emits keep the same
# order among themselves, so one table serves all three languages.
_PREC = {"if": 1, "or": 2, "and": 3, "not": 4, "cmp": 5, "|": 6, "&": 8, "+": 10, "-": 10,
         "*": 11, "/": 11, "unary": 12, "**": 13}


class _Emitter:
    """Turn a checked tree into code.  Every emit returns (code, precedence of its top)."""

    # function name -> (template, precedence of the result, precedence each argument needs)
    funcs: dict[str, tuple[str, int, int]] = {}

    def __init__(self, text: str, kinds: dict[ast.AST, _Kind]):
        self.text, self.kinds = text, kinds

    def emit(self, node: ast.AST) -> tuple[str, int]:
        code, prec = getattr(self, "emit_" + type(node).__name__)(node)
        if len(code) > MAX_OUTPUT_CHARS:
            raise _error(self.text, node, "the expression is too large once translated "
                                          "(powers and tan() repeat their argument)")
        return code, prec

    def sub(self, node: ast.AST, prec: int) -> str:
        """`node` as an operand that must bind at least as tightly as `prec`."""
        code, own = self.emit(node)
        return code if own >= prec else f"({code})"

    def tensor(self, node: ast.AST) -> bool:
        return self.kinds[node].tensor

    def emit_Name(self, node: ast.Name) -> tuple[str, int]:
        return node.id, _ATOM

    def emit_BinOp(self, node: ast.BinOp) -> tuple[str, int]:
        if isinstance(node.op, ast.Pow):
            return self.power(node.left, node.right)
        sym = _OP_SYMBOLS[type(node.op)]
        prec = _PREC[sym]
        return f"{self.sub(node.left, prec)} {sym} {self.sub(node.right, prec + 1)}", prec

    def emit_UnaryOp(self, node: ast.UnaryOp) -> tuple[str, int]:
        if isinstance(node.op, ast.Not):
            return self.logical_not(node.operand)
        sym = "-" if isinstance(node.op, ast.USub) else "+"
        # `- -x` must not become C++'s `--x`: nested unary operators get parentheses.
        return sym + self.sub(node.operand, _PREC["unary"] + 1), _PREC["unary"]

    def emit_Compare(self, node: ast.Compare) -> tuple[str, int]:
        sym = _OP_SYMBOLS[type(node.ops[0])]
        left, right = self.sub(node.left, 6), self.sub(node.comparators[0], 6)
        return f"{left} {sym} {right}", _PREC["cmp"]

    def emit_BoolOp(self, node: ast.BoolOp) -> tuple[str, int]:
        sym, prec = self.logic("and" if isinstance(node.op, ast.And) else "or", node)
        return f" {sym} ".join(self.sub(v, prec + 1) for v in node.values), prec

    def emit_IfExp(self, node: ast.IfExp) -> tuple[str, int]:
        return self.where(node.test, node.body, node.orelse)

    def emit_Call(self, node: ast.Call) -> tuple[str, int]:
        name = node.func.id
        if name == "where":
            return self.where(*node.args)
        if name == "pow":
            return self.power(*node.args)
        return self.call(name, node.args)

    def call(self, name: str, args: list[ast.AST]) -> tuple[str, int]:
        template, prec, arg_prec = self.funcs[name]
        return template.format(*(self.sub(a, arg_prec) for a in args)), prec


class _TorchEmitter(_Emitter):
    # Used when every argument is a Python number: the torch functions want tensors.
    funcs = {
        **{f: (f"math.{f}({{0}})", _ATOM, 0) for f in _UNARY_FUNCS},
        "abs": ("abs({0})", _ATOM, 0), "relu": ("max({0}, 0)", _ATOM, 0),
        "rsqrt": ("1 / math.sqrt({0})", 11, 0), "sigmoid": ("1 / (1 + math.exp(-{0}))", 11, 13),
        "minimum": ("min({0}, {1})", _ATOM, 0), "maximum": ("max({0}, {1})", _ATOM, 0),
        "pow": ("math.pow({0}, {1})", _ATOM, 0),
    }

    def emit_Constant(self, node: ast.Constant) -> tuple[str, int]:
        return repr(node.value), _ATOM

    def call(self, name: str, args: list[ast.AST]) -> tuple[str, int]:
        tensors = [self.tensor(a) for a in args]
        if not any(tensors):
            return super().call(name, args)
        if name in ("minimum", "maximum") and not all(tensors):
            # torch.minimum/maximum need two tensors: clamp the tensor by the number instead.
            tensor, number = args if tensors[0] else args[::-1]
            bound = "max" if name == "minimum" else "min"
            return f"torch.clamp({self.sub(tensor, 0)}, {bound}={self.sub(number, 0)})", _ATOM
        return f"torch.{name}({', '.join(self.sub(a, 0) for a in args)})", _ATOM

    def power(self, base: ast.AST, exp: ast.AST) -> tuple[str, int]:
        if self.tensor(base) or self.tensor(exp):
            return f"{self.sub(base, 14)} ** {self.sub(exp, 12)}", _PREC["**"]
        return super().call("pow", [base, exp])  # math.pow: no complex results for numbers

    def logic(self, op: str, node: ast.AST) -> tuple[str, int]:
        if self.tensor(node):  # bool tensors combine with the bitwise operators
            op = "&" if op == "and" else "|"
        return op, _PREC[op]

    def logical_not(self, operand: ast.AST) -> tuple[str, int]:
        if self.tensor(operand):
            return "~" + self.sub(operand, _PREC["unary"] + 1), _PREC["unary"]
        return "not " + self.sub(operand, _PREC["not"]), _PREC["not"]

    def where(self, cond: ast.AST, x: ast.AST, y: ast.AST) -> tuple[str, int]:
        if self.tensor(cond):  # torch.where accepts Python numbers for x and y
            return f"torch.where({self.sub(cond, 0)}, {self.sub(x, 0)}, {self.sub(y, 0)})", _ATOM
        # A scalar condition picks one branch, which may be a plain number.
        return f"{self.sub(x, 2)} if {self.sub(cond, 2)} else {self.sub(y, 2)}", _PREC["if"]


class _TritonEmitter(_Emitter):
    # Only `tl` primitives: the CPU interpreter has no libdevice.
    funcs = {
        **{f: (f"tl.{f}({{0}})", _ATOM, 0) for f in _UNARY_FUNCS},
        "log1p": ("tl.log(1.0 + {0})", _ATOM, 11),
        "tan": ("tl.sin({0}) / tl.cos({0})", 11, 0),
        "tanh": ("2.0 * tl.sigmoid(2.0 * {0}) - 1.0", 10, 12),
        "relu": ("tl.maximum({0}, 0.0)", _ATOM, 0),
        "minimum": ("tl.minimum({0}, {1})", _ATOM, 0), "maximum": ("tl.maximum({0}, {1})", _ATOM, 0),
    }

    def emit_Constant(self, node: ast.Constant) -> tuple[str, int]:
        # Numbers as floats: tl.exp(1) would reject an integer constant.
        value = node.value
        return (repr(value) if isinstance(value, bool) else repr(float(value))), _ATOM

    def power(self, base: ast.AST, exp: ast.AST) -> tuple[str, int]:
        n = _small_int(exp)
        if n is None:
            # Only valid for base > 0 (exp2/log2 has no sign): tl has no general pow.
            return f"tl.exp2({self.sub(exp, 11)} * tl.log2({self.sub(base, 0)}))", _ATOM
        if n == 0:
            return ("tl.zeros_like({}) + 1.0".format(self.sub(base, 0)), 10) if self.tensor(
                base) else ("1.0", _ATOM)
        product = " * ".join([self.sub(base, 12)] * abs(n))
        if n > 0:
            return product, (11 if n > 1 else self.emit(base)[1])
        return f"1.0 / {product if n == -1 else f'({product})'}", 11

    def logic(self, op: str, node: ast.AST) -> tuple[str, int]:
        op = "&" if op == "and" else "|"
        return op, _PREC[op]

    def logical_not(self, operand: ast.AST) -> tuple[str, int]:
        return self.sub(operand, _PREC["cmp"] + 1) + " == 0", _PREC["cmp"]

    def where(self, cond: ast.AST, x: ast.AST, y: ast.AST) -> tuple[str, int]:
        return f"tl.where({self.sub(cond, 0)}, {self.sub(x, 0)}, {self.sub(y, 0)})", _ATOM


def _small_int(node: ast.AST) -> int | None:
    """The value of an integer literal in -8..8 (maybe negated), else None."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -1 if isinstance(node.op, ast.USub) else 1
        node = node.operand
    if isinstance(node, ast.Constant) and type(node.value) is int and node.value <= 8:
        return sign * node.value
    return None


class _CppEmitter(_Emitter):
    funcs = {
        **{f: (f"std::{f}({{0}})", _ATOM, 0) for f in _UNARY_FUNCS},
        "rsqrt": ("acc_t(1) / std::sqrt({0})", 11, 0),
        "sigmoid": ("acc_t(1) / (acc_t(1) + std::exp(-{0}))", 11, 13),
        "relu": ("std::max({0}, acc_t(0))", _ATOM, 0),
        "minimum": ("std::min({0}, {1})", _ATOM, 0), "maximum": ("std::max({0}, {1})", _ATOM, 0),
        "pow": ("std::pow({0}, {1})", _ATOM, 0),
    }

    def emit_Constant(self, node: ast.Constant) -> tuple[str, int]:
        value = node.value
        if isinstance(value, bool):
            return ("true" if value else "false"), _ATOM
        return f"acc_t({value!r})", _ATOM

    def power(self, base: ast.AST, exp: ast.AST) -> tuple[str, int]:
        return self.call("pow", [base, exp])

    def logic(self, op: str, node: ast.AST) -> tuple[str, int]:
        # `a && b || c` trips -Wparentheses: give && inside || its own parentheses.
        return ("&&", _PREC["and"]) if op == "and" else ("||", _PREC["and"])

    def logical_not(self, operand: ast.AST) -> tuple[str, int]:
        return "!" + self.sub(operand, _PREC["unary"] + 1), _PREC["unary"]

    def where(self, cond: ast.AST, x: ast.AST, y: ast.AST) -> tuple[str, int]:
        return f"({self.sub(cond, 0)} ? {self.sub(x, 0)} : {self.sub(y, 0)})", _ATOM


@dataclass(frozen=True)
class Pointwise:
    """A checked pointwise expression and its translations (computed once, at parse time)."""

    text: str
    names: tuple[str, ...]  # argument names used, in first-use order
    _torch: str = field(repr=False, compare=False)
    _triton: str = field(repr=False, compare=False)
    _cpp: str = field(repr=False, compare=False)

    def to_torch(self) -> str:
        """PyTorch over the argument names, with `torch` and `math` in scope."""
        return self._torch

    def to_triton(self) -> str:
        """Triton over the loaded blocks / scalar params, with `tl` in scope."""
        return self._triton

    def to_cpp(self) -> str:
        """C++ over locals of type `acc_t`, with <cmath> and <algorithm> included."""
        return self._cpp


def parse_pointwise(text: str, args: Mapping[str, str]) -> Pointwise:
    """Check `text` against the pointwise language; `args` maps argument name -> kind."""
    for name, kind in args.items():
        if kind not in ARG_KINDS:
            raise ValueError(f"argument {name!r} has kind {kind!r}; expected one of {ARG_KINDS}")
    body = _parse(text)
    checker = _PointwiseChecker(text, args)
    kind = checker.check(body)
    if kind.boolean:
        raise _error(text, body, "the expression computes a boolean; use where(cond, x, y) "
                                 "to turn it into a number")
    if not kind.tensor:
        tensors = ", ".join(n for n, k in args.items() if k == "tensor") or "none"
        raise _error(text, body, f"the expression must use a tensor argument ({tensors})")
    names = tuple(dict.fromkeys(name for _, _, name in sorted(checker.uses)))
    codes = [cls(text, checker.kinds).emit(body)[0]
             for cls in (_TorchEmitter, _TritonEmitter, _CppEmitter)]
    return Pointwise(text, names, *codes)
