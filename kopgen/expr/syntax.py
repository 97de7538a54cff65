"""Parsing and the checks every expression language of a spec shares.

An expression is parsed with :mod:`ast` (bounded in length and depth) and walked by a `Checker`,
which allows a node type only where the language defines a visit_<Type> for it; user text is
never evaluated. `check_constants` folds the constant arithmetic and reports what every call
would fail on. Error positions are 0-based (line, column) within the text, in characters.
"""

from __future__ import annotations

import ast
import difflib
import math
import operator
import warnings

MAX_CHARS = 2000
MAX_DEPTH = 50
# What a formula and an output shape may read of a Tensor without reading its values.
METADATA_ATTRIBUTES = ("shape", "dtype", "device")
METADATA_METHODS = ("size", "dim", "numel")


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


def error_at(text: str, lineno: int, byte_col: int, message: str) -> ExprError:
    """An error at an ast position (1-based line, UTF-8 byte column)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # Python's line ends
    line = lines[lineno - 1] if lineno <= len(lines) else ""
    # ast columns are UTF-8 byte offsets; report characters.
    return ExprError(message, lineno - 1, len(line.encode()[:byte_col].decode(errors="ignore")))


def node_error(text: str, node: ast.AST, message: str) -> ExprError:
    return error_at(text, node.lineno, node.col_offset, message)


def python_tree(text: str) -> ast.Expression:
    """`ast.parse(text, mode="eval")`, what Python only warns of (`2if x`, an invalid escape in a string) raised
    as the SyntaxError it warns of: printed on stderr, the warning would come before kopgen's own message."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", SyntaxWarning)
        warnings.simplefilter("error", DeprecationWarning)  # an invalid escape, before Python 3.12
        return ast.parse(text, mode="eval")


def parse(text: str) -> ast.expr:
    """The expression's tree, or an ExprError if it is too long, empty, not Python or nested too deeply."""
    if not isinstance(text, str):
        raise ExprError(f"expected the expression as a string, got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise ExprError(f"the expression is too long ({len(text)} characters, at most {MAX_CHARS})")
    if not text.strip():
        raise ExprError("the expression is empty")
    try:
        body = python_tree(text).body
    except SyntaxError as e:
        raise ExprError(e.msg, max((e.lineno or 1) - 1, 0), max((e.offset or 1) - 1, 0)) from None
    except (ValueError, RecursionError, MemoryError):
        raise ExprError("the expression cannot be parsed") from None
    # Iterative, so that a deep tree cannot hit Python's recursion limit before we say so.
    stack = [(body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise node_error(text, node, f"the expression is nested too deeply (at most {MAX_DEPTH} levels; a "
                                         "chain `a + b + c ...` nests one level a term)")
        stack.extend((c, depth + isinstance(c, ast.expr)) for c in ast.iter_child_nodes(node))
    return body


def unparse(node: ast.AST) -> str:
    """`node` as Python source, its slices spaced as ruff formats them (`x[: n // 2]`, `x[a.b : n]`), so that
    generated files holding a spec's expression are already formatted."""
    return _RuffSlices().visit(node)


def python_number(value: object) -> str:
    """A number as Python source, as ruff formats it: `1e30`, not repr's `1e+30`."""
    return repr(value).replace("e+", "e") if isinstance(value, float) else repr(value)


class _RuffSlices(ast._Unparser):  # ast.unparse's own printer, two methods changed
    def _write_constant(self, value: object) -> None:
        # ruff's spelling of an exponent: 1e30, where repr writes 1e+30 (inf keeps ast's 1e309)
        if isinstance(value, float) and math.isfinite(value):
            self.write(python_number(value))
        else:
            super()._write_constant(value)

    def visit_Slice(self, node: ast.Slice) -> None:
        parts = [node.lower, node.upper] + ([node.step] if node.step is not None else [])
        texts = [unparse(part) if part is not None else "" for part in parts]
        if all(part is None or _simple_bound(part) for part in parts):
            self.write(":".join(texts))
            return
        # A bound that is more than a name or a number: the colons spaced as binary operators,
        # without a space toward an omitted bound.
        text = texts[0]
        for part in texts[1:]:
            text += " :" if text and not text.endswith(":") else ":"
            text += f" {part}" if part else ""
        self.write(text)


def _simple_bound(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Name) or (isinstance(node, ast.Constant) and type(node.value) in (int, float))


def did_you_mean(name: str, candidates) -> str:
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
OP_SYMBOLS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.Mod: "%",
    ast.FloorDiv: "//", ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&",
    ast.BitOr: "|", ast.BitXor: "^", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in",
    ast.NotIn: "not in", ast.USub: "'-'", ast.UAdd: "'+'",
}


class Checker:
    """Dispatch on node type to visit_<Type>; any other node is an error."""

    language = ""

    def __init__(self, text: str):
        self.text = text
        self.errors: list[ExprError] = []  # every problem found; check() goes on after one

    def error(self, node: ast.AST, message: str) -> ExprError:
        return node_error(self.text, node, message)

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


def check_constants(text: str, body: ast.AST) -> list[ExprError]:
    """Constants every call would fail on: literals beyond int64 or float64, division or modulo
    by a constant zero, 0 ** negative, constant arithmetic that overflows. Folds the constant
    subexpressions (in floats: bounded, never a huge integer power)."""
    errors = []

    def value(node: ast.AST) -> float | None:
        """The node's value if it is constant arithmetic, else None; checks the children either way."""
        if isinstance(node, ast.Constant) and type(node.value) in (bool, int, float):
            if type(node.value) is int and not _INT64[0] <= node.value <= _INT64[1]:
                errors.append(node_error(text, node, "this integer does not fit in 64 bits; write it as a float "
                                                     f"({float(node.value):.3g})"))
            elif isinstance(node.value, float) and not math.isfinite(node.value):
                errors.append(node_error(text, node, TOO_LARGE))
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
            errors.append(node_error(text, node.right, f"{what} by zero: this is always 0"))
        elif left == 0 and right is not None and right < 0 and isinstance(node.op, ast.Pow):
            errors.append(node_error(text, node, "0 to a negative power divides by zero"))
        elif left is not None and right is not None:
            try:
                result = _ARITHMETIC[type(node.op)](left, right)
            except (OverflowError, ZeroDivisionError):
                result = math.inf
            if isinstance(result, complex):  # a negative number to a fractional power: nan, not an error
                return None
            if not math.isfinite(result):
                errors.append(node_error(text, node, "this constant arithmetic overflows (beyond float64)"))
                return None
            return result
        return None

    value(body)
    return errors


