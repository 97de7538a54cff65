"""The two small expression languages of an op spec.

* Pointwise expressions (``compute``, ``reduce.expr``): arithmetic over the op's arguments,
  translated to PyTorch, Triton and C++ source text.
* Backward formulas (``derivatives``): a restricted PyTorch expression, checked and turned
  into executable Python.

Both are parsed with :mod:`ast` and checked against an allow-list; user text is never
evaluated here.  Error positions are 0-based (line, column) within the text, in characters.
"""

from __future__ import annotations

import ast
import difflib
import math
import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .names import optional_flags

MAX_CHARS = 2000
MAX_DEPTH = 50
# Triton's x ** 8 and tan(x) repeat their argument: this stops nested ones from exploding.
MAX_OUTPUT_CHARS = 100_000
ARG_KINDS = ("tensor", "optional", "float", "int", "bool")  # optional: a `Tensor?` argument


class ExprError(ValueError):
    """A problem in an expression; ``str(err)`` is the message alone.

    ``errors`` lists every independent problem found in the expression (this one first), so
    that the user sees them all at once.
    """

    def __init__(self, message: str, line: int = 0, column: int = 0):
        super().__init__(message)
        self.message, self.line, self.column = message, line, column
        self.errors: list[ExprError] = [self]

    @staticmethod
    def raise_any(errors: list[ExprError]) -> None:
        """Raise the first of `errors` (in text order), carrying all of them."""
        if errors:
            errors = sorted(errors, key=lambda e: (e.line, e.column))
            errors[0].errors = errors
            raise errors[0]


def _error_at(text: str, lineno: int, byte_col: int, message: str) -> ExprError:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # Python's line ends
    line = lines[lineno - 1] if lineno <= len(lines) else ""
    # ast columns are UTF-8 byte offsets; report characters.
    return ExprError(message, lineno - 1, len(line.encode()[:byte_col].decode(errors="ignore")))


def _error(text: str, node: ast.AST, message: str) -> ExprError:
    return _error_at(text, node.lineno, node.col_offset, message)


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
            raise _error(text, node, f"the expression is nested too deeply (at most {MAX_DEPTH} "
                                     "levels)")
        stack.extend((c, depth + isinstance(c, ast.expr)) for c in ast.iter_child_nodes(node))
    return body


def _did_you_mean(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


_FORBIDDEN = {
    ast.Attribute: "attributes", ast.Subscript: "subscripts", ast.Lambda: "lambdas",
    ast.ListComp: "comprehensions", ast.SetComp: "comprehensions", ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions", ast.NamedExpr: "':=' assignments",
    ast.Starred: "'*' arguments", ast.JoinedStr: "f-strings", ast.List: "lists",
    ast.Tuple: "tuples", ast.Dict: "dicts", ast.Set: "sets", ast.Slice: "slices",
    str: "strings", bytes: "bytes literals", complex: "complex numbers",
}
_OP_SYMBOLS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.Mod: "%",
    ast.FloorDiv: "//", ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&",
    ast.BitOr: "|", ast.BitXor: "^", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in",
    ast.NotIn: "not in", ast.USub: "'-'", ast.UAdd: "'+'",
}


class _Checker:
    """Dispatch on node type to visit_<Type>; any other node is an error."""

    language = ""

    def __init__(self, text: str):
        self.text = text
        self.errors: list[ExprError] = []  # every problem found; check() goes on after one

    def error(self, node: ast.AST, message: str) -> ExprError:
        return _error(self.text, node, message)

    def forbidden(self, node: ast.AST) -> ExprError:
        key = type(node.value) if isinstance(node, ast.Constant) else type(node)
        what = _FORBIDDEN.get(key) or (f"{node.value!r} values" if isinstance(node, ast.Constant)
                                       else f"{key.__name__} expressions")
        return self.error(node, f"{what} are not allowed in {self.language}")

    def check(self, node: ast.AST):
        """Visit `node`; a problem in it is recorded and the rest of the tree is still checked
        (the node then counts as `unknown`, so that its parents report nothing that follows from it)."""
        visit = getattr(self, "visit_" + type(node).__name__, None)
        try:
            if visit is None:
                raise self.forbidden(node)
            return visit(node)
        except ExprError as error:
            self.errors.append(error)
            return self.unknown

    unknown = None  # what a node with a problem counts as


TOO_LARGE = "this number is too large"
_INT64 = (-(2**63), 2**63 - 1)  # what torch, Triton and C++ take as an integer
# Arithmetic that constants are folded with: in floats, so that no power can take long.
_ARITHMETIC = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}


def _check_constants(text: str, body: ast.AST) -> list[ExprError]:
    """Constants every call would fail on: literals beyond int64 or float64, division or modulo
    by a constant zero, 0 ** negative, constant arithmetic that overflows. Folds the constant
    subexpressions (in floats: bounded, never a huge integer power)."""
    errors = []

    def value(node: ast.AST) -> float | None:
        """The node's value if it is constant arithmetic, else None; checks the children either way."""
        if isinstance(node, ast.Constant) and type(node.value) in (bool, int, float):
            if type(node.value) is int and not _INT64[0] <= node.value <= _INT64[1]:
                errors.append(_error(text, node, "this integer does not fit in 64 bits; write it as a float "
                                                 f"({float(node.value):.3g})"))
            elif isinstance(node.value, float) and not math.isfinite(node.value):
                errors.append(_error(text, node, TOO_LARGE))
            else:
                return float(node.value)
            return None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = value(node.operand)
            return None if operand is None else (-operand if isinstance(node.op, ast.USub) else operand)
        if not (isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC):
            for child in ast.iter_child_nodes(node):
                value(child)
            return None
        left, right = value(node.left), value(node.right)
        if right == 0 and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            what = "modulo" if isinstance(node.op, ast.Mod) else "division"
            errors.append(_error(text, node.right, f"{what} by zero: this is always 0"))
        elif left == 0 and right is not None and right < 0 and isinstance(node.op, ast.Pow):
            errors.append(_error(text, node, "0 to a negative power divides by zero"))
        elif left is not None and right is not None:
            try:
                result = _ARITHMETIC[type(node.op)](left, right)
            except (OverflowError, ZeroDivisionError):
                result = math.inf
            if isinstance(result, complex):  # a negative number to a fractional power: nan, not an error
                return None
            if not math.isfinite(result):
                errors.append(_error(text, node, "this constant arithmetic overflows (beyond float64)"))
                return None
            return result
        return None

    value(body)
    return errors


# ---------------------------------------------------------------------------------------------
# Pointwise expressions
# ---------------------------------------------------------------------------------------------

_UNARY_FUNCS = ("abs", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
                "sigmoid", "relu", "erf", "floor", "ceil")
_ARITY = {**{f: 1 for f in _UNARY_FUNCS}, "minimum": 2, "maximum": 2, "pow": 2, "where": 3,
          "present": 1}  # present(x): whether the optional Tensor x was given
# Argument names that would clash with the generated code (modules, builtins, C++ words).
_RESERVED = frozenset((
    "torch", "math", "tl", "triton", "std", "acc_t", "abs", "min", "max", "int", "float",
    "double", "bool", "char", "long", "short", "signed", "unsigned", "auto", "new", "delete",
    "this", "template", "typename", "class", "struct", "union", "namespace", "operator",
    "static", "const", "register", "default", "switch", "case", "goto", "do", "sizeof", "void"))


@dataclass(frozen=True)
class _Kind:
    tensor: bool  # depends on a tensor argument (else: a scalar)
    boolean: bool  # a truth value (else: a number)


_UNKNOWN = _Kind(tensor=True, boolean=False)  # a node with a problem (reported): fits anywhere


class _PointwiseChecker(_Checker):
    """Infer a _Kind for every node; reject anything outside the pointwise language."""

    language = "a pointwise expression"
    unknown = _UNKNOWN

    def __init__(self, text: str, args: Mapping[str, str]):
        super().__init__(text)
        self.args = args
        self.kinds: dict[ast.AST, _Kind] = {}
        self.uses: list[tuple[int, int, str]] = []  # (line, column, name) of argument uses
        self.tested: set[str] = set()  # optional Tensors the expression tests with present()
        self.known_present: frozenset[str] = frozenset()  # optionals the enclosing branches tested

    def check(self, node: ast.AST) -> _Kind:
        self.kinds[node] = kind = super().check(node)
        return kind

    def operands(self, nodes, what: str, boolean: bool = False, checked: bool = False) -> _Kind:
        """Check operands that must all be numbers (or all booleans); the kind of the result."""
        need = ("boolean operands (comparisons or bool arguments)" if boolean
                else "numbers, not booleans (use where(cond, x, y))")
        for node in nodes:
            kind = self.kinds[node] if checked else self.check(node)
            if kind is not _UNKNOWN and kind.boolean != boolean:
                raise self.error(node, f"{what} needs {need}")
        return _Kind(any(self.kinds[n].tensor for n in nodes), boolean)

    def visit_Name(self, node: ast.Name) -> _Kind:
        kind = self.args.get(node.id)
        if kind is None:
            if node.id in _ARITY:
                raise self.error(node, f"{node.id!r} is a function; call it, like {node.id}(x)")
            hint = _did_you_mean(node.id, [*self.args, *_ARITY])
            raise self.error(node, f"unknown name {node.id!r}" + (
                hint or f"; the arguments are {', '.join(self.args) or '(none)'}"))
        if node.id in _RESERVED:
            raise self.error(node, f"the argument name {node.id!r} clashes with generated code;"
                                   " rename the argument")
        if kind == "optional" and node.id not in self.known_present:
            raise self.error(node, f"{node.id!r} is an optional Tensor (Tensor?), which may be None: "
                                   f"read it inside a branch that tests it, like "
                                   f"({node.id} if present({node.id}) else 0)")
        self.uses.append((node.lineno, node.col_offset, node.id))
        return _Kind(tensor=kind in ("tensor", "optional"), boolean=kind == "bool")

    def visit_Constant(self, node: ast.Constant) -> _Kind:
        if type(node.value) not in (bool, int, float):
            raise self.forbidden(node)
        if type(node.value) is float and abs(node.value) > 1e300:  # also inf (1e999); ints: _check_constants
            raise self.error(node, TOO_LARGE)
        return _Kind(False, isinstance(node.value, bool))

    def visit_BinOp(self, node: ast.BinOp) -> _Kind:
        sym = _OP_SYMBOLS[type(node.op)]
        if sym not in ("+", "-", "*", "/", "**"):
            raise self.error(node, f"operator {sym!r} is not allowed; use + - * / ** or "
                                   "and/or/not")
        return self.operands([node.left, node.right], repr(sym))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> _Kind:
        if isinstance(node.op, ast.Not):
            return self.operands([node.operand], "'not'", boolean=True)
        if isinstance(node.op, ast.Invert):
            raise self.error(node, "operator '~' is not allowed; use 'not'")
        return self.operands([node.operand], "unary " + _OP_SYMBOLS[type(node.op)])

    def visit_Compare(self, node: ast.Compare) -> _Kind:
        if len(node.ops) > 1:
            raise self.error(node, "chained comparisons are not allowed; write "
                                   "'a < b and b < c'")
        sym = _OP_SYMBOLS[type(node.ops[0])]
        if sym not in ("<", "<=", ">", ">=", "==", "!="):
            raise self.error(node, f"{sym!r} is not allowed; compare with < <= > >= == !=")
        return _Kind(self.operands([node.left, *node.comparators], repr(sym)).tensor, True)

    def visit_BoolOp(self, node: ast.BoolOp) -> _Kind:
        what = "'and'" if isinstance(node.op, ast.And) else "'or'"
        return self.operands(node.values, what, boolean=True)

    def where(self, cond: ast.AST, x: ast.AST, y: ast.AST, what: str) -> _Kind:
        errors_before = len(self.errors)
        condition = self.check(cond)
        if condition is not _UNKNOWN and not condition.boolean:  # the branches are checked all the same
            self.errors.append(self.error(cond, f"the condition of {what} must be a boolean (a comparison "
                                                "or a bool argument)"))
        # A branch may read the optional Tensors its condition proves present (any of them when
        # the condition has a problem: reading them then is not a problem of its own).
        outer = self.known_present
        guesses = frozenset(n for n, k in self.args.items() if k == "optional")
        if len(self.errors) > errors_before:
            branches = ((x, guesses), (y, guesses))
        else:
            branches = ((x, _present_if(cond, True)), (y, _present_if(cond, False)))
        for branch, known in branches:
            self.known_present = outer | known
            try:
                self.check(branch)
            finally:
                self.known_present = outer
        values = self.operands([x, y], what, checked=True)
        return _Kind(values.tensor or self.kinds[cond].tensor, False)

    def visit_IfExp(self, node: ast.IfExp) -> _Kind:
        return self.where(node.test, node.body, node.orelse, "'if'")

    def present(self, node: ast.Call) -> _Kind:
        arg = node.args[0] if len(node.args) == 1 else None
        if not isinstance(arg, ast.Name) or self.args.get(arg.id) != "optional":
            optionals = [n for n, k in self.args.items() if k == "optional"]
            raise self.error(node, "present() takes one optional Tensor argument (Tensor?)" + (
                f": {', '.join(optionals)}" if optionals else "; this op has none"))
        self.tested.add(arg.id)
        self.kinds[arg] = _Kind(tensor=True, boolean=False)
        return _Kind(tensor=False, boolean=True)  # one truth value for the whole call

    def visit_Call(self, node: ast.Call) -> _Kind:
        if node.keywords:
            raise self.error(node.keywords[0], "keyword arguments are not allowed")
        if not isinstance(node.func, ast.Name):
            raise self.error(node.func, "only the built-in functions can be called, like exp(x)")
        name, n = node.func.id, _ARITY.get(node.func.id)
        if name in self.args:
            raise self.error(node.func, f"{name!r} is an argument, not a function")
        if n is None:
            raise self.error(node.func, f"unknown function {name!r}{_did_you_mean(name, _ARITY)};"
                                        f" allowed: {', '.join(_ARITY)}")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.forbidden(arg)
        if len(node.args) != n:
            raise self.error(node, f"{name}() takes {n} argument{'s' * (n > 1)}, "
                                   f"got {len(node.args)}")
        if name == "where":
            return self.where(*node.args, "where()")
        if name == "present":
            return self.present(node)
        return self.operands(node.args, f"{name}()")


def _present_if(cond: ast.AST, truth: bool) -> frozenset[str]:
    """The optional Tensors that are certainly given when `cond` has the value `truth`."""
    if isinstance(cond, ast.Call) and isinstance(cond.func, ast.Name) and cond.func.id == "present":
        return frozenset([cond.args[0].id]) if truth else frozenset()
    if isinstance(cond, ast.UnaryOp) and isinstance(cond.op, ast.Not):
        return _present_if(cond.operand, not truth)
    if isinstance(cond, ast.BoolOp) and isinstance(cond.op, ast.And if truth else ast.Or):
        return frozenset().union(*(_present_if(v, truth) for v in cond.values))
    return frozenset()


_ATOM = 100
# Python precedences (higher binds tighter).  The C++ operators kopgen emits keep the same
# order among themselves, so one numbering serves all three languages.
_PREC = {"or": 2, "and": 3, "cmp": 5, "+": 10, "-": 10, "*": 11, "/": 11, "unary": 12}

# Translation tables: name -> (template, precedence of the result, precedence every operand
# needs).  For 'and'/'or' the template is the separator that joins the operands.
_PY = {  # torch.* wants tensors: a call whose operands are all Python numbers uses these
    **{f: (f"math.{f}({{}})", _ATOM, 0) for f in _UNARY_FUNCS},
    "abs": ("abs({})", _ATOM, 0), "relu": ("max({}, 0)", _ATOM, 0),
    "rsqrt": ("1 / math.sqrt({})", 11, 0), "sigmoid": ("1 / (1 + math.exp(-{}))", 11, 13),
    "minimum": ("min({}, {})", _ATOM, 0), "maximum": ("max({}, {})", _ATOM, 0),
    "pow": ("math.pow({}, {})", _ATOM, 0), "**": ("math.pow({}, {})", _ATOM, 0),
    "and": (" and ", 3, 4), "or": (" or ", 2, 4), "not": ("not {}", 4, 4),
    "where": ("{1} if {0} else {2}", 1, 2),  # a scalar condition picks one whole branch
    "present": ("{} is not None", 5, _ATOM),
}
_TORCH = {
    **{f: (f"torch.{f}({{}})", _ATOM, 0) for f in _UNARY_FUNCS},
    **{f: (f"torch.{f}({{}}, {{}})", _ATOM, 0) for f in ("minimum", "maximum", "pow")},
    # torch.minimum/maximum need two tensors: clamp the tensor by the number instead.
    "clamp_max": ("torch.clamp({}, max={})", _ATOM, 0),
    "clamp_min": ("torch.clamp({}, min={})", _ATOM, 0),
    "**": ("{} ** {}", 13, 14),
    "and": (" & ", 8, 9), "or": (" | ", 6, 9), "not": ("~{}", 12, 13),  # bool tensors
    "where": ("torch.where({}, {}, {})", _ATOM, 0),  # x and y may be Python numbers
}
_TRITON = {  # only `tl` primitives: the Triton CPU interpreter has no libdevice
    **{f: (f"tl.{f}({{}})", _ATOM, 0) for f in _UNARY_FUNCS},
    "log1p": ("tl.log(1.0 + {})", _ATOM, 11),
    "tan": ("tl.sin({0}) / tl.cos({0})", 11, 0),
    # tl.sigmoid is a @triton.jit helper, which Triton's interpreter cannot call in-process.
    "sigmoid": ("1.0 / (1.0 + tl.exp(-{}))", 11, 13),
    "tanh": ("2.0 / (1.0 + tl.exp(-2.0 * {})) - 1.0", 10, 12),
    "relu": ("tl.maximum({}, 0.0)", _ATOM, 0),
    "minimum": ("tl.minimum({}, {})", _ATOM, 0), "maximum": ("tl.maximum({}, {})", _ATOM, 0),
    "and": (" & ", 8, 9), "or": (" | ", 6, 9), "not": ("{} == 0", 5, 6),
    "where": ("tl.where({}, {}, {})", _ATOM, 0),
    "present": ("HAS_{}", _ATOM, _ATOM),  # a constexpr: Triton compiles a kernel per case
}
_CPP = {
    **{f: (f"std::{f}({{}})", _ATOM, 0) for f in _UNARY_FUNCS},
    "rsqrt": ("acc_t(1) / std::sqrt({})", 11, 0),
    "sigmoid": ("acc_t(1) / (acc_t(1) + std::exp(-{}))", 11, 13),
    "relu": ("std::max({}, acc_t(0))", _ATOM, 0),
    "minimum": ("std::min({}, {})", _ATOM, 0), "maximum": ("std::max({}, {})", _ATOM, 0),
    "pow": ("std::pow({}, {})", _ATOM, 0), "**": ("std::pow({}, {})", _ATOM, 0),
    # Operands of || and && bind tighter than &&: C++'s -Wparentheses wants `(a && b) || c`.
    "and": (" && ", 3, 4), "or": (" || ", 2, 4), "not": ("!{}", 12, 13),
    "where": ("({} ? {} : {})", _ATOM, 0),
    "present": ("has_{}", _ATOM, _ATOM),
}


# The modules a translation table's entry calls into: `math.exp({})` needs `import math`.
_MODULE_CALL = re.compile(r"\b(torch|math)\.")


class _Emitter:
    """Turn a checked tree into C++ (subclasses: torch, Triton).

    Each emit returns (code, precedence of its top operator), so that operands get
    parentheses only where the precedence needs them.
    """

    funcs = _CPP

    def __init__(self, text: str, kinds: dict[ast.AST, _Kind], flags: Mapping[str, str]):
        self.text, self.kinds = text, kinds
        self.imports: set[str] = set()  # the modules the translation calls into (torch, math)
        self.flags = flags  # the kernels' flags of the optional Tensors (names.optional_flags)

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

    def table(self, node: ast.AST) -> dict:
        """The translation table for `node` (torch picks one by the node's kind)."""
        return self.funcs

    def apply(self, name: str, args: list[ast.AST], node: ast.AST) -> tuple[str, int]:
        template, prec, arg_prec = self.table(node)[name]
        self.imports.update(_MODULE_CALL.findall(template))
        code = template.format(*(self.sub(a, arg_prec) for a in args))
        if name == "present":  # the kernels' flag, renamed where an argument has its name
            code = self.flags.get(code, code)
        return code, prec

    def emit_Name(self, node: ast.Name) -> tuple[str, int]:
        return node.id, _ATOM

    def emit_BinOp(self, node: ast.BinOp) -> tuple[str, int]:
        if isinstance(node.op, ast.Pow):
            return self.power(node.left, node.right, node, "**")
        sym = _OP_SYMBOLS[type(node.op)]
        prec = _PREC[sym]  # left-associative: only the right operand needs to bind tighter
        return f"{self.sub(node.left, prec)} {sym} {self.sub(node.right, prec + 1)}", prec

    def power(self, base: ast.AST, exp: ast.AST, node: ast.AST, name: str) -> tuple[str, int]:
        return self.apply(name, [base, exp], node)

    def emit_UnaryOp(self, node: ast.UnaryOp) -> tuple[str, int]:
        if isinstance(node.op, ast.Not):
            return self.apply("not", [node.operand], node)
        if isinstance(node.op, ast.UAdd):  # a no-op, and Triton tensors have no unary +
            return self.emit(node.operand)
        # Nested unary operators get parentheses: `- -x` must not become C++'s `--x`.
        return "-" + self.sub(node.operand, _PREC["unary"] + 1), _PREC["unary"]

    def emit_Compare(self, node: ast.Compare) -> tuple[str, int]:
        left, right = (self.sub(n, _PREC["cmp"] + 1) for n in (node.left, node.comparators[0]))
        return f"{left} {_OP_SYMBOLS[type(node.ops[0])]} {right}", _PREC["cmp"]

    def emit_BoolOp(self, node: ast.BoolOp) -> tuple[str, int]:
        sep, prec, arg_prec = self.table(node)["and" if isinstance(node.op, ast.And) else "or"]
        return sep.join(self.sub(v, arg_prec) for v in node.values), prec

    def emit_IfExp(self, node: ast.IfExp) -> tuple[str, int]:
        return self.apply("where", [node.test, node.body, node.orelse], node.test)

    def emit_Call(self, node: ast.Call) -> tuple[str, int]:
        name, args = node.func.id, node.args
        if name == "pow":
            return self.power(*args, node, "pow")
        return self.apply(name, args, args[0] if name == "where" else node)

    def emit_Constant(self, node: ast.Constant) -> tuple[str, int]:
        value = node.value
        return (str(value).lower() if isinstance(value, bool) else f"acc_t({value!r})"), _ATOM


class _TorchEmitter(_Emitter):
    def table(self, node: ast.AST) -> dict:
        return _TORCH if self.kinds[node].tensor else _PY

    def apply(self, name: str, args: list[ast.AST], node: ast.AST) -> tuple[str, int]:
        tensors = [self.kinds[a].tensor for a in args]
        if name in ("minimum", "maximum") and any(tensors) and not all(tensors):
            bound = "clamp_max" if name == "minimum" else "clamp_min"
            return super().apply(bound, args if tensors[0] else args[::-1], node)
        return super().apply(name, args, node)

    def emit_Constant(self, node: ast.Constant) -> tuple[str, int]:
        return repr(node.value), _ATOM


class _TritonEmitter(_Emitter):
    funcs = _TRITON

    def emit_Name(self, node: ast.Name) -> tuple[str, int]:
        # bool arguments reach the kernel as ints (Triton 3.6's interpreter takes no bools): compare,
        # so that tl.where gets a boolean condition.
        if self.kinds[node].boolean:
            return f"{node.id} != 0", _PREC["cmp"]
        return node.id, _ATOM

    def emit_UnaryOp(self, node: ast.UnaryOp) -> tuple[str, int]:
        if isinstance(node.op, ast.Not) and isinstance(node.operand, ast.Name):
            return f"{node.operand.id} == 0", _PREC["cmp"]  # a bool argument, passed as an int
        return super().emit_UnaryOp(node)

    def emit_Constant(self, node: ast.Constant) -> tuple[str, int]:
        # Numbers as floats: tl.exp(1) would reject an integer constant.
        value = node.value
        return repr(value if isinstance(value, bool) else float(value)), _ATOM

    def power(self, base: ast.AST, exp: ast.AST, node: ast.AST, name: str) -> tuple[str, int]:
        n = _small_int(exp)
        if n is None:
            # Valid for base > 0 only (tl has no pow; exp2/log2 loses the sign).
            return f"tl.exp2({self.sub(exp, 11)} * tl.log2({self.sub(base, 0)}))", _ATOM
        if n == 0:  # keep the block shape of a tensor base
            tensor = self.kinds[base].tensor
            # tl.full, not tl.zeros_like: the interpreter cannot call Triton's @triton.jit helpers.
            block = self.sub(base, _ATOM)
            return (f"tl.full({block}.shape, 1.0, {block}.dtype)", _ATOM) if tensor else ("1.0", _ATOM)
        if n == 1:
            return self.emit(base)
        product = " * ".join([self.sub(base, _PREC["unary"])] * abs(n))
        if n > 0:
            return product, 11
        return f"1.0 / {product if n == -1 else f'({product})'}", 11


def _small_int(node: ast.AST) -> int | None:
    """The value of an integer literal in -8..8 (maybe negated), else None."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign, node = (-1 if isinstance(node.op, ast.USub) else 1), node.operand
    if isinstance(node, ast.Constant) and type(node.value) is int and node.value <= 8:
        return sign * node.value
    return None


@dataclass(frozen=True)
class Pointwise:
    """A checked pointwise expression; its translations are made once, at parse time."""

    text: str
    names: tuple[str, ...]  # argument names used, in first-use order
    tested: tuple[str, ...]  # optional Tensors the expression tests with present(), sorted
    _torch: str = field(repr=False, compare=False)
    _triton: str = field(repr=False, compare=False)
    _cpp: str = field(repr=False, compare=False)
    imports: frozenset[str] = field(default=frozenset(), compare=False)  # modules to_torch() uses: torch, math

    def to_torch(self) -> str:
        """PyTorch over the argument names, with `torch` and `math` in scope."""
        return self._torch

    def to_triton(self) -> str:
        """Triton over the loaded blocks and scalar params, with `tl` in scope."""
        return self._triton

    def to_cpp(self) -> str:
        """C++ over locals of type `acc_t`; needs <cmath> and <algorithm>."""
        return self._cpp


def parse_pointwise(text: str, args: Mapping[str, str]) -> Pointwise:
    """Check `text` against the pointwise language; `args` maps argument name -> kind."""
    for name, kind in args.items():
        if kind not in ARG_KINDS:
            raise ValueError(f"argument {name!r} has kind {kind!r}; expected one of {ARG_KINDS}")
    body = _parse(text)
    checker = _PointwiseChecker(text, args)
    kind = checker.check(body)
    ExprError.raise_any(checker.errors + _check_constants(text, body))
    if kind.boolean:
        raise _error(text, body, "the expression computes a boolean; use where(cond, x, y) "
                                 "to turn it into a number")
    if not kind.tensor:
        tensors = ", ".join(n for n, k in args.items() if k == "tensor") or "none"
        raise _error(text, body, f"the expression must use a tensor argument ({tensors})")
    names = tuple(dict.fromkeys(name for _, _, name in sorted(checker.uses)))
    flags = optional_flags(args, [name for name, kind in args.items() if kind == "optional"])
    emitters = [emitter(text, checker.kinds, flags) for emitter in (_TorchEmitter, _TritonEmitter, _Emitter)]
    codes = [emitter.emit(body)[0] for emitter in emitters]
    return Pointwise(text, names, tuple(sorted(checker.tested)), *codes, imports=frozenset(emitters[0].imports))


# ---------------------------------------------------------------------------------------------
# Backward formulas
# ---------------------------------------------------------------------------------------------

_METADATA_ATTRS = frozenset({"shape", "dtype", "device"})
_METADATA_METHODS = frozenset({"size", "dim", "numel"})


@dataclass(frozen=True)
class FormulaContext:
    arg_kinds: Mapping[str, str]  # name -> 'tensor' | 'optional' | 'float' | 'int' | 'bool' | 'other'
    num_outputs: int
    namespace: str
    own_ops: frozenset[str]  # op names in the same namespace
    mutating_ops: frozenset[str] = frozenset()  # those of own_ops whose schema mutates an argument


@dataclass(frozen=True)
class Formula:
    text: str
    python: str  # executable Python; own-op calls go through torch.ops.<namespace>
    saved_tensors: tuple[str, ...]  # tensor args whose values are used, in argument order
    metadata_only: tuple[str, ...]  # tensor args used only via .shape/.dtype/.device/.size()...
    scalars: tuple[str, ...]  # non-tensor args used, in argument order
    results_used: tuple[int, ...]
    grads_used: tuple[int, ...]
    own_ops_called: tuple[str, ...]  # sorted
    imports: frozenset[str] = frozenset()  # modules `python` uses: torch (also for own-op calls)


# torch functions a formula may call: torch.<f> and the pure-math submodules, minus those with
# side effects.
_TORCH_MODULES = frozenset({"", "special", "linalg", "fft", "nn.functional"})
_UNSAFE_TORCH = re.compile(r"^(set_.*|manual_seed|seed|initial_seed|use_.*|load|save|from_file|compile|export"
                           r"|jit|hub|utils|ops|library|cuda|backends|distributed|autograd|.*_)$")
_UNSAFE_METHOD = re.compile(r"^(.*[^_]_|numpy|tolist|item|backward|register_hook|retain_grad|data_ptr|storage"
                            r"|untyped_storage|share_memory_|pin_memory|requires_grad_|detach_)$")
# A formula is a pure function of its inputs: nothing random (torch.<f>, nn.functional.<f> or a method).
_RANDOM = re.compile(r"^(rand.*|bernoulli.*|multinomial|normal|poisson|binomial|.*dropout.*|rrelu.*|gumbel_softmax"
                     r"|fractional_max_pool.*|.*random.*|uniform|exponential|geometric|cauchy|log_normal)$")
# Keywords that make a call write into a tensor it was given.
_MUTATING_KEYWORDS = frozenset({"out", "inplace"})


class _FormulaChecker(_Checker):
    """Walk a formula, reject what is not allowed and record what it uses."""

    language = "a derivative formula"

    def __init__(self, text: str, ctx: FormulaContext):
        super().__init__(text)
        self.ctx, self.one = ctx, ctx.num_outputs == 1
        self.values: set[str] = set()
        self.metadata: set[str] = set()
        self.scalars: set[str] = set()
        self.used = {"grads": set(), "results": set()}  # output indices
        self.ops: set[str] = set()

    def visit_children(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.expr, ast.keyword)):
                self.check(child)

    visit_BinOp = visit_UnaryOp = visit_BoolOp = visit_Compare = visit_IfExp = visit_children
    visit_Tuple = visit_List = visit_children

    def visit_Constant(self, node: ast.Constant) -> None:
        if node.value is not None and type(node.value) not in (bool, int, float):
            raise self.forbidden(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is None:
            raise self.error(node, "'**' arguments are not allowed")
        if node.arg in _MUTATING_KEYWORDS:
            raise self.error(node, f"'{node.arg}=' is not allowed in a derivative formula: a formula computes "
                                   "new tensors and writes none")
        self.check(node.value)

    def visit_Name(self, node: ast.Name) -> None:
        self.name(node, "value")

    def visit_Attribute(self, node: ast.Attribute, methods=frozenset()) -> None:
        if node.attr.startswith("_"):  # blocks __class__, __globals__, torch._C ...
            raise _error_at(self.text, node.end_lineno,
                            node.end_col_offset - len(node.attr.encode()),
                            f"attribute {node.attr!r} is not allowed (names starting with '_' "
                            "are private)")
        metadata = node.attr in _METADATA_ATTRS or node.attr in methods
        if isinstance(node.value, ast.Name):
            self.name(node.value, "metadata" if metadata else "base")
        else:
            self.check(node.value)

    def visit_Call(self, node: ast.Call) -> None:
        try:
            if isinstance(node.func, ast.Name):
                self.name(node.func, "call")
            elif isinstance(node.func, ast.Attribute):
                self.check_callee(node.func)
                self.visit_Attribute(node.func, methods=_METADATA_METHODS)
            else:
                raise self.error(node.func, "only torch functions, tensor methods and this "
                                            "namespace's ops can be called")
        except ExprError as error:  # the arguments may have problems of their own
            self.errors.append(error)
        for child in [*node.args, *node.keywords]:
            self.check(child)

    def check_callee(self, func: ast.Attribute) -> None:
        """A formula computes a gradient: no calls with side effects (seeds, global settings,
        in-place methods) and none into torch's machinery (ops, hub, jit, ...)."""
        path, base = [func.attr], func.value
        while isinstance(base, ast.Attribute):
            path.insert(0, base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id == "torch":
            module, name = path[:-1], path[-1]
            if ".".join(module) not in _TORCH_MODULES or _UNSAFE_TORCH.match(name):
                raise self.error(func, f"torch.{'.'.join(path)} is not allowed in a derivative formula; use "
                                       "torch functions that compute (torch.<f>, torch.special.<f>, ...)")
            if _RANDOM.match(name):
                raise self.error(func, f"torch.{'.'.join(path)} is random; a derivative formula must give the "
                                       "same gradient on every call")
        elif _UNSAFE_METHOD.match(func.attr):
            raise self.error(func, f"method {func.attr!r} is not allowed in a derivative formula "
                                   "(in-place, or leaves autograd)")
        elif _RANDOM.match(func.attr):
            raise self.error(func, f"method {func.attr!r} is random; a derivative formula must give the "
                                   "same gradient on every call")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        base, index = node.value, node.slice
        if not (isinstance(base, ast.Name) and base.id in self.used
                and base.id not in self.ctx.arg_kinds):
            raise self.error(node, "indexing is only allowed as grads[i] or results[i] "
                                   "(use x.size(d) for a dimension)")
        if not (isinstance(index, ast.Constant) and type(index.value) is int):
            raise self.error(index, f"{base.id}[...] needs an integer literal, like {base.id}[0]")
        n = self.ctx.num_outputs
        if not 0 <= index.value < n:
            raise self.error(index, f"{base.id}[{index.value}] is out of range: the op has "
                                    f"{n} output{'s' * (n != 1)}")
        self.used[base.id].add(index.value)

    def name(self, node: ast.Name, use: str) -> None:
        """Resolve a name; `use` is 'value', 'call', 'base' (of x.attr) or 'metadata'."""
        name, ctx = node.id, self.ctx
        kind = ctx.arg_kinds.get(name)
        if kind is not None:
            if use == "call":
                raise self.error(node, f"{name!r} is an argument, not a function")
            if kind not in ("tensor", "optional"):
                self.scalars.add(name)
            else:
                (self.metadata if use == "metadata" else self.values).add(name)
        elif name in ("grad", "result"):
            if not self.one:
                raise self.error(node, f"{name!r} is only available when the op has one "
                                       f"output; use {name}s[i]")
            if use == "call":
                raise self.error(node, f"{name!r} is not a function")
            self.used[name + "s"].add(0)
        elif name in self.used:
            raise self.error(node, f"{name!r} must be indexed with an integer literal, "
                                   f"like {name}[0]")
        elif name == "torch":
            if use not in ("base", "metadata"):
                raise self.error(node, "'torch' can only be used as torch.<name>")
        elif name in ctx.own_ops:
            if use != "call":
                raise self.error(node, f"{name!r} is an op; call it, like {name}(...)")
            if name in ctx.mutating_ops:
                raise self.error(node, f"{name!r} mutates its arguments; a derivative formula may call only "
                                       "ops that write nothing (functional ops)")
            self.ops.add(name)
        else:
            known = [*ctx.arg_kinds, *(["grad", "result"] if self.one else []),
                     "grads", "results", "torch", *sorted(ctx.own_ops)]
            raise self.error(node, f"unknown name {name!r}" + (_did_you_mean(name, known) or (
                "; use the op's arguments, grad(s), result(s), torch or this namespace's ops")))


def parse_formula(text: str, ctx: FormulaContext) -> Formula:
    """Check a backward formula and work out what the backward needs to save."""
    body = _parse(text)
    checker = _FormulaChecker(text, ctx)
    checker.check(body)
    ExprError.raise_any(checker.errors + _check_constants(text, body))
    for node in ast.walk(body):  # own ops: `mymul(...)` -> `torch.ops.<ns>.mymul.default(...)`
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in checker.ops:
            func: ast.expr = ast.Name("torch", ast.Load())
            for part in ("ops", ctx.namespace, node.func.id, "default"):
                func = ast.Attribute(func, part, ast.Load())
            node.func = func
    python = ast.unparse(body)
    order = list(ctx.arg_kinds)
    return Formula(
        text=text,
        python=python,
        saved_tensors=tuple(n for n in order if n in checker.values),
        metadata_only=tuple(n for n in order if n in checker.metadata - checker.values),
        scalars=tuple(n for n in order if n in checker.scalars),
        results_used=tuple(sorted(checker.used["results"])),
        grads_used=tuple(sorted(checker.used["grads"])),
        own_ops_called=tuple(sorted(checker.ops)),
        imports=frozenset(n.id for n in ast.walk(body) if isinstance(n, ast.Name) and n.id == "torch"),
    )


# ---------------------------------------------------------------------------------------------
# Output metadata of `kernel: custom` ops (`fake: {shape: EXPR, dtype: EXPR}`)
# ---------------------------------------------------------------------------------------------

_METADATA_ATTRIBUTES = ("shape", "dtype", "device")
_METADATA_METHODS = ("size", "dim", "numel")
_TORCH_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "bool")


class _MetadataChecker(_Checker):
    """Shapes and dtypes from the arguments' metadata: x.shape[:-1] + (2,), x.size(0), torch.float32."""

    language = "an output shape or dtype"

    def __init__(self, text: str, tensors: frozenset[str], ints: frozenset[str]):
        super().__init__(text)
        self.tensors, self.ints = tensors, ints

    def visit_Constant(self, node: ast.Constant) -> None:
        if type(node.value) is not int:
            raise self.forbidden(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.tensors:
            raise self.error(node, f"use {node.id}.shape or {node.id}.dtype: a shape or dtype reads metadata only")
        if node.id not in self.ints:
            raise self.error(node, f"unknown name {node.id!r}; use the op's Tensor and int arguments")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = node.value
        if isinstance(base, ast.Name) and base.id == "torch" and node.attr in _TORCH_DTYPES:
            return
        if isinstance(base, ast.Name) and base.id in self.tensors and node.attr in _METADATA_ATTRIBUTES:
            return
        raise self.error(node, f"only {', '.join(_METADATA_ATTRIBUTES)} of a Tensor argument, or torch.<dtype>, "
                               "are allowed here")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if not (isinstance(node.value, ast.Attribute) and node.value.attr == "shape"):
            raise self.error(node, "only a shape can be indexed, like x.shape[:-1]")
        self.check(node.value)
        index = node.slice
        for part in ((index.lower, index.upper, index.step) if isinstance(index, ast.Slice) else (index,)):
            if part is not None:
                self.check(part)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if not isinstance(node.op, ast.USub):
            raise self.forbidden(node)
        self.check(node.operand)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            raise self.error(node, "only + - * // are allowed in a shape")
        self.check(node.left)
        self.check(node.right)

    def visit_Tuple(self, node: ast.Tuple) -> None:
        for element in node.elts:
            self.check(element)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in _METADATA_METHODS
                and isinstance(func.value, ast.Name) and func.value.id in self.tensors) or node.keywords:
            raise self.error(node, f"the only calls allowed are x.{'(), x.'.join(_METADATA_METHODS)}() of a "
                                   "Tensor argument")
        for arg in node.args:
            self.check(arg)


def parse_metadata(text: str, tensors: Iterable[str], ints: Iterable[str]) -> str:
    """Check an output shape or dtype expression of a custom op; returns it as Python source."""
    body = _parse(text)
    checker = _MetadataChecker(text, frozenset(tensors), frozenset(ints))
    checker.check(body)
    ExprError.raise_any(checker.errors)
    return ast.unparse(body)
