"""The pointwise language (`compute`, `reduce.expr`): arithmetic over the op's arguments.

`parse_pointwise` checks an expression (its checker infers of every node whether it
depends on a tensor and whether it is a truth value) and translates it once, with the emitters
of :mod:`.emitters`, into PyTorch, Triton and C++; `Pointwise` holds the result.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..names import optional_flags
from .emitters import UNARY_FUNCS, CppEmitter, CudaEmitter, TorchEmitter, TritonEmitter
from .syntax import OP_SYMBOLS, TOO_LARGE, Checker, ExprError, check_constants, did_you_mean, node_error, parse

ARG_KINDS = ("tensor", "optional", "float", "int", "bool")  # optional: a `Tensor?` argument
_ARITY = {**{f: 1 for f in UNARY_FUNCS}, "minimum": 2, "maximum": 2, "pow": 2, "where": 3,
          "present": 1}  # present(x): whether the optional Tensor x was given
# Argument names that would clash with the generated code (modules, builtins, C++ words).
RESERVED = frozenset((
    "torch", "math", "tl", "triton", "std", "acc_t", "abs", "min", "max", "int", "float",
    "double", "bool", "char", "long", "short", "signed", "unsigned", "auto", "new", "delete",
    "this", "template", "typename", "class", "struct", "union", "namespace", "operator",
    "static", "const", "register", "default", "switch", "case", "goto", "do", "sizeof", "void"))


@dataclass(frozen=True)
class Kind:
    """What the checker infers of a node."""

    tensor: bool  # depends on a tensor argument (else: a scalar)
    boolean: bool  # a truth value (else: a number)


_UNKNOWN = Kind(tensor=True, boolean=False)  # a node with a problem (reported): fits anywhere


class _PointwiseChecker(Checker):
    """Infer a Kind for every node; reject anything outside the pointwise language."""

    language = "a pointwise expression"
    unknown = _UNKNOWN

    def __init__(self, text: str, args: Mapping[str, str]):
        super().__init__(text)
        self.args = args
        self.kinds: dict[ast.AST, Kind] = {}
        self.uses: list[tuple[int, int, str]] = []  # (line, column, name) of argument uses
        self.tested: set[str] = set()  # optional Tensors the expression tests with present()
        self.calls: set[str] = set()  # the functions called (`**` counts as pow)
        self.known_present: frozenset[str] = frozenset()  # optionals the enclosing branches tested

    def check(self, node: ast.AST) -> Kind:
        self.kinds[node] = kind = super().check(node)
        return kind

    def operands(self, nodes, what: str, boolean: bool = False, checked: bool = False) -> Kind:
        """Check operands that must all be numbers (or all booleans); the kind of the result."""
        need = ("boolean operands (comparisons or bool arguments)" if boolean
                else "numbers, not booleans (use where(cond, x, y))")
        for node in nodes:
            kind = self.kinds[node] if checked else self.check(node)
            if kind is not _UNKNOWN and kind.boolean != boolean:
                raise self.error(node, f"{what} needs {need}")
        return Kind(any(self.kinds[n].tensor for n in nodes), boolean)

    def visit_Name(self, node: ast.Name) -> Kind:
        kind = self.args.get(node.id)
        if kind is None:
            if node.id in _ARITY:
                raise self.error(node, f"{node.id!r} is a function; call it, like {node.id}(x)")
            hint = did_you_mean(node.id, [*self.args, *_ARITY])
            raise self.error(node, f"unknown name {node.id!r}" + (
                hint or f"; the arguments are {', '.join(self.args) or '(none)'}"))
        if node.id in RESERVED:
            raise self.error(node, f"the argument name {node.id!r} clashes with generated code;"
                                   " rename the argument")
        if kind == "optional" and node.id not in self.known_present:
            raise self.error(node, f"{node.id!r} is an optional Tensor (Tensor?), which may be None: "
                                   f"read it inside a branch that tests it, like "
                                   f"({node.id} if present({node.id}) else 0)")
        self.uses.append((node.lineno, node.col_offset, node.id))
        return Kind(tensor=kind in ("tensor", "optional"), boolean=kind == "bool")

    def visit_Constant(self, node: ast.Constant) -> Kind:
        if type(node.value) not in (bool, int, float):
            raise self.forbidden(node)
        if type(node.value) is float and abs(node.value) > 1e300:  # also inf (1e999); ints: check_constants
            raise self.error(node, TOO_LARGE)
        return Kind(False, isinstance(node.value, bool))

    def visit_BinOp(self, node: ast.BinOp) -> Kind:
        sym = OP_SYMBOLS[type(node.op)]
        if sym not in ("+", "-", "*", "/", "**"):
            raise self.error(node, f"operator {sym!r} is not allowed; use + - * / ** or "
                                   "and/or/not")
        if sym == "**":
            self.calls.add("pow")
        return self.operands([node.left, node.right], repr(sym))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Kind:
        if isinstance(node.op, ast.Not):
            return self.operands([node.operand], "'not'", boolean=True)
        if isinstance(node.op, ast.Invert):
            raise self.error(node, "operator '~' is not allowed; use 'not'")
        return self.operands([node.operand], "unary " + OP_SYMBOLS[type(node.op)])

    def visit_Compare(self, node: ast.Compare) -> Kind:
        if len(node.ops) > 1:
            raise self.error(node, "chained comparisons are not allowed; write "
                                   "'a < b and b < c'")
        sym = OP_SYMBOLS[type(node.ops[0])]
        if sym not in ("<", "<=", ">", ">=", "==", "!="):
            raise self.error(node, f"{sym!r} is not allowed; compare with < <= > >= == !=")
        return Kind(self.operands([node.left, *node.comparators], repr(sym)).tensor, True)

    def visit_BoolOp(self, node: ast.BoolOp) -> Kind:
        what = "'and'" if isinstance(node.op, ast.And) else "'or'"
        return self.operands(node.values, what, boolean=True)

    def where(self, cond: ast.AST, x: ast.AST, y: ast.AST, what: str) -> Kind:
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
        return Kind(values.tensor or self.kinds[cond].tensor, False)

    def visit_IfExp(self, node: ast.IfExp) -> Kind:
        return self.where(node.test, node.body, node.orelse, "'if'")

    def present(self, node: ast.Call) -> Kind:
        arg = node.args[0] if len(node.args) == 1 else None
        if not isinstance(arg, ast.Name) or self.args.get(arg.id) != "optional":
            optionals = [n for n, k in self.args.items() if k == "optional"]
            raise self.error(node, "present() takes one optional Tensor argument (Tensor?)" + (
                f": {', '.join(optionals)}" if optionals else "; this op has none"))
        self.tested.add(arg.id)
        self.kinds[arg] = Kind(tensor=True, boolean=False)
        return Kind(tensor=False, boolean=True)  # one truth value for the whole call

    def visit_Call(self, node: ast.Call) -> Kind:
        if node.keywords:
            raise self.error(node.keywords[0], "keyword arguments are not allowed")
        if not isinstance(node.func, ast.Name):
            raise self.error(node.func, "only the built-in functions can be called, like exp(x)")
        name, n = node.func.id, _ARITY.get(node.func.id)
        if name in self.args:
            raise self.error(node.func, f"{name!r} is an argument, not a function")
        if n is None:
            raise self.error(node.func, f"unknown function {name!r}{did_you_mean(name, _ARITY)};"
                                        f" allowed: {', '.join(_ARITY)}")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.forbidden(arg)
        if len(node.args) != n:
            raise self.error(node, f"{name}() takes {n} argument{'s' * (n > 1)}, "
                                   f"got {len(node.args)}")
        self.calls.add(name)
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


@dataclass(frozen=True)
class Pointwise:
    """A checked pointwise expression; its translations are made once, at parse time."""

    text: str
    names: tuple[str, ...]  # argument names used, in first-use order
    tested: tuple[str, ...]  # optional Tensors the expression tests with present(), sorted
    _torch: str = field(repr=False, compare=False)
    _triton: str = field(repr=False, compare=False)
    _cpp: str = field(repr=False, compare=False)
    _cuda: str = field(repr=False, compare=False)
    imports: frozenset[str] = field(default=frozenset(), compare=False)  # modules to_torch() uses: torch, math
    calls: frozenset[str] = field(default=frozenset(), compare=False)  # functions called, `**` as pow

    def to_torch(self) -> str:
        """PyTorch over the argument names, with `torch` and `math` in scope."""
        return self._torch

    def to_triton(self) -> str:
        """Triton over the loaded blocks and scalar params, with `tl` in scope."""
        return self._triton

    def to_cpp(self) -> str:
        """C++ over locals of type `acc_t`; needs <cmath> and <algorithm>."""
        return self._cpp

    def to_functor(self, device: str) -> str:
        """The C++ of a functor for `device`: to_cpp() for "cpu"; for "cuda", inside a functor whose storage
        type is `scalar_t` (its exp is exp_for<scalar_t>)."""
        return self._cuda if device == "cuda" else self._cpp


def parse_pointwise(text: str, args: Mapping[str, str]) -> Pointwise:
    """Check `text` against the pointwise language; `args` maps argument name -> kind."""
    for name, kind in args.items():
        if kind not in ARG_KINDS:
            raise ValueError(f"argument {name!r} has kind {kind!r}; expected one of {ARG_KINDS}")
    body = parse(text)
    checker = _PointwiseChecker(text, args)
    kind = checker.check(body)
    ExprError.raise_any(checker.errors + check_constants(text, body))
    if kind.boolean:
        raise node_error(text, body, "the expression computes a boolean; use where(cond, x, y) "
                                     "to turn it into a number")
    if not kind.tensor:
        tensors = ", ".join(n for n, k in args.items() if k == "tensor") or "none"
        raise node_error(text, body, f"the expression must use a tensor argument ({tensors})")
    names = tuple(dict.fromkeys(name for _, _, name in sorted(checker.uses)))
    flags = optional_flags(args, [name for name, kind in args.items() if kind == "optional"])
    emitters = [emitter(text, checker.kinds, flags) for emitter in (TorchEmitter, TritonEmitter, CppEmitter, CudaEmitter)]
    codes = [emitter.emit(body)[0] for emitter in emitters]
    return Pointwise(text, names, tuple(sorted(checker.tested)), *codes, imports=frozenset(emitters[0].imports),
                     calls=frozenset(checker.calls))
