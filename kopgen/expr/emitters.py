"""The pointwise language's translations into PyTorch, Triton and C++ source text.

Each target has a translation table (a function or operator -> its template and precedences)
and an emitter, a subclass of the language-neutral `Emitter` that walks a checked tree.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .syntax import OP_SYMBOLS, node_error, python_number

if TYPE_CHECKING:
    from .pointwise import Kind

# Triton's x ** 8 and tan(x) repeat their argument: this stops nested ones from exploding.
MAX_OUTPUT_CHARS = 100_000
# The language's functions of one argument; each has an entry in every table below.
UNARY_FUNCS = ("abs", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
               "sigmoid", "relu", "erf", "floor", "ceil", "silu", "gelu_tanh")

_ATOM = 100
# Python precedences (higher binds tighter).  The C++ operators kopgen emits keep the same
# order among themselves, so one numbering serves all three languages.
_PREC = {"or": 2, "and": 3, "cmp": 5, "+": 10, "-": 10, "*": 11, "/": 11, "unary": 12}

# Translation tables: name -> (template, precedence of the result, precedence every operand
# needs).  For 'and'/'or' the template is the separator that joins the operands.
_PY = {  # torch.* wants tensors: a call whose operands are all Python numbers uses these
    **{f: (f"math.{f}({{}})", _ATOM, 0) for f in UNARY_FUNCS},
    "abs": ("abs({})", _ATOM, 0), "relu": ("max({}, 0)", _ATOM, 0),
    "rsqrt": ("1 / math.sqrt({})", 11, 0), "sigmoid": ("1 / (1 + math.exp(-{}))", 11, 13),
    "silu": ("{0} / (1 + math.exp(-{0}))", 11, 13),
    "gelu_tanh": ("{0} / (1 + math.exp(-1.5957691216057308 * ({0} + 0.044715 * {0} * {0} * {0})))", 11, 13),
    "minimum": ("min({}, {})", _ATOM, 0), "maximum": ("max({}, {})", _ATOM, 0),
    "pow": ("math.pow({}, {})", _ATOM, 0), "**": ("math.pow({}, {})", _ATOM, 0),
    "and": (" and ", 3, 4), "or": (" or ", 2, 4), "not": ("not {}", 4, 4),
    "where": ("{1} if {0} else {2}", 1, 2),  # a scalar condition picks one whole branch
    "present": ("{} is not None", 5, _ATOM),
}
_TORCH = {
    **{f: (f"torch.{f}({{}})", _ATOM, 0) for f in UNARY_FUNCS},
    **{f: (f"torch.{f}({{}}, {{}})", _ATOM, 0) for f in ("minimum", "maximum", "pow")},
    # torch.minimum/maximum need two tensors: clamp the tensor by the number instead.
    "clamp_max": ("torch.clamp({}, max={})", _ATOM, 0),
    "clamp_min": ("torch.clamp({}, min={})", _ATOM, 0),
    "**": ("{} ** {}", 13, 14),
    "and": (" & ", 8, 9), "or": (" | ", 6, 9), "not": ("~{}", 12, 13),  # bool tensors
    "where": ("torch.where({}, {}, {})", _ATOM, 0),  # x and y may be Python numbers
    "silu": ("torch.nn.functional.silu({})", _ATOM, 0),
    "gelu_tanh": ('torch.nn.functional.gelu({}, approximate="tanh")', _ATOM, 0),
}
_TRITON = {  # only `tl` primitives: the Triton CPU interpreter has no libdevice
    **{f: (f"tl.{f}({{}})", _ATOM, 0) for f in UNARY_FUNCS},
    "log1p": ("tl.log(1.0 + {})", _ATOM, 11),
    "tan": ("tl.sin({0}) / tl.cos({0})", 11, 0),
    # tl.sigmoid is a @triton.jit helper, which Triton's interpreter cannot call in-process.
    "sigmoid": ("1.0 / (1.0 + tl.exp(-{}))", 11, 13),
    "tanh": ("2.0 / (1.0 + tl.exp(-2.0 * {})) - 1.0", 10, 12),
    # propagate_nan: a NaN wins, as in torch (tl.maximum's default drops it)
    "relu": ("tl.maximum({}, 0.0, propagate_nan=tl.PropagateNan.ALL)", _ATOM, 0),
    "silu": ("{0} / (1.0 + tl.exp(-{0}))", 11, 13),
    # 0.5 * x * (1 + tanh(z)) is x * sigmoid(2 * z), z = sqrt(2 / pi) * (x + 0.044715 * x ** 3): one exp
    "gelu_tanh": ("{0} / (1.0 + tl.exp(-1.5957691216057308 * ({0} + 0.044715 * {0} * {0} * {0})))", 11, 13),
    "minimum": ("tl.minimum({}, {}, propagate_nan=tl.PropagateNan.ALL)", _ATOM, 0),
    "maximum": ("tl.maximum({}, {}, propagate_nan=tl.PropagateNan.ALL)", _ATOM, 0),
    "and": (" & ", 8, 9), "or": (" | ", 6, 9), "not": ("{} == 0", 5, 6),
    "where": ("tl.where({}, {}, {})", _ATOM, 0),
    "present": ("HAS_{}", _ATOM, _ATOM),  # a constexpr: Triton compiles a kernel per case
}
# exp is csrc/pointwise.h's exp_of: vectorized for float, std::exp for double.
_CPP = {
    **{f: (f"std::{f}({{}})", _ATOM, 0) for f in UNARY_FUNCS},
    "exp": ("exp_of({})", _ATOM, 0),
    "rsqrt": ("acc_t(1) / std::sqrt({})", 11, 0),
    "sigmoid": ("acc_t(1) / (acc_t(1) + exp_of(-{}))", 11, 13),
    "relu": ("std::max({}, acc_t(0))", _ATOM, 0),
    "silu": ("{0} / (acc_t(1) + exp_of(-{0}))", 11, 13),
    "gelu_tanh": ("{0} / (acc_t(1) + exp_of(acc_t(-1.5957691216057308) * ({0} + acc_t(0.044715) * {0} * {0} * {0})))",
                  11, 13),
    # a NaN in either operand wins, as in torch (std::max(0, nan) is 0): csrc/pointwise.h's Max and Min
    "minimum": ("Min<acc_t>::combine({}, {})", _ATOM, 0), "maximum": ("Max<acc_t>::combine({}, {})", _ATOM, 0),
    "pow": ("std::pow({}, {})", _ATOM, 0), "**": ("std::pow({}, {})", _ATOM, 0),
    # Operands of || and && bind tighter than &&: C++'s -Wparentheses wants `(a && b) || c`.
    "and": (" && ", 3, 4), "or": (" || ", 2, 4), "not": ("!{}", 12, 13),
    "where": ("({} ? {} : {})", _ATOM, 0),
    "present": ("has_{}", _ATOM, _ATOM),
}

# CUDA functors call exp through exp_for<scalar_t> (csrc/cuda/pointwise.cuh), and the activations divide
# through divide_for<scalar_t>: approximate for 16-bit storage, exact otherwise.
_CUDA = {name: (code.replace("exp_of(", "exp_for<scalar_t>("), *precedences)
         for name, (code, *precedences) in _CPP.items()}
_CUDA |= {
    "minimum": ("nan_min({}, {})", _ATOM, 0), "maximum": ("nan_max({}, {})", _ATOM, 0),  # cuda/pointwise.cuh
    "sigmoid": ("divide_for<scalar_t>(acc_t(1), acc_t(1) + exp_for<scalar_t>(-{}))", _ATOM, 13),
    "silu": ("divide_for<scalar_t>({0}, acc_t(1) + exp_for<scalar_t>(-{0}))", _ATOM, 13),
    "gelu_tanh": (("divide_for<scalar_t>({0}, acc_t(1) + exp_for<scalar_t>(acc_t(-1.5957691216057308)"
                   " * ({0} + acc_t(0.044715) * {0} * {0} * {0})))"), _ATOM, 13),
}


# The modules a translation table's entry calls into: `math.exp({})` needs `import math`.
_MODULE_CALL = re.compile(r"\b(torch|math)\.")


class Emitter:
    """Turn a checked tree into one target language; each subclass gives its table and its constants.

    Each emit returns (code, precedence of its top operator), so that operands get
    parentheses only where the precedence needs them.
    """

    funcs: Mapping[str, tuple[str, int, int]]  # the target's translation table

    def __init__(self, text: str, kinds: dict[ast.AST, Kind], flags: Mapping[str, str]):
        self.text, self.kinds = text, kinds
        self.imports: set[str] = set()  # the modules the translation calls into (torch, math)
        self.flags = flags  # the kernels' flags of the optional Tensors (names.optional_flags)

    def emit(self, node: ast.AST) -> tuple[str, int]:
        code, prec = getattr(self, "emit_" + type(node).__name__)(node)
        if len(code) > MAX_OUTPUT_CHARS:
            raise node_error(self.text, node, "the expression is too large once translated "
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
        sym = OP_SYMBOLS[type(node.op)]
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
        return f"{left} {OP_SYMBOLS[type(node.ops[0])]} {right}", _PREC["cmp"]

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
        raise NotImplementedError  # each target spells its numbers and truth values


class CppEmitter(Emitter):
    """C++ over locals of type `acc_t`."""

    funcs = _CPP

    def emit_Constant(self, node: ast.Constant) -> tuple[str, int]:
        value = node.value
        return (str(value).lower() if isinstance(value, bool) else f"acc_t({value!r})"), _ATOM

    def power(self, base: ast.AST, exp: ast.AST, node: ast.AST, name: str) -> tuple[str, int]:
        # Squares and cubes of arithmetic as products, as ATen's pow kernels compute them: std::pow costs
        # dozens of instructions on a GPU and may be an ulp off the product. (A base that calls a
        # function keeps std::pow: the product would call it n times.)
        n = _small_int(exp)
        if n in (2, 3) and not any(isinstance(child, ast.Call) for child in ast.walk(base)):
            return " * ".join([self.sub(base, _PREC["unary"])] * n), _PREC["*"]
        return super().power(base, exp, node, name)


class CudaEmitter(CppEmitter):
    """C++ over locals of type `acc_t` in a CUDA functor of storage type `scalar_t`."""

    funcs = _CUDA


class TorchEmitter(Emitter):
    """PyTorch over tensors and Python numbers: the table follows each node's kind."""

    def table(self, node: ast.AST) -> dict:
        return _TORCH if self.kinds[node].tensor else _PY

    def apply(self, name: str, args: list[ast.AST], node: ast.AST) -> tuple[str, int]:
        tensors = [self.kinds[a].tensor for a in args]
        if name in ("minimum", "maximum") and any(tensors) and not all(tensors):
            bound = "clamp_max" if name == "minimum" else "clamp_min"
            return super().apply(bound, args if tensors[0] else args[::-1], node)
        return super().apply(name, args, node)

    def emit_Constant(self, node: ast.Constant) -> tuple[str, int]:
        return python_number(node.value), _ATOM


class TritonEmitter(Emitter):
    """Triton over the loaded blocks and scalar params, in `tl` primitives only."""

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
        return python_number(value if isinstance(value, bool) else float(value)), _ATOM

    def power(self, base: ast.AST, exp: ast.AST, node: ast.AST, name: str) -> tuple[str, int]:
        n = _small_int(exp)
        if n is None:
            return self.general_power(base, exp)
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


    def general_power(self, base: ast.AST, exp: ast.AST) -> tuple[str, int]:
        """base ** exp as torch.pow has it (tl has no pow): exp2(exp * log2(base)), which is NaN for a negative
        base, as torch's is where the exponent is fractional; for an integer exponent |base| ** exp with the
        base's sign where the exponent is odd; and x ** 0 is 1 (NaN and 0 bases too)."""
        b, e = self.sub(base, 0), self.sub(exp, _PREC["*"])
        # below zero, -0.0 too (its odd negative powers are -inf): 1 / -0.0 is -inf
        negative = f"({self.sub(base, _PREC['cmp'] + 1)} < 0.0) | (1.0 / {self.sub(base, _PREC['*'] + 1)} < 0.0)"
        raw, signed = f"tl.exp2({e} * tl.log2({b}))", f"tl.exp2({e} * tl.log2(tl.abs({b})))"
        value = self.constant_value(exp)
        if value is not None and not float(value).is_integer():
            return raw, _ATOM
        if value is not None:
            return (f"{signed} * tl.where({negative}, -1.0, 1.0)" if value % 2 else signed), 11
        sign = f"tl.where({negative}, tl.where({e} % 2.0 != 0.0, -1.0, 1.0), 1.0)"
        return f"tl.where({e} == 0.0, 1.0, tl.where(tl.floor({e} * 1.0) == {e}, {signed} * {sign}, {raw}))", _ATOM

    @staticmethod
    def constant_value(node: ast.AST) -> float | int | None:
        """A numeric literal's value (maybe negated), else None."""
        sign = 1
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            sign, node = (-1 if isinstance(node.op, ast.USub) else 1), node.operand
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return sign * node.value
        return None


def _small_int(node: ast.AST) -> int | None:
    """The value of an integer literal in -8..8 (maybe negated), else None."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign, node = (-1 if isinstance(node.op, ast.USub) else 1), node.operand
    if isinstance(node, ast.Constant) and type(node.value) is int and node.value <= 8:
        return sign * node.value
    return None



# -- `fake`'s metadata language in C++: the host functions of custom kernels allocate their outputs with it

# torch's dtypes (metadata.TORCH_DTYPES) as C++ names them: ScalarType's enumerators, the aliases resolved.
_DTYPE_ALIASES = {"bit": "uint1", "float": "float32", "double": "float64", "half": "float16", "int": "int32",
                  "long": "int64", "short": "int16", "cfloat": "complex64", "cdouble": "complex128", "chalf": "complex32"}
_SCALAR_TYPES = {
    "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long", "float16": "Half",
    "float32": "Float", "float64": "Double", "bfloat16": "BFloat16", "bool": "Bool", "complex32": "ComplexHalf",
    "complex64": "ComplexFloat", "complex128": "ComplexDouble", "qint8": "QInt8", "quint8": "QUInt8",
    "qint32": "QInt32", "quint4x2": "QUInt4x2", "quint2x4": "QUInt2x4", "bits1x8": "Bits1x8", "bits2x4": "Bits2x4",
    "bits4x2": "Bits4x2", "bits8": "Bits8", "bits16": "Bits16", "float8_e5m2": "Float8_e5m2",
    "float8_e4m3fn": "Float8_e4m3fn", "float8_e5m2fnuz": "Float8_e5m2fnuz", "float8_e4m3fnuz": "Float8_e4m3fnuz",
    "float8_e8m0fnu": "Float8_e8m0fnu", "float4_e2m1fn_x2": "Float4_e2m1fn_x2", "uint16": "UInt16",
    "uint32": "UInt32", "uint64": "UInt64",
    **{f"int{n}": f"Int{n}" for n in range(1, 8)}, **{f"uint{n}": f"UInt{n}" for n in range(1, 8)},
}


def scalar_type(dtype: str) -> str:
    """`Long` for torch.int64 (or torch.long): the ScalarType enumerator of a torch dtype's name."""
    name = dtype.removeprefix("torch.")
    return _SCALAR_TYPES[_DTYPE_ALIASES.get(name, name)]


def cpp_metadata(source: str) -> str:
    """A checked shape, strides or dtype of `fake` (metadata.parse_metadata's Python source) as C++ over
    the host function's arguments and the helpers of csrc/custom.h: a shape is a `Shape` (a vector of
    int64_t), a size an int64_t, a dtype a ScalarType. Sizes are never negative, so // is C++'s /."""
    return _MetadataCpp().emit(ast.parse(source, mode="eval").body)[0]


class _MetadataCpp:
    """Each emit gives (code, precedence, kind), the kind one of 'shape', 'int' and 'dtype'."""

    def emit(self, node: ast.AST) -> tuple[str, int, str]:
        return getattr(self, "emit_" + type(node).__name__)(node)

    def sub(self, node: ast.AST, prec: int) -> tuple[str, str]:
        code, own, kind = self.emit(node)
        return (code if own >= prec else f"({code})"), kind

    def emit_Constant(self, node: ast.Constant) -> tuple[str, int, str]:
        return str(node.value), _ATOM, "int"

    def emit_Name(self, node: ast.Name) -> tuple[str, int, str]:
        return node.id, _ATOM, "int"  # an int argument (an int64_t)

    def emit_Attribute(self, node: ast.Attribute) -> tuple[str, int, str]:
        if node.value.id == "torch":
            return f"ScalarType::{scalar_type(node.attr)}", _ATOM, "dtype"
        if node.attr == "dtype":
            return f"{node.value.id}.scalar_type()", _ATOM, "dtype"
        return f"shape_of({node.value.id})", _ATOM, "shape"  # .shape (.device has no C++ use in a shape)

    def emit_Subscript(self, node: ast.Subscript) -> tuple[str, int, str]:
        tensor = node.value.value.id  # the checker allows only x.shape[...]
        index = node.slice
        if not isinstance(index, ast.Slice):
            return f"{tensor}.size({self.sub(index, 0)[0]})", _ATOM, "int"  # size() counts a negative index from the end
        bounds = [self.sub(part, 0)[0] if part is not None else "std::nullopt" for part in (index.lower, index.upper)]
        step = [self.sub(index.step, 0)[0]] if index.step is not None else []
        return f"shape_slice({', '.join([f'shape_of({tensor})', *bounds, *step])})", _ATOM, "shape"

    def emit_Tuple(self, node: ast.Tuple) -> tuple[str, int, str]:
        return f"Shape{{{', '.join(self.sub(e, 0)[0] for e in node.elts)}}}", _ATOM, "shape"

    def emit_Call(self, node: ast.Call) -> tuple[str, int, str]:
        if isinstance(node.func, ast.Name):  # tuple(shape): an int[] argument (metadata._AsTuples)
            return f"list_shape({node.args[0].id})", _ATOM, "shape"
        tensor, method = node.func.value.id, node.func.attr
        if not node.args and method in ("size", "stride"):
            return f"{'shape' if method == 'size' else 'strides'}_of({tensor})", _ATOM, "shape"
        arguments = ", ".join(self.sub(a, 0)[0] for a in node.args)
        return f"{tensor}.{method}({arguments})", _ATOM, "int"  # dim(), numel(), size(i), stride(i)

    def emit_UnaryOp(self, node: ast.UnaryOp) -> tuple[str, int, str]:
        code, kind = self.sub(node.operand, _PREC["unary"] + 1)
        return f"-{code}", _PREC["unary"], kind

    def emit_BinOp(self, node: ast.BinOp) -> tuple[str, int, str]:
        sym = OP_SYMBOLS[type(node.op)]
        prec = _PREC["*" if sym == "//" else sym]
        (left, left_kind), (right, right_kind) = self.sub(node.left, prec), self.sub(node.right, prec + 1)
        if left_kind == right_kind == "shape":  # tuples concatenate
            return f"concat({self.sub(node.left, 0)[0]}, {self.sub(node.right, 0)[0]})", _ATOM, "shape"
        if "shape" in (left_kind, right_kind):  # a tuple times an int repeats it
            shape, times = (node.left, node.right) if left_kind == "shape" else (node.right, node.left)
            return f"repeat({self.sub(shape, 0)[0]}, {self.sub(times, 0)[0]})", _ATOM, "shape"
        return f"{left} {'/' if sym == '//' else sym} {right}", prec, "int"
