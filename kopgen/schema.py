"""Parse PyTorch function-schema text into a frozen, lossless model.

Text format: ``[namespace::]name[.overload](args) -> returns``, e.g.
``aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)``.

``str()`` of every model class prints canonical text, which is exactly what
``str(torch._C.FunctionSchema)`` prints, so ``str(parse_schema(t)) == t`` for any
schema text torch prints and kopgen supports.  Defaults are kept as source text
(only whitespace inside list literals is normalised) so printing is lossless.
The one spelling torch prints differently is the `Tensor!` shorthand: torch prints
``Tensor($0! -> )``, which it cannot read back; kopgen keeps ``Tensor!`` as written.

This module must never import torch: code generation runs without it.

Type predicates are properties on each type class:
``is_tensor`` (``Tensor`` or ``Tensor?``) and ``is_tensor_like`` (any type with a
Tensor inside, including ``Tensor[]`` and ``Tensor[]?``).
"""

from __future__ import annotations

import ast
import math
import re
import sys
from dataclasses import dataclass, field


class SchemaError(ValueError):
    """A schema text that kopgen cannot parse.

    ``column`` is the 0-based offset into the text of the offending token;
    ``unsupported`` is True when the text is valid torch but uses something
    kopgen does not support (as opposed to a syntax or validity error).
    """

    def __init__(self, message: str, column: int, unsupported: bool = False):
        super().__init__(f"{message} (column {column})")
        self.message = message
        self.column = column
        self.unsupported = unsupported


# --------------------------------------------------------------------- model


@dataclass(frozen=True)
class BaseType:
    name: str  # one of BASE_TYPES

    def __str__(self) -> str:
        return self.name

    @property
    def is_tensor(self) -> bool:
        return self.name == "Tensor"

    @property
    def is_tensor_like(self) -> bool:
        return self.name == "Tensor"


@dataclass(frozen=True)
class OptionalType:
    elem: Type

    def __str__(self) -> str:
        return f"{self.elem}?"

    @property
    def is_tensor(self) -> bool:
        return self.elem.is_tensor

    @property
    def is_tensor_like(self) -> bool:
        return self.elem.is_tensor_like


@dataclass(frozen=True)
class ListType:
    elem: Type
    size: int | None  # int[2] has size 2; torch then also accepts a bare scalar

    def __str__(self) -> str:
        return f"{self.elem}[{'' if self.size is None else self.size}]"

    @property
    def is_tensor(self) -> bool:
        return False

    @property
    def is_tensor_like(self) -> bool:
        return self.elem.is_tensor_like


Type = BaseType | OptionalType | ListType


@dataclass(frozen=True)
class Annotation:
    alias_set: str | None  # a lowercase name (a, a0); None for the shorthand `Tensor!`, a fresh set
    is_write: bool

    def __str__(self) -> str:
        if self.alias_set is None:
            return "!"  # the user's spelling: torch would print Tensor($0! -> )
        return f"({self.alias_set}{'!' if self.is_write else ''})"


def _type_text(type: Type, annotation: Annotation | None) -> str:
    # The parser only allows an annotation right after `Tensor`: Tensor(a!), Tensor(a!)?, Tensor![].
    if annotation is None:
        return str(type)
    return f"Tensor{annotation}{str(type).removeprefix('Tensor')}"


@dataclass(frozen=True)
class Argument:
    name: str
    type: Type
    default: str | None  # source text of the default, e.g. "1e-05", "[1, 2]", "None"
    annotation: Annotation | None
    kwarg_only: bool
    # 0-based offsets into the schema text of the name and of the default, for messages.
    column: int = field(default=0, compare=False, repr=False)
    default_column: int = field(default=0, compare=False, repr=False)

    def __str__(self) -> str:
        default = "" if self.default is None else f"={self.default}"
        return f"{_type_text(self.type, self.annotation)} {self.name}{default}"

    @property
    def is_mutated(self) -> bool:
        return self.annotation is not None and self.annotation.is_write


@dataclass(frozen=True)
class Return:
    name: str | None
    type: Type
    annotation: Annotation | None

    def __str__(self) -> str:
        name = "" if self.name is None else f" {self.name}"
        return f"{_type_text(self.type, self.annotation)}{name}"


@dataclass(frozen=True)
class FunctionSchema:
    namespace: str | None
    name: str
    overload: str | None
    arguments: tuple[Argument, ...]
    returns: tuple[Return, ...]

    def __str__(self) -> str:
        head = f"{self.namespace}::" if self.namespace else ""
        head += self.name + (f".{self.overload}" if self.overload else "")
        args = [str(a) for a in self.positional]
        if self.kwarg_only:
            args += ["*", *(str(a) for a in self.kwarg_only)]
        # torch prints a single return bare, even a named one ("-> Tensor y").
        if len(self.returns) == 1:
            rets = str(self.returns[0])
        else:
            rets = f"({', '.join(str(r) for r in self.returns)})"
        return f"{head}({', '.join(args)}) -> {rets}"

    @property
    def positional(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if not a.kwarg_only)

    @property
    def kwarg_only(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if a.kwarg_only)

    @property
    def mutated_arguments(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if a.is_mutated)

    @property
    def tensor_arguments(self) -> tuple[Argument, ...]:
        """Arguments holding tensors: Tensor, Tensor?, Tensor[] and Tensor[]?."""
        return tuple(a for a in self.arguments if a.type.is_tensor_like)


# ------------------------------------------------------------------- parsing

# The types a custom operator's schema can declare: what torch.library's custom ops take (its
# infer_schema) and what torch's own C++ operators declare (bool[3], Generator?, MemoryFormat?).
BASE_TYPES = (
    "Tensor", "int", "float", "bool", "str", "SymInt", "ScalarType", "Scalar",
    "Device", "Layout", "MemoryFormat", "Generator",
)  # fmt: skip
LIST_ELEMS = ("Tensor", "Tensor?", "int", "SymInt", "float", "bool", "str", "Scalar")
SUPPORTED = (
    "Tensor, int, SymInt, float, bool, str, Scalar, ScalarType, Device, Layout, MemoryFormat, "
    "Generator, T? of those, lists of Tensor, Tensor?, int, SymInt, float, bool, str and Scalar "
    "(T[], T[N], T[]?)"
)
ALIASES = "Tensor(a), Tensor(a!) and Tensor! right after `Tensor`, as in Tensor(a!)? or Tensor(a!)[]"
# Real torch types that custom operators cannot have, by why; any other unknown name is a typo.
TORCHSCRIPT_TYPES = {
    "Any", "AnyEnumType", "AnyClassType", "NoneType", "Capsule", "Dict", "Future", "RRef",
    "Await", "Union", "Tuple", "t", "t1", "t2", "tVal", "PyObject", "number",
}  # fmt: skip
TORCH_TYPES = {
    "DeviceIndex", "QScheme", "Dimname", "Storage", "Stream", "SymBool", "SymFloat", "complex",
}  # fmt: skip
# The names torch's schema parser reads as a ScalarType default, and the enum number it prints for each.
DTYPES = {
    "uint8": 0, "int8": 1, "int16": 2, "short": 2, "int32": 3, "int": 3, "int64": 4, "long": 4,
    "float16": 5, "half": 5, "float32": 6, "float": 6, "float64": 7, "double": 7,
    "complex32": 8, "chalf": 8, "complex64": 9, "cfloat": 9, "complex128": 10, "cdouble": 10,
    "bool": 11, "qint8": 12, "quint8": 13, "qint32": 14, "bfloat16": 15, "float8_e5m2": 23,
    "float8_e4m3fn": 24, "float8_e5m2fnuz": 25, "float8_e4m3fnuz": 26, "uint16": 27,
    "uint32": 28, "uint64": 29,
}  # fmt: skip
# Layout and MemoryFormat defaults torch reads: one name each, or the enum number 0 it prints.
ENUM_DEFAULTS = {"Layout": ("strided", "0"), "MemoryFormat": ("contiguous_format", "0")}

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>->|::|\.\.\.|[-()\[\],=*?!|.])""",
    re.VERBOSE,
)
_INT = re.compile(r"-?(?:0|[1-9]\d*)")  # no leading zeros: 007 is no Python literal
MAX_LIST_SIZE = 64  # int[N]: kernels take sizes of a few dimensions
# torch's schema parser reads numbers with std::stoll/std::stod: no inf or nan, nothing out of range.
_FLOAT = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class _Tok:
    kind: str  # 'str', 'num', 'name', 'op' or 'eof'
    text: str
    col: int


def _tokenize(text: str) -> list[_Tok]:
    toks, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            quote = text[pos] in "\"'"
            raise SchemaError(
                "unterminated string" if quote else f"unexpected character {text[pos]!r}", pos
            )
        if m.lastgroup != "ws":
            toks.append(_Tok(m.lastgroup, m.group(), pos))
        pos = m.end()
    return toks + [_Tok("eof", "", len(text))]


def _unsupported(what: str, col: int, supports: str = SUPPORTED) -> SchemaError:
    return SchemaError(f"{what} (kopgen supports: {supports})", col, unsupported=True)


class _Parser:
    def __init__(self, text: str, problems: list[SchemaError] | None = None):
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0
        self.problems = problems  # where errors that do not stop parsing go; None: raise them

    def problem(self, error: SchemaError) -> None:
        """An error after which the rest of the text still parses (an invalid default, say)."""
        if self.problems is None:
            raise error
        self.problems.append(error)

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.tok
        self.i += 1
        return tok

    def accept(self, op: str) -> bool:
        if self.tok.kind == "op" and self.tok.text == op:
            self.i += 1
            return True
        return False

    def expect(self, op: str, message: str) -> None:
        if not self.accept(op):
            raise SchemaError(message, self.tok.col)

    def ident(self, what: str) -> _Tok:
        if self.tok.kind != "name":
            raise SchemaError(
                f"expected {what}, got {self.tok.text or 'end of text'!r}", self.tok.col
            )
        return self.take()

    def schema(self) -> FunctionSchema:
        namespace, name = None, self.ident("operator name").text
        if self.accept("::"):
            namespace, name = name, self.ident("operator name").text
        overload = self.ident("overload name").text if self.accept(".") else None
        self.expect("(", "expected '(' after operator name")
        arguments = self.arguments()
        self.expect("->", "expected '->' after argument list")
        returns = self.returns()
        if self.tok.kind != "eof":
            raise SchemaError(f"unexpected {self.tok.text!r} after returns", self.tok.col)
        return FunctionSchema(namespace, name, overload, arguments, returns)

    def arguments(self) -> tuple[Argument, ...]:
        args: list[Argument] = []
        kwarg_only = False
        while not self.accept(")"):
            if args or kwarg_only:
                if self.tok.kind == "eof" or self.tok.text == "->":
                    raise SchemaError("expected ')' after argument list", self.tok.col)
                self.expect(",", f"expected ',' or ')' after argument, got {self.tok.text!r}")
            if self.tok.text == "*" and not kwarg_only:
                kwarg_only = True
                self.take()
                if self.tok.text == ")":
                    raise SchemaError(
                        "'*' must be followed by keyword-only arguments", self.tok.col
                    )
                continue
            if self.tok.text == "...":
                raise SchemaError("varargs '...' are not supported", self.tok.col, unsupported=True)
            type, annotation = self.type()
            name = self.ident("argument name")
            if any(a.name == name.text for a in args):
                raise SchemaError(f"argument {name.text!r} defined twice", name.col)
            default_col = self.toks[self.i + 1].col if self.tok.text == "=" else 0
            default = self.default(type, name.text) if self.accept("=") else None
            # Generated Python signatures need this; no torch schema breaks it.
            if default is None and not kwarg_only and any(a.default for a in args):
                self.problem(SchemaError(
                    f"positional argument {name.text!r} without a default follows one with a "
                    "default (make it keyword-only by putting it after '*')",
                    name.col,
                ))
            args.append(Argument(name.text, type, default, annotation, kwarg_only, name.col, default_col))
        return tuple(args)

    def returns(self) -> tuple[Return, ...]:
        if self.tok.text == "...":
            raise SchemaError("varargs '...' are not supported", self.tok.col, unsupported=True)
        if not self.accept("("):
            return (self.one_return(),)
        rets: list[Return] = []
        while not self.accept(")"):
            if rets:
                self.expect(",", f"expected ',' or ')' after return, got {self.tok.text!r}")
            rets.append(self.one_return())
            if rets[-1].name and any(r.name == rets[-1].name for r in rets[:-1]):
                raise SchemaError(
                    f"return {rets[-1].name!r} defined twice", self.toks[self.i - 1].col
                )
        return tuple(rets)

    def one_return(self) -> Return:
        type, annotation = self.type()
        name = self.take().text if self.tok.kind == "name" else None
        return Return(name, type, annotation)

    def type(self) -> tuple[Type, Annotation | None]:
        start = self.tok
        if start.text == "(":
            raise _unsupported("unsupported tuple type", start.col)
        name = self.ident("a type").text
        while name.startswith("__torch__") and self.accept("."):  # a TorchScript class
            name += "." + self.ident("class name").text
        if name not in BASE_TYPES:
            if name.startswith("__torch__"):
                raise _unsupported(f"unsupported type {name!r}: a TorchBind class", start.col)
            if name in TORCHSCRIPT_TYPES:
                raise _unsupported(f"unsupported type {name!r}: TorchScript's, not an operator's", start.col)
            if name in TORCH_TYPES:
                raise _unsupported(f"unsupported type {name!r}: not one torch.library infers for custom ops", start.col)
            raise SchemaError(f"unknown type {name!r}", start.col)
        type: Type = BaseType(name)
        annotation = None
        if self.tok.text in ("(", "!"):
            annotation = self.annotation(name)
        while True:
            col = self.tok.col
            if self.accept("?"):
                if isinstance(type, OptionalType):
                    raise SchemaError("'?' given twice", col)
                type = OptionalType(type)
            elif self.accept("["):
                size_col = self.tok.col
                size = int(self.take().text) if self.tok.text.isdigit() else None
                if size is not None and not 1 <= size <= MAX_LIST_SIZE:  # each size's default is written out
                    raise SchemaError(f"list size {size} is out of range: 1 to {MAX_LIST_SIZE}", size_col)
                self.expect("]", "expected ']' after list size")
                type = ListType(type, size)
                if str(type.elem) not in LIST_ELEMS:
                    raise _unsupported(f"unsupported type '{type}'", start.col)
            elif self.tok.text in ("(", "!"):  # torch's int[](a), Tensor[]!: an alias after a suffix
                if name != "Tensor":  # TorchScript's list aliasing
                    raise _unsupported(f"alias annotation on '{type}'", col, ALIASES)
                raise _unsupported("alias annotation after '?' or '[]'", col, ALIASES)
            else:
                break
        return type, annotation

    def annotation(self, base: str) -> Annotation:
        start = self.take()
        if start.text == "!":  # torch's shorthand: Tensor! is Tensor(a!) with a fresh alias set
            if base != "Tensor":
                raise _unsupported(f"unsupported alias annotation '{base}!'", start.col, ALIASES)
            return Annotation(None, True)
        # Skip to ')' so torch-only forms ((a -> *), (a|b), (*)) are reported whole.
        parts = []
        while not self.accept(")"):
            if self.tok.kind == "eof":
                raise SchemaError("expected ')' after alias annotation", self.tok.col)
            parts.append(self.take().text)
        # torch.library's own schemas name alias sets a0, a1, ...
        if base != "Tensor" or not re.fullmatch(r"[a-z][a-z0-9]*!?", "".join(parts)):
            source = self.text[start.col : self.toks[self.i - 1].col + 1]
            raise _unsupported(f"unsupported alias annotation '{base}{source}'", start.col, ALIASES)
        return Annotation(parts[0], len(parts) == 2)

    def default(self, type: Type, arg: str) -> str:
        col = self.tok.col
        if self.accept("["):
            items: list[str] = []
            while not self.accept("]"):
                if items:
                    self.expect(",", "expected ',' or ']' in list default")
                items.append(self.literal())
            text, is_list = f"[{', '.join(items)}]", True
        else:
            text, is_list = self.literal(), False
        try:
            _check_default(type, text, is_list, arg, col)
        except SchemaError as error:
            self.problem(error)
        return text

    def literal(self) -> str:
        tok = self.take()
        if tok.text == "-" and self.tok.kind in ("num", "name"):
            return "-" + self.take().text
        if tok.kind in ("num", "name", "str"):
            return tok.text
        raise SchemaError(f"expected a default value, got {tok.text or 'end of text'!r}", tok.col)


def _check_default(type: Type, text: str, is_list: bool, arg: str, col: int) -> None:
    declared = type  # for messages: 'type' is narrowed below

    def bad(why: str = "") -> SchemaError:
        return SchemaError(f"invalid default '{text}' for {declared} argument {arg!r}{why}", col)

    def out_of_range(items: list[str]) -> SchemaError | None:
        """The reason torch refuses a number of the right form (std::stoll/std::stod fail on it)."""
        scalar = str(type.elem if isinstance(type, ListType) else type)
        for item in items:
            if scalar in ("int", "SymInt", "Scalar") and _INT.fullmatch(item) and not _int64(item):
                return bad(": torch reads integer defaults as 64-bit integers, -2**63 to 2**63-1")
            if scalar in ("float", "Scalar") and (item.lstrip("-") in ("inf", "nan") or _FLOAT.fullmatch(item)):
                return bad(": torch reads float defaults as finite float64 numbers (no inf, nan, overflow "
                           "or underflow)")
        return None

    if text == "None":
        if not isinstance(type, OptionalType):
            raise bad(f": None needs an optional type ('{type}?')")
        return
    if isinstance(type, OptionalType):
        type = type.elem
        if isinstance(type, ListType):  # torch's parser reads a list default only for a list that is not optional
            raise bad(f": an optional list defaults to None only (or drop the '?': '{type}')")
    if type.is_tensor_like:
        raise bad(": tensors can only default to None (on 'Tensor?')")
    if isinstance(type, ListType):
        if not is_list and type.size is None:
            raise bad(": use a list literal like [1, 2]")
        if str(type.elem) not in ("int", "SymInt", "float", "bool"):  # torch reads no other list default
            raise bad(f": torch reads no default for {type} but None (on '{type}?')")
        items = [item for item in (text[1:-1].split(", ") if is_list else [text]) if item]
        if not all(_scalar_ok(type.elem, item) for item in items):
            raise out_of_range(items) or bad()
    elif is_list or not _scalar_ok(type, text):
        if str(type) in ("str", "Device") and text[:1] in "\"'" and not _TORCH_ESCAPES.fullmatch(text[1:-1]):
            raise bad(": torch's schema parser reads the escapes \\\\ \\' \\\" \\a \\b \\f \\n \\v \\t and \\ooo (three "
                      "octal digits) only")
        if str(type) == "Device" and not is_list:
            raise bad(": a device like \"cpu\" or \"cuda:0\" (an index from 0 to 127)")
        if str(type) in ENUM_DEFAULTS:
            raise bad(f": torch reads {' or '.join(ENUM_DEFAULTS[str(type)])}")
        raise (not is_list and out_of_range([text])) or bad()


def _scalar_ok(type: Type, text: str) -> bool:
    name = str(type)
    if name in ("int", "SymInt") or (name == "Scalar" and _INT.fullmatch(text)):
        return bool(_INT.fullmatch(text)) and _int64(text)
    if name in ("float", "Scalar"):
        return bool(_FLOAT.fullmatch(text)) and _finite(text)
    if name == "bool":
        return text in ("True", "False")
    if name in ("str", "Device") and text[0] in "\"'":
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return False
        if not _TORCH_ESCAPES.fullmatch(text[1:-1]):  # torch's parser reads fewer escapes than Python
            return False
        return isinstance(value, str) and (name == "str" or bool(_DEVICE.fullmatch(value)))
    if name == "ScalarType":  # a dtype name, or the enum number torch prints (ScalarType? dtype=4)
        return text in DTYPES or text in map(str, DTYPES.values())
    return text in ENUM_DEFAULTS.get(name, ())  # Generator: only None (handled by the caller)


# The device strings torch's schema parser reads: a device type and an optional index.
_DEVICE = re.compile(r"(cpu|cuda|mps|xpu|meta|hip|mtia|privateuseone)(:(?:1[01]\d|12[0-7]|[1-9]?\d))?")  # int8
# A string default's text between its quotes: characters but a backslash, and the escapes torch's schema
# parser reads (parseStringLiteral: \\ \' \" \a \b \f \n \v \t, three octal digits); \x41, \u0041, \0, \r
# and the like it refuses.
_TORCH_ESCAPES = re.compile(r"(?:[^\\]|\\[\\\"'abfnvt]|\\[0-7]{3})*", re.DOTALL)


def _int64(text: str) -> bool:
    return INT64[0] <= int(text) <= INT64[1]


def _finite(text: str) -> bool:
    """Whether std::stod reads the number `text`: finite, and not below the smallest normal float64
    (stod reports underflow as out of range) unless it is written as a zero."""
    value = float(text)
    if value == 0:
        return not re.search(r"[1-9]", re.split("[eE]", text)[0])
    return math.isfinite(value) and abs(value) >= sys.float_info.min


def parse_schema(text: str, problems: list[SchemaError] | None = None) -> FunctionSchema:
    """Parse ``[namespace::]name[.overload](args) -> returns``; raise SchemaError.

    With a `problems` list, errors after which the text still parses (invalid defaults) are
    appended to it instead, and the schema is returned: the caller reports them all at once.
    """
    return _Parser(text, problems).schema()


# ------------------------------------------------------ code generation help

_PY_TYPES = {
    "Tensor": "Tensor", "int": "int", "SymInt": "int", "float": "float", "bool": "bool",
    "str": "str", "ScalarType": "torch.dtype",
    "Scalar": "torch.types.Number",  # int, float or bool: what torch.library.infer_schema reads as Scalar (a triton_op's schema)
    "Device": "torch.device", "Layout": "torch.layout", "MemoryFormat": "torch.memory_format",
    "Generator": "torch.Generator",
}  # fmt: skip


def python_annotation(type: Type) -> str:
    """Python type hint for a generated signature, e.g. ``Sequence[int] | None``."""
    if isinstance(type, OptionalType):
        return f"{python_annotation(type.elem)} | None"
    if isinstance(type, ListType):
        return f"Sequence[{python_annotation(type.elem)}]"
    return _PY_TYPES[type.name]


def python_default(argument: Argument) -> str | None:
    """The default as Python source; lists become tuples (never mutable defaults)."""
    text, type = argument.default, argument.type
    if text is None or text == "None":
        return text
    if isinstance(type, OptionalType):
        type = type.elem
    if str(type) == "ScalarType":
        number = int(text) if _INT.fullmatch(text) else DTYPES[text]
        return f"torch.{next(name for name, n in DTYPES.items() if n == number)}"
    if str(type) in ENUM_DEFAULTS:
        return f"torch.{ENUM_DEFAULTS[str(type)][0]}"
    if str(type) == "Device":
        return f"torch.device({_py_scalar(text)})"
    if isinstance(type, ListType):
        if text.startswith("["):
            items = [_py_scalar(item) for item in text[1:-1].split(", ") if item]
        else:  # torch's bare scalar for a fixed-size list: int[2] x=1 means [1, 1]
            items = [_py_scalar(text)] * (type.size or 1)
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    return _py_scalar(text)


def _py_scalar(text: str) -> str:
    if text[0] in "\"'":
        return repr(ast.literal_eval(text))
    return text
