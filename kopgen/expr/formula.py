"""Backward formulas (`derivatives`): a restricted PyTorch expression per differentiable input.

`parse_formula` checks a formula against an allow-list (torch functions that compute, tensor
methods without side effects, this namespace's functional ops), records what the backward must
save, and returns it as executable Python.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .syntax import (
    METADATA_ATTRIBUTES,
    METADATA_METHODS,
    Checker,
    ExprError,
    check_constants,
    did_you_mean,
    error_at,
    parse,
    unparse,
)


@dataclass(frozen=True)
class FormulaContext:
    """What a formula may refer to: the op's arguments and outputs, and the ops of its namespace."""

    arg_kinds: Mapping[str, str]  # name -> 'tensor' | 'optional' | 'float' | 'int' | 'bool' | 'other'
    num_outputs: int
    namespace: str
    own_ops: frozenset[str]  # op names in the same namespace
    mutating_ops: frozenset[str] = frozenset()  # those of own_ops whose schema mutates an argument
    # How many values each of own_ops returns (where its schema parses): a call of one that returns
    # several is indexed with an integer literal, like rms_norm_backward(...)[0].
    own_op_returns: Mapping[str, int] = field(default_factory=dict)
    # A custom kernel's `reference` may pass strings by keyword (reduction="none"); formulas take none.
    string_keywords: bool = False


@dataclass(frozen=True)
class Formula:
    """A checked backward formula, as Python, and what the backward must save for it."""

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
                           r"|jit|hub|utils|ops|library|cuda|backends|distributed|autograd|fork|wait|cond"
                           r"|while_loop|vmap|func|.*_)$")
# torch.<name> a formula may use as a value (not called): dtypes, constants, memory formats. Any other
# (a function passed to one that calls it, torch.fork(torch.save, ...)) would run what no check saw.
_TORCH_VALUES = frozenset({
    "float16", "half", "bfloat16", "float32", "float", "float64", "double", "complex32", "chalf", "complex64",
    "cfloat", "complex128", "cdouble", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "short", "int32",
    "int", "int64", "long", "bool", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "pi", "e", "inf", "nan", "strided", "contiguous_format", "channels_last", "channels_last_3d", "preserve_format",
})
_UNSAFE_METHOD = re.compile(r"^(.*[^_]_|numpy|tolist|item|backward|register_hook|retain_grad|data_ptr|storage"
                            r"|untyped_storage|share_memory_|pin_memory|requires_grad_|detach_)$")
# A formula is a pure function of its inputs: nothing random (torch.<f>, nn.functional.<f> or a method).
_RANDOM = re.compile(r"^(rand.*|bernoulli.*|multinomial|normal|poisson|binomial|.*dropout.*|rrelu.*|gumbel_softmax"
                     r"|fractional_max_pool.*|.*random.*|uniform|exponential|geometric|cauchy|log_normal)$")
# Keywords whose strings would place a reference's tensors (or files) elsewhere than its arguments'.
_PLACE_KEYWORDS = frozenset({"device", "f", "file", "path", "filename", "map_location"})
# Keywords that make a call write into a tensor it was given.
_MUTATING_KEYWORDS = frozenset({"out", "inplace"})


class _FormulaChecker(Checker):
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
        self.indexed: set[int] = set()  # id() of the own-op calls that are indexed, as a call of several returns must be

    def visit_children(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.expr, ast.keyword)):
                self.check(child)

    visit_BinOp = visit_UnaryOp = visit_BoolOp = visit_Compare = visit_IfExp = visit_children
    visit_Tuple = visit_List = visit_children

    def visit_Constant(self, node: ast.Constant) -> None:
        if type(node.value) is str and self.ctx.string_keywords:
            raise self.error(node, 'a reference takes strings only as keyword values, like reduction="none"')
        if node.value is not None and type(node.value) not in (bool, int, float):
            raise self.forbidden(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is None:
            raise self.error(node, "'**' arguments are not allowed")
        if node.arg in _MUTATING_KEYWORDS:
            raise self.error(node, f"'{node.arg}=' is not allowed in a derivative formula: a formula computes "
                                   "new tensors and writes none")
        if self.ctx.string_keywords and isinstance(node.value, ast.Constant) and type(node.value.value) is str:
            if node.arg in _PLACE_KEYWORDS:
                raise self.error(node, f"'{node.arg}=\"...\"' is not allowed in a reference: it computes on the "
                                       "op's own tensors (use x.device)")
            return
        self.check(node.value)

    def visit_Name(self, node: ast.Name) -> None:
        self.name(node, "value")

    def visit_Attribute(self, node: ast.Attribute, methods=frozenset(), called: bool = False) -> None:
        if node.attr.startswith("_"):  # blocks __class__, __globals__, torch._C ...
            raise error_at(self.text, node.end_lineno,
                           node.end_col_offset - len(node.attr.encode()),
                           f"attribute {node.attr!r} is not allowed (names starting with '_' "
                           "are private)")
        path, base = _attribute_path(node)
        if not called and isinstance(base, ast.Name) and base.id == "torch" and \
                (len(path) != 1 or path[0] not in _TORCH_VALUES):
            raise self.error(node, f"torch.{'.'.join(path)} is not a value a formula may use: call torch "
                                   "functions, and use torch's dtypes and constants (torch.float32, torch.pi)")
        metadata = node.attr in METADATA_ATTRIBUTES or node.attr in methods
        if isinstance(node.value, ast.Name):
            self.name(node.value, "metadata" if metadata else "base")
        elif called and isinstance(node.value, ast.Attribute):  # the module path of a call: torch.nn.functional
            self.visit_Attribute(node.value, called=True)
        else:
            self.check(node.value)

    def visit_Call(self, node: ast.Call) -> None:
        try:
            if isinstance(node.func, ast.Name):
                self.name(node.func, "call")
                returns = self.ctx.own_op_returns.get(node.func.id, 1)
                if node.func.id in self.ctx.own_ops and returns > 1 and id(node) not in self.indexed:
                    raise self.error(node.func, f"'{node.func.id}' returns {returns} values; index its call, "
                                                f"like {node.func.id}(...)[0]")
            elif isinstance(node.func, ast.Attribute):
                self.check_callee(node.func)
                self.visit_Attribute(node.func, methods=METADATA_METHODS, called=True)
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
        path, base = _attribute_path(func)
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
        if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id in self.ctx.own_ops:
            self.own_op_index(base, base.func.id, index)
            return
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

    def own_op_index(self, call: ast.Call, op: str, index: ast.expr) -> None:
        """`op(...)[i]`: one of the values an own op of several returns gives (a fused backward's gradients)."""
        self.indexed.add(id(call))
        self.check(call)
        count = self.ctx.own_op_returns.get(op)
        if count is None:  # its schema does not parse: reported with that op
            return
        if count == 1:
            raise self.error(index, f"'{op}' returns one Tensor; use its call without an index")
        if not (isinstance(index, ast.Constant) and type(index.value) is int):
            raise self.error(index, f"{op}(...)[...] needs an integer literal, like {op}(...)[0]")
        if not 0 <= index.value < count:
            raise self.error(index, f"{op}(...)[{index.value}] is out of range: '{op}' returns {count} values")

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
            raise self.error(node, f"unknown name {name!r}" + (did_you_mean(name, known) or (
                "; use the op's arguments, grad(s), result(s), torch or this namespace's ops")))


class _ReferenceChecker(_FormulaChecker):
    """A custom kernel's `reference` also indexes and slices Tensors (`input[..., :d]`,
    `cache[positions]`), as the oracle of a kernel that reads parts of its inputs must."""

    language = "a reference"

    def visit_Subscript(self, node: ast.Subscript) -> None:
        base = node.value
        own_op = isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id in self.ctx.own_ops
        if own_op:
            super().visit_Subscript(node)  # op(...)[i]: its own rules
            return
        self.check(base)
        self.check(node.slice)

    def name(self, node: ast.Name, use: str) -> None:
        """As a formula's names, less what only a derivative has (grad(s), result(s))."""
        if node.id in ("grad", "grads", "result", "results") and node.id not in self.ctx.arg_kinds:
            raise self.error(node, f"a reference has no {node.id!r}: it computes the op's outputs from its arguments")
        if node.id in self.ctx.arg_kinds or node.id == "torch" or node.id in self.ctx.own_ops:
            super().name(node, use)
            return
        known = [*self.ctx.arg_kinds, "torch", *sorted(self.ctx.own_ops)]
        raise self.error(node, f"unknown name {node.id!r}" + (did_you_mean(node.id, known) or (
            "; use the op's arguments, torch or this namespace's ops")))

    def visit_Slice(self, node: ast.Slice) -> None:
        self.visit_children(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if node.value is not Ellipsis:
            super().visit_Constant(node)


def _attribute_path(node: ast.Attribute) -> tuple[list[str], ast.expr]:
    """`torch.special.erf`: (["special", "erf"], the Name torch); the base is whatever the chain starts at."""
    path, base = [node.attr], node.value
    while isinstance(base, ast.Attribute):
        path.insert(0, base.attr)
        base = base.value
    return path, base


def parse_formula(text: str, ctx: FormulaContext) -> Formula:
    """Check a backward formula and work out what the backward needs to save."""
    body = parse(text)
    checker = (_ReferenceChecker if ctx.string_keywords else _FormulaChecker)(text, ctx)
    checker.check(body)
    ExprError.raise_any(checker.errors + check_constants(text, body))
    for node in ast.walk(body):  # own ops: `mymul(...)` -> `torch.ops.<ns>.mymul.default(...)`
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in checker.ops:
            func: ast.expr = ast.Name("torch", ast.Load())
            for part in ("ops", ctx.namespace, node.func.id, "default"):
                func = ast.Attribute(func, part, ast.Load())
            node.func = func
    for node in ast.walk(body):  # strings (a reference's reduction="none") in double quotes, as ruff writes them
        for keyword in getattr(node, "keywords", ()):
            if isinstance(keyword.value, ast.Constant) and type(keyword.value.value) is str:
                keyword.value = ast.Name(json.dumps(keyword.value.value), ast.Load())
    python = unparse(body)
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

