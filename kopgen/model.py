"""Resolve a checked spec tree into the frozen model that the templates print.

Everything a template needs is computed here (argument lists, kernels per device,
what backward saves and under which condition), so templates only print.
"""

from __future__ import annotations

import ast
import dataclasses
import errno
import itertools
import keyword
import re
import textwrap
import sys
from dataclasses import dataclass
from functools import cached_property

from packaging.version import InvalidVersion, Version

from . import __version__
from .errors import Diagnostics, Position
from .expr import ExprError, Formula, FormulaContext, Pointwise, parse_formula, parse_metadata, parse_pointwise
from .loader import Mapping, Node, Scalar, Sequence, plain
from .schema import Argument, FunctionSchema, SchemaError, parse_schema

BUILTIN_DEFAULTS = {
    "registration": "custom_op",
    "backends": {"cpu": "triton", "cuda": "triton"},
    "dtypes": ["float32"],
}
# Routes and kernels this version of kopgen generates; the SPEC lists more.
AVAILABLE_ROUTES = ("custom_op", "library", "triton_op", "torch_library", "stable_abi")
PYTHON_ROUTES = ("custom_op", "library", "triton_op")
COMPILED_ROUTES = ("torch_library", "stable_abi")
PYTHON_KERNELS = ("triton", "python")
COMPILED_KERNELS = ("cpp", "cuda")
# C++ types of the scalar arguments, as the host functions take them.
CPP_SCALAR_TYPES = {"float": "double", "int": "int64_t", "bool": "bool"}
DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA"}
NON_DIFFERENTIABLE = "non_differentiable"
# Functions whose real domain is x > 0: their ops are tested on positive inputs.
POSITIVE_DOMAIN = frozenset({"log", "log1p", "sqrt", "rsqrt", "pow"})
# Scalar values the generated tests pass; exactly representable in every float dtype.
SAMPLE_SCALARS = {"float": "1.25", "int": "3", "bool": "True"}
DEFAULT_SHAPE = (8, 6)
# Names the generated code uses beside the op's arguments (locals of launchers, kernels,
# references and autograd functions, and the modules they import).
RESERVED_NAMES = frozenset(
    {
        *("ctx", "grad", "grads", "result", "results", "inputs", "output", "self", "expected", "dtype", "out"),
        *("torch", "tl", "triton", "math", "Tensor", "reference", "wrap_triton"),
        *("kernel", "grid", "n_elements", "compute_dtype", "offsets", "mask", "BLOCK_SIZE", "COMPUTE_DTYPE"),
        *("shape", "n_rows", "n_cols", "rows", "cols", "row_mask", "total", "values"),
        *("block_rows", "block_cols", "BLOCK_ROWS", "BLOCK_COLS", "COL_BLOCKS", "block"),
    }
)
RESERVED_PATTERN = re.compile(r"^(_.*|out\d+(_.*)?|grad_.*|.*_ptr|.*_shape|.*_dense|.*_kernels)$")
# Names the generated C++ and CUDA code uses (locals and helpers of csrc/), which arguments
# of compiled ops must not shadow, and the keywords of C++, which no C++ name may be.
CPP_RESERVED_NAMES = frozenset(
    {
        *("n", "i", "k", "v", "m", "tile", "vectors", "shape", "error", "guard", "stream", "zero", "dtype"),
        *("rows", "cols", "row", "col", "total", "partial", "width", "out_shape"),
        *("scalar_t", "acc_t", "compute_t", "Compute", "V", "VEC", "Vec", "Tensor", "ScalarType", "Half", "BFloat16"),
        *("data", "mutable_data", "check", "check_written", "check_launch", "dense", "new_empty", "write_back"),
        *("dispatch_floating", "broadcast_shape", "sizes_of", "shape_text", "to_compute", "from_compute"),
        *("aligned", "blocks_for", "kThreads", "kMaxBlocks", "kernel_dtype", "current_stream", "Dtype", "std", "cuda"),
    }
)
CPP_RESERVED_PATTERN = re.compile(r"^(.*_vec)$")
CPP_KEYWORDS = frozenset(
    (
        "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch", "char",
        "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr", "constinit",
        "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype", "default", "delete", "do", "double",
        "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto", "if",
        "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq", "nullptr", "operator", "or",
        "or_eq", "private", "protected", "public", "register", "reinterpret_cast", "requires", "return", "short",
        "signed", "sizeof", "static", "static_assert", "static_cast", "struct", "switch", "template", "this",
        "thread_local", "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using", "virtual",
        "void", "volatile", "wchar_t", "while", "xor", "xor_eq",
    )
)
# Macros and types of the C and C++ standard libraries (and a few common ones) that the
# headers of the generated C++/CUDA code bring in: an op, argument or namespace of that name
# is expanded or shadows a type there, and the code does not compile.
C_STD_NAMES = frozenset(
    {
        *("errno", "EOF", "NULL", "BUFSIZ", "FILENAME_MAX", "FOPEN_MAX", "TMP_MAX", "L_tmpnam", "SEEK_SET", "SEEK_CUR"),
        *("SEEK_END", "stdin", "stdout", "stderr", "FILE", "fpos_t", "assert", "offsetof", "setjmp", "jmp_buf"),
        *("va_list", "va_start", "va_arg", "va_end", "va_copy", "INFINITY", "NAN", "HUGE_VAL", "HUGE_VALF", "HUGE_VALL"),
        *("FP_NAN", "FP_INFINITE", "FP_ZERO", "FP_SUBNORMAL", "FP_NORMAL", "FP_ILOGB0", "FP_ILOGBNAN", "FP_FAST_FMA"),
        *("MATH_ERRNO", "MATH_ERREXCEPT", "math_errhandling", "EXIT_SUCCESS", "EXIT_FAILURE", "RAND_MAX", "MB_CUR_MAX"),
        *("CHAR_BIT", "MB_LEN_MAX", "CLOCKS_PER_SEC", "TIME_UTC", "LC_ALL", "LC_NUMERIC", "WEOF", "TRUE", "FALSE"),
        *("size_t", "ssize_t", "ptrdiff_t", "max_align_t", "nullptr_t", "intmax_t", "uintmax_t", "intptr_t", "uintptr_t"),
        *("wint_t", "float_t", "double_t", "div_t", "ldiv_t", "lldiv_t", "clock_t", "time_t", "sig_atomic_t", "off_t"),
        *("mbstate_t", "unix", "linux", "i386"),
        *errno.errorcode.values(),  # EDOM, ERANGE, EINVAL, ...
    }
)
C_STD_PATTERN = re.compile(
    r"^(u?int(_least|_fast)?\d+_t|U?INT\d*_C|U?INTMAX_C|M_\w+|SIG\w*"
    r"|(FLT|DBL|LDBL|DECIMAL|S?CHAR|UCHAR|U?SHRT|U?INT|U?LONG|U?LLONG|U?INT\d+|U?INT_LEAST\d+|U?INT_FAST\d+"
    r"|U?INTMAX|U?INTPTR|PTRDIFF|SIZE|SIG_ATOMIC|WCHAR|WINT)_\w+)$"
)
MAX_NAME_LENGTH = 64  # package, namespace, op and argument names: well before the file system's limit
# Modules a package must not be named after: the standard library's and those the generated code,
# its tests and its build import (the package would shadow them, or import itself).
SHADOWED_MODULES = frozenset(sys.stdlib_module_names) | frozenset(
    {
        *("torch", "torchgen", "functorch", "triton", "numpy", "pytest", "setuptools", "pkg_resources", "hypothesis"),
        *("sympy", "mpmath", "networkx", "jinja2", "markupsafe", "filelock", "fsspec", "typing_extensions"),
        *("packaging", "pluggy", "iniconfig", "pygments", "_pytest", "_distutils_hack"),
    }
)
# Namespaces torch keeps for itself: it refuses to define ops in them, or treats their ops as built-in.
RESERVED_NAMESPACES = {
    "aten": "PyTorch's own operators",
    "prim": "reserved by the TorchScript interpreter",
    "prims": "PyTorch's primitive operators",
    "_": "the wildcard namespace of TORCH_LIBRARY_IMPL",
    "higher_order": "PyTorch's higher-order operators",
}
# Op names the generated package uses itself: its modules, and the module-level names of ops.py
# and reference.py, which define a function per op beside them.
OP_RESERVED_NAMES = frozenset(
    {
        *("ops", "reference", "kernels", "_registration", "_support", "_C"),
        *("torch", "math", "triton", "tl", "Tensor", "Sequence", "upcast", "row_sum", "row_mean", "row_max", "row_min"),
    }
)
DUNDER_PATTERN = re.compile(r"^__.*__$")
# Scalar arguments a reduction might be expected to honour; kopgen's reductions are over the last dimension.
REDUCTION_ARGUMENTS = ("dim", "dims", "axis", "keepdim")


@dataclass(frozen=True)
class Dtype:
    """A dtype as each language names it."""

    name: str  # torch: float32
    scalar_type: str  # C++ ScalarType enumerator: Float
    cpp_type: str  # host element type: float, Half
    cuda_type: str  # device element type: float, __half
    cuda_to_float: str = ""  # conversions of the 16-bit types, which compute in float
    cuda_from_float: str = ""


DTYPES = (
    Dtype("float16", "Half", "Half", "__half", "__half2float", "__float2half_rn"),
    Dtype("bfloat16", "BFloat16", "BFloat16", "__nv_bfloat16", "__bfloat162float", "__float2bfloat16_rn"),
    Dtype("float32", "Float", "float", "float"),
    Dtype("float64", "Double", "double", "double"),
)
SCHEMA_MODELINE = "# yaml-language-server: $schema=.kopgen/schema.json"


@dataclass(frozen=True)
class Arg:
    """One schema argument, with what generated code needs to know about it."""

    schema: Argument
    index: int  # position in the schema, which is also its index in ctx.needs_input_grad

    @property
    def name(self) -> str:
        return self.schema.name

    @property
    def kind(self) -> str:
        """'tensor', 'optional' (Tensor?), 'float', 'int', 'bool' or 'other' (what the pointwise language may use)."""
        text = str(self.schema.type)
        if text == "Tensor":
            return "tensor"
        return {"Tensor?": "optional", "float": "float", "int": "int", "SymInt": "int", "bool": "bool"}.get(text, "other")

    @property
    def is_tensor(self) -> bool:
        """A Tensor input, required or optional."""
        return self.kind in ("tensor", "optional")

    @property
    def is_optional(self) -> bool:
        """A `Tensor?`: the op also runs without it (None), where present(name) is false."""
        return self.kind == "optional"

    def cpp_read(self, value: str) -> str:
        """How a C++/CUDA kernel reads this Tensor's element `value` into the compute type."""
        return f"has_{self.name} ? static_cast<acc_t>({value}) : acc_t(0)" if self.is_optional else value

    @property
    def sample_value(self) -> str:
        return SAMPLE_SCALARS[self.kind]

    @property
    def is_mutated(self) -> bool:
        return self.schema.is_mutated

    @property
    def pointer(self) -> str:
        """The kernel parameter through which a Tensor is read (and written, if mutated)."""
        return f"{self.name}_ptr"


@dataclass(frozen=True)
class Saved:
    """A value that setup_context keeps for backward, and when it is needed."""

    name: str  # its name inside backward (`b`, `result`)
    source: str  # how setup_context reaches it (`b`, `output`, `output[1]`)
    needed_by: tuple[int, ...]  # indices of the inputs whose gradient formula reads it
    optional: bool = False  # a Tensor? argument, which may be None


@dataclass(frozen=True)
class Gradient:
    arg: Arg
    formula: Formula | None  # None: declared non_differentiable


@dataclass(frozen=True)
class Backward:
    gradients: tuple[Gradient, ...]  # one per Tensor argument, in schema order
    saved_tensors: tuple[Saved, ...]  # saved with ctx.save_for_backward
    saved_metadata: tuple[Saved, ...]  # tensors read only through .shape, .dtype, ...
    scalars: tuple[str, ...]  # non-Tensor arguments the formulas read
    num_outputs: int
    arg_names: tuple[str, ...]  # the positional arguments: setup_context's `inputs`
    differentiable_twice: bool
    keyword_only: tuple[str, ...] = ()  # keyword-only arguments: its `keyword_only_inputs`
    droppable_inputs: bool = False  # an optional Tensor defaults to None, which the dispatcher may drop

    def gradient_for(self, arg: Arg) -> Gradient | None:
        return next((g for g in self.gradients if g.arg == arg), None)


@dataclass(frozen=True)
class Kernel:
    device: str  # 'cpu' or 'cuda'
    language: str  # 'triton', 'python', 'cpp' or 'cuda'

    @property
    def dispatch_key(self) -> str:
        return DISPATCH_KEYS[self.device]

    @property
    def is_compiled(self) -> bool:
        return self.language in COMPILED_KERNELS


@dataclass(frozen=True)
class Reduction:
    """A reduction over the last dimension, as each language writes its pieces."""

    kind: str  # sum, mean, max or min

    @property
    def identity_cpp(self) -> str:
        return {
            "max": "-std::numeric_limits<acc_t>::infinity()",
            "min": "std::numeric_limits<acc_t>::infinity()",
        }.get(self.kind, "acc_t(0)")

    def combine_cpp(self, total: str, value: str) -> str:
        if self.kind in ("max", "min"):
            return f"std::{self.kind}({total}, {value})"
        return f"{total} + {value}"

    @property
    def is_mean(self) -> bool:
        return self.kind == "mean"


@dataclass(frozen=True)
class Custom:
    """A `kernel: custom` op: the user writes the kernel; the spec gives the oracle and the outputs' metadata."""

    reference: Formula  # PyTorch over the arguments: the test oracle
    outputs: tuple[tuple[str, str], ...]  # (shape, dtype) as Python source, per returned Tensor


@dataclass(frozen=True)
class KernelTensor:
    """A Tensor a kernel touches, and what each launcher passes for it."""

    name: str  # the argument or output it stands for
    python: str  # the dense tensor the Python launcher passes
    cpp: str  # the dense tensor the C++ host passes (inputs get `_dense` locals there)
    read: bool
    written: bool
    optional: bool = False  # a Tensor? input: None (a null pointer in C++) when not given

    @property
    def pointer(self) -> str:
        return f"{self.name}_ptr"

    @property
    def host_data(self) -> str:
        """The typed pointer the C++ host passes to a CPU kernel: `data<scalar_t>(a_dense)`."""
        accessor = "mutable_data" if self.written else "data"
        return self._unless_absent(f"{accessor}<scalar_t>({'*' if self.optional else ''}{self.cpp})")

    @property
    def host_data_ptr(self) -> str:
        """The untyped pointer the C++ host passes to a CUDA launcher: `a_dense.const_data_ptr()`."""
        method = "mutable_data_ptr" if self.written else "const_data_ptr"
        return self._unless_absent(f"{self.cpp}{'->' if self.optional else '.'}{method}()")

    def _unless_absent(self, pointer: str) -> str:
        """`pointer`, or nullptr where an optional Tensor was not given."""
        return f"{self.cpp} ? {pointer} : nullptr" if self.optional else pointer

    @property
    def vector(self) -> str:
        """The CUDA kernel's local holding this tensor's 16-byte vector."""
        return f"{self.name}_vec"


@dataclass(frozen=True)
class Write:
    """One tensor a compute op writes: a returned Tensor, or a mutated argument."""

    expr: Pointwise
    name: str  # `out`, `out0`, ... for returns; the argument's name for a mutated argument
    arg: Arg | None = None  # the mutated argument

    @property
    def pointer(self) -> str:
        return f"{self.name}_ptr"

    @property
    def buffer(self) -> str:
        """The dense tensor the kernel writes: a returned output itself, a copy of a strided argument."""
        return self.name if self.arg is None else f"{self.name}_dense"


@dataclass(frozen=True)
class Sample:
    """One input set for the generated tests: a label and the Python source of each argument."""

    label: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Op:
    name: str
    namespace: str
    schema: FunctionSchema
    doc: str
    args: tuple[Arg, ...]
    writes: tuple[Write, ...]  # one per returned Tensor, or one per mutated argument
    registration: str
    kernels: tuple[Kernel, ...]  # sorted by device
    dtypes: tuple[str, ...]
    tags: tuple[str, ...]
    shapes: tuple[dict[str, tuple[int, ...]], ...]  # the "normal" test shapes, per Tensor argument
    atol: float | None
    rtol: float | None
    backward: Backward | None
    reduction: Reduction | None = None  # set for `reduce` ops
    custom: Custom | None = None  # set for `kernel: custom` ops
    stem: str = ""  # the op in generated names (`scale` for `scale_`), unique in its package; see _with_stems

    @property
    def qualname(self) -> str:
        return f"{self.namespace}::{self.name}"

    @property
    def schema_text(self) -> str:
        """The schema as Library.define takes it: without the namespace."""
        return str(self.schema)

    @property
    def schema_signature(self) -> str:
        """The schema without its name, as custom_op(schema=...) takes it."""
        return str(self.schema)[len(self.name) :]

    @property
    def tensor_args(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.is_tensor)

    @property
    def lead(self) -> Arg:
        """The first required Tensor argument: outputs take its dtype and device, tests vary it first."""
        return next(a for a in self.tensor_args if not a.is_optional)

    @property
    def optional_args(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.is_optional)

    @property
    def required_tensor_names(self) -> str:
        return ", ".join(a.name for a in self.tensor_args if not a.is_optional)

    @property
    def tested_optionals(self) -> tuple[Arg, ...]:
        """The optional Tensors whose presence the kernels test: a flag each (HAS_x in Triton, has_x in C++)."""
        tested = {name for w in self.writes for name in w.expr.tested}
        return tuple(a for a in self.optional_args if a.name in tested)

    @property
    def outputs(self) -> tuple[Pointwise, ...]:
        """The expressions of the returned Tensors (none for a mutating op)."""
        return tuple(w.expr for w in self.writes if w.arg is None)

    @property
    def mutated_writes(self) -> tuple[Write, ...]:
        return tuple(w for w in self.writes if w.arg is not None)

    @property
    def is_mutating(self) -> bool:
        return bool(self.mutated_writes)

    @property
    def read_args(self) -> tuple[Arg, ...]:
        """Tensor arguments the expressions read, in schema order."""
        used = {name for w in self.writes for name in w.expr.names}
        return tuple(a for a in self.tensor_args if a.name in used)

    @property
    def input_args(self) -> tuple[Arg, ...]:
        """Tensor arguments that are only read (broadcast and made dense by the launchers)."""
        return tuple(a for a in self.read_args if not a.is_mutated)

    @property
    def written_indices(self) -> str:
        """The argument indices a mutating op writes, as a Python tuple."""
        return repr(tuple(w.arg.index for w in self.mutated_writes))

    @property
    def kernel_tensors(self) -> tuple[KernelTensor, ...]:
        """The Tensors a kernel reads or writes: the arguments it touches, then the returned outputs."""
        written = {w.arg.name: w for w in self.mutated_writes}
        read = {a.name for a in self.read_args}
        tensors = []
        for arg in self.tensor_args:
            if arg.name in written:
                buffer = written[arg.name].buffer
                tensors.append(KernelTensor(arg.name, buffer, buffer, arg.name in read, True))
            elif arg.name in read:
                tensors.append(KernelTensor(arg.name, arg.name, f"{arg.name}_dense", True, False, arg.is_optional))
        tensors += [KernelTensor(w.name, w.name, w.name, False, True) for w in self.writes if w.arg is None]
        return tuple(tensors)

    @property
    def positional_count(self) -> int:
        return sum(1 for a in self.args if not a.schema.kwarg_only)

    @property
    def keyword_only_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.schema.kwarg_only)

    @property
    def tensor_arg_names(self) -> str:
        return ", ".join(a.name for a in self.tensor_args)

    @property
    def num_outputs(self) -> int:
        return len(self.custom.outputs) if self.custom else len(self.outputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        if self.custom:
            return ("out",) if self.num_outputs == 1 else tuple(f"out{i}" for i in range(self.num_outputs))
        return tuple(w.name for w in self.writes if w.arg is None)

    @property
    def first_written(self) -> str:
        """The dense tensor whose shape, dtype and device every kernel launch follows."""
        return self.writes[0].buffer

    @property
    def kernel_languages(self) -> tuple[str, ...]:
        return tuple(sorted({k.language for k in self.kernels}))

    def devices_for(self, language: str) -> tuple[str, ...]:
        return tuple(k.device for k in self.kernels if k.language == language)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(k.device for k in self.kernels)

    @property
    def uses_triton(self) -> bool:
        return "triton" in self.kernel_languages

    @property
    def kernel_parameters(self) -> tuple[str, ...]:
        """Kernel parameters (Triton, and CUDA by name): tensor pointers, then the scalars the expressions read."""
        return tuple([t.pointer for t in self.kernel_tensors] + [a.name for a in self.kernel_scalars])

    @property
    def is_triton_op(self) -> bool:
        return self.registration == "triton_op"

    @property
    def cpu_kernel(self) -> Kernel | None:
        return next((k for k in self.kernels if k.device == "cpu"), None)

    @property
    def cpp_tags(self) -> str:
        return ", ".join(f"at::Tag::{tag}" for tag in self.tags)

    @property
    def tags_set_literal(self) -> str:
        return "{" + ", ".join(f"torch.Tag.{tag}" for tag in self.tags) + "}"

    @property
    def uses_interpreter(self) -> bool:
        return "cpu" in self.devices_for("triton")

    @property
    def uses_compiled_triton(self) -> bool:
        return "cuda" in self.devices_for("triton")

    @property
    def kernel_scalars(self) -> tuple[Arg, ...]:
        """Non-Tensor arguments the kernel reads (passed to it as scalars)."""
        used = {name for w in self.writes for name in w.expr.names}
        return tuple(a for a in self.args if not a.is_tensor and a.name in used)

    @property
    def positive_inputs(self) -> bool:
        """Whether tests draw inputs from (0.5, 1.5): the expressions use log, sqrt, ..."""
        called = set()
        for write in self.writes:
            for node in ast.walk(ast.parse(write.expr.text, mode="eval")):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    called.add(node.func.id)
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
                    called.add("pow")
        return bool(called & POSITIVE_DOMAIN)

    @cached_property
    def samples(self) -> tuple[Sample, ...]:
        """normal, empty, non-contiguous and broadcast inputs (where the op has such)."""
        samples = []
        for i, shapes in enumerate(self.shapes):
            samples.append(self._sample(self._normal_label(i), lambda a, shapes=shapes: _make(shapes[a.name])))
        first = self.shapes[0]
        rank = max(len(shape) for shape in first.values())
        # No rows: the leading dimension of the full-rank arguments is 0; the others broadcast.
        samples.append(
            self._sample("empty", lambda a: _make((0,) + first[a.name][1:] if len(first[a.name]) == rank else first[a.name]))
        )
        if self.reduction and len(first[self.lead.name]) > 1:
            samples.append(self._sample("empty_rows", lambda a: _make(first[a.name][:-1] + (0,))))
        samples.append(self._sample("noncontiguous", lambda a: _strided(first[a.name])))
        # Inputs after the first broadcast from their last dimension; written arguments
        # always have the full shape.
        lead = self.lead
        if first[lead.name] and any(a is not lead and not a.is_mutated for a in self.tensor_args):
            samples.append(
                self._sample(
                    "broadcast",
                    lambda a: _make(first[a.name] if a is lead or a.is_mutated else first[a.name][-1:]),
                )
            )
        # Each optional Tensor left out (None), then all of them.
        for absent in [[a] for a in self.optional_args] + ([self.optional_args] if len(self.optional_args) > 1 else []):
            label = "without_" + ("optionals" if len(absent) > 1 else absent[0].name)
            samples.append(self._sample(label, lambda a, absent=absent: "None" if a in absent else _make(first[a.name])))
        return tuple(samples)

    @property
    def normal_sample(self) -> str:
        """The sample of the spec's first test shapes: what the tests that take one sample run on."""
        return self._normal_label(0)

    def _normal_label(self, index: int) -> str:
        return "normal" if len(self.shapes) == 1 else f"normal{index}"

    @property
    def samples_with_resized(self) -> tuple[Sample, ...]:
        """The samples, plus one of other sizes that dynamic-shape compiles run on: the first shapes with every
        size n > 1 grown to n + 2. Size-1 dimensions stay 1 and equal sizes stay equal, so inputs that broadcast
        against each other still do (and a custom kernel's inputs keep the sizes they share)."""
        first = self.shapes[0]
        resized = self._sample("resized", lambda a: _make(tuple(n if n == 1 else n + 2 for n in first[a.name])))
        return self.samples + (resized,)

    @property
    def saved_tensor_counts(self) -> dict[tuple[int, ...], int]:
        """For each set of differentiable inputs that require grad: how many tensors backward saves."""
        indices = [a.index for a in self.gradient_args]
        counts = {}
        for size in range(1, len(indices) + 1):
            for wanted in itertools.combinations(indices, size):
                needed = [s for s in self.backward.saved_tensors if set(s.needed_by) & set(wanted)]
                counts[wanted] = len(needed)
        return counts

    @property
    def has_gradients(self) -> bool:
        """Whether some input has a formula (all may be non_differentiable)."""
        return self.backward is not None and any(g.formula for g in self.backward.gradients)

    @property
    def gradient_args(self) -> tuple[Arg, ...]:
        """Tensors the tests ask gradients of: those with a formula (all, for an op without backward)."""
        if self.is_mutating:
            return ()
        if self.backward is None:
            return self.tensor_args
        return tuple(g.arg for g in self.backward.gradients if g.formula)

    def sample_arguments(self, sample: Sample) -> str:
        """Python source of a sample's arguments; differentiable tensors made leaves."""
        parts = [
            f"leaf({text})" if arg in self.gradient_args and text != "None" else text
            for arg, text in zip(self.args, sample.args)
        ]
        return ", ".join(parts) + ("," if len(parts) == 1 else "")

    @property
    def export_call(self) -> str:
        """The op called in an exported module: Tensors as inputs, scalars as constants."""
        return ", ".join(
            (f"{a.name}={value}" if a.schema.kwarg_only else value)
            for a in self.args
            for value in [a.name if a.is_tensor else a.sample_value]
        )

    # -- compiled routes: what the C++ and CUDA templates print

    @property
    def is_compiled(self) -> bool:
        return self.registration in COMPILED_ROUTES

    @property
    def python_kernels(self) -> tuple[Kernel, ...]:
        return tuple(k for k in self.kernels if not k.is_compiled)

    def has_kernel(self, device: str, language: str) -> bool:
        return Kernel(device, language) in self.kernels

    @property
    def cpp_parameters(self) -> str:
        """Parameters of the C++ host functions: Tensors by const reference (by value on the stable ABI)."""
        by_value = self.registration == "stable_abi"
        types = {
            "tensor": "Tensor" if by_value else "const Tensor&",
            "optional": "std::optional<Tensor>" if by_value else "const std::optional<Tensor>&",
        }
        return ", ".join(f"{types.get(a.kind) or CPP_SCALAR_TYPES[a.kind]} {a.name}" for a in self.args)

    @property
    def cpp_return_type(self) -> str:
        if self.is_mutating:
            return "void"
        if len(self.outputs) == 1:
            return "Tensor"
        return f"std::tuple<{', '.join(['Tensor'] * len(self.outputs))}>"

    @property
    def cpp_returned(self) -> str:
        """The return statement's value: `out`, or `{out0, out1}`."""
        names = self.output_names
        return names[0] if len(names) == 1 else "{" + ", ".join(names) + "}"

    @property
    def cpp_kernel_parameters(self) -> str:
        """Parameters of the per-element kernels (CPU and CUDA), inside `template <typename scalar_t>`."""
        parts = [f"{'' if t.written else 'const '}scalar_t* __restrict__ {t.pointer}" for t in self.kernel_tensors]
        parts += [f"{'bool' if a.kind == 'bool' else 'compute_t<scalar_t>'} {a.name}" for a in self.kernel_scalars]
        return ", ".join(parts + self._presence_parameters)

    @property
    def cpp_kernel_arguments(self) -> str:
        """The host's call of the CPU kernel, inside a dtype dispatch that defines scalar_t and acc_t."""
        parts = [t.host_data for t in self.kernel_tensors]
        return ", ".join(parts + self._scalars_in_compute_type + self._presence_tests)

    @property
    def _presence_tests(self) -> list[str]:
        """The host's has_x flags: whether each optional Tensor the kernel tests was given."""
        return [f"{a.name}.has_value()" for a in self.tested_optionals]

    @property
    def _scalars_in_compute_type(self) -> list[str]:
        return [a.name if a.kind == "bool" else f"static_cast<acc_t>({a.name})" for a in self.kernel_scalars]

    @property
    def cpp_size_parameters(self) -> str:
        """How many elements a kernel covers: n for pointwise ops, rows and cols for reductions."""
        return "int64_t rows, int64_t cols" if self.reduction else "int64_t n"

    @property
    def cpp_size_arguments(self) -> str:
        return "rows, cols" if self.reduction else "n"

    @property
    def kernel_casts_scalars(self) -> bool:
        """Whether the kernel call converts scalars to the compute type (bools pass as they are)."""
        return any(a.kind != "bool" for a in self.kernel_scalars)

    @property
    def cuda_launcher_parameters(self) -> str:
        """Parameters of the CUDA launcher: untyped pointers (the .cu file needs no torch headers)."""
        parts = [f"{'' if t.written else 'const '}void* {t.pointer}" for t in self.kernel_tensors]
        parts += [f"{CPP_SCALAR_TYPES[a.kind]} {a.name}" for a in self.kernel_scalars]
        return ", ".join(parts + self._presence_parameters)

    @property
    def cuda_launcher_arguments(self) -> str:
        """The C++ host's call of the CUDA launcher."""
        parts = [t.host_data_ptr for t in self.kernel_tensors]
        return ", ".join(parts + [a.name for a in self.kernel_scalars] + self._presence_tests)

    @property
    def cuda_kernel_arguments(self) -> str:
        """The launcher's call of the CUDA kernel: typed pointers, scalars in the compute type."""
        parts = [f"static_cast<{'' if t.written else 'const '}scalar_t*>({t.pointer})" for t in self.kernel_tensors]
        return ", ".join(parts + self._scalars_in_compute_type + self._presence_flags)

    @property
    def _presence_flags(self) -> list[str]:
        return [f"has_{a.name}" for a in self.tested_optionals]

    @property
    def _presence_parameters(self) -> list[str]:
        return [f"bool {flag}" for flag in self._presence_flags]

    @property
    def cuda_alignment_condition(self) -> str:
        return " && ".join(f"aligned({t.pointer})" for t in self.kernel_tensors)

    @property
    def cuda_vector_arguments(self) -> str:
        """The element function called on the vectors' registers."""
        return ", ".join([f"{t.vector}.v" for t in self.kernel_tensors] + [a.name for a in self.kernel_scalars] + self._presence_flags)

    @property
    def kernel_parameter_names(self) -> str:
        """`a_ptr, b_ptr, out_ptr, c`: the C++/CUDA kernel parameters passed on by name (with has_x flags)."""
        return ", ".join([*self.kernel_parameters, *self._presence_flags])

    @property
    def tolerances_literal(self) -> str:
        """assert_close's keyword arguments: its per-dtype defaults unless the spec sets tolerances."""
        if self.atol is None and self.rtol is None:
            return "{}"
        return repr({"atol": self.atol or 0.0, "rtol": self.rtol or 0.0})

    def _sample(self, label, make_tensor) -> Sample:
        return Sample(label, tuple(make_tensor(a) if a.is_tensor else a.sample_value for a in self.args))


def _docstring_body(text: str, indent: str) -> str:
    """`text` made safe inside \"\"\"...\"\"\": no escape sequences, no closing quotes; lines indented."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return f"\n{indent}".join(text.splitlines())


def _make(shape: tuple[int, ...]) -> str:
    return f"make({', '.join(map(str, shape))})" if shape else "make()"


def _strided(shape: tuple[int, ...]) -> str:
    """A non-contiguous tensor of `shape`: transposed (2-d and more) or every other element."""
    if len(shape) >= 2:
        swapped = shape[:-2] + (shape[-1], shape[-2])
        return f"{_make(swapped)}.transpose(-1, -2)"
    if len(shape) == 1:
        return f"{_make((shape[0] * 2,))}[::2]"
    return _make(shape)


@dataclass(frozen=True)
class Package:
    name: str
    namespace: str
    version: str
    description: str
    ops: tuple[Op, ...]
    spec_text: str  # the spec as the user wrote it; the generated repo keeps it as kopgen.yaml
    kopgen_version: str = __version__

    @property
    def needs_triton(self) -> bool:
        return any("triton" in op.kernel_languages for op in self.ops)

    @property
    def needs_interpreter(self) -> bool:
        return any(op.uses_interpreter for op in self.ops)

    @property
    def upstream_warnings(self) -> tuple[tuple[str, str], ...]:
        """(why as comment lines, pytest filter) of each upstream warning the generated suite cannot avoid."""
        warnings = [
            ("torch.utils.mkldnn, which Inductor imports on its first compile, defines its modules with the "
             "deprecated torch.jit.script_method: a DeprecationWarning for each of their methods.",
             r"ignore:`torch\.jit\.script_method` is deprecated:DeprecationWarning:torch\.jit\._script"),
            ("Inductor suggests TF32 matmuls when it compiles the nn.Linear of the CUDA-graph test on a GPU "
             "that has them; the test keeps float32's precision.",
             r"ignore:TensorFloat32 tensor cores:UserWarning:torch\._inductor\.compile_fx"),
        ]
        if self.needs_interpreter:
            warnings.append((
                "Triton's interpreter computes masked-out lanes too, in numpy, which warns where they hold "
                "values outside a function's domain (log(0)); the lanes are never stored.",
                r"ignore::RuntimeWarning:triton\.runtime\.interpreter",
            ))
        return tuple((tuple(textwrap.wrap(why, 96)), warning_filter) for why, warning_filter in warnings)

    @property
    def uses_compiled_triton(self) -> bool:
        """Whether some op launches a Triton kernel on CUDA (its launcher then needs _support.device_guard)."""
        return any(op.uses_compiled_triton for op in self.ops)

    @property
    def reductions(self) -> tuple[str, ...]:
        """The kinds of reduction the package's ops use (each gets a reference helper)."""
        return tuple(sorted({op.reduction.kind for op in self.ops if op.reduction}))

    @property
    def has_optional_inputs(self) -> bool:
        """Whether some op takes a `Tensor?`: the shared helpers then skip Nones."""
        return any(op.optional_args for op in self.ops)

    @property
    def has_mutating_ops(self) -> bool:
        return any(op.is_mutating for op in self.ops)

    @property
    def needs_tensor_metadata(self) -> bool:
        return any(op.backward and op.backward.saved_metadata for op in self.ops)

    @property
    def repo_spec_text(self) -> str:
        """The spec as the repo keeps it: headed by a line that points editors at its JSON Schema."""
        if self.spec_text.startswith(SCHEMA_MODELINE):
            return self.spec_text
        return f"{SCHEMA_MODELINE}\n{self.spec_text}"

    @property
    def routes(self) -> tuple[str, ...]:
        return tuple(sorted({op.registration for op in self.ops}))

    @property
    def compiled_ops(self) -> tuple[Op, ...]:
        return tuple(op for op in self.ops if op.is_compiled)

    @property
    def compiled_route(self) -> str | None:
        """torch_library or stable_abi (one per package), None without compiled ops."""
        return self.compiled_ops[0].registration if self.compiled_ops else None

    @property
    def stable_abi(self) -> bool:
        return self.compiled_route == "stable_abi"

    @property
    def cpp_ops(self) -> tuple[Op, ...]:
        """Ops with a C++ CPU kernel."""
        return tuple(op for op in self.ops if op.has_kernel("cpu", "cpp"))

    @property
    def has_cuda_pointwise_ops(self) -> bool:
        """Whether kernels.cu needs the vector helpers of pointwise kernels."""
        return any(not op.reduction for op in self.cuda_ops)

    @property
    def cuda_ops(self) -> tuple[Op, ...]:
        """Ops with a CUDA kernel."""
        return tuple(op for op in self.ops if op.has_kernel("cuda", "cuda"))

    @property
    def compiled_dtypes(self) -> tuple[Dtype, ...]:
        """Every dtype a compiled kernel of the package dispatches on (float64 too where an op has
        gradients: gradcheck runs in float64)."""
        listed = {dtype for op in self.compiled_ops for dtype in op.dtypes}
        if any(op.has_gradients for op in self.compiled_ops):
            listed.add("float64")
        return tuple(d for d in DTYPES if d.name in listed)

# --------------------------------------------------------------------------- resolve


def resolve(root: Mapping, spec_text: str, diagnostics: Diagnostics) -> Package | None:
    """Build the model from a tree that passed check_format; report semantic errors."""
    package = root.get("package").value
    namespace_node = root.get("namespace")
    namespace = namespace_node.value if namespace_node else package
    namespace_at = (namespace_node or root.get("package")).value_position
    _check_package_names(root, namespace, namespace_at, diagnostics)
    defaults = root.get("defaults")
    op_nodes = root.get("ops").items
    names = {}
    mutating = set()
    for node in op_nodes:
        schema_node = node.get("schema")
        name = schema_node.value.split("(", 1)[0].strip()
        names.setdefault(name, schema_node)
        try:  # formulas may not call the ops that write their arguments
            if parse_schema(schema_node.value).mutated_arguments:
                mutating.add(name)
        except SchemaError:
            pass  # reported with the op
    own_ops = frozenset(names)
    ops = []
    seen: dict[str, tuple[str, Position]] = {}  # by the name in lower case: files differ in case only on some systems
    compiled_route = None
    for node in op_nodes:
        resolver = _OpResolver(node, defaults, namespace, own_ops, diagnostics, frozenset(mutating), namespace_at)
        op = resolver.resolve()
        if op is None:
            continue
        if op.registration in COMPILED_ROUTES:
            # One extension per package: its ops are either all TORCH_LIBRARY or all stable ABI.
            compiled_route = compiled_route or op.registration
            if op.registration != compiled_route:
                diagnostics.error(
                    resolver.setting("registration").value_position,
                    f"a package builds one extension: '{op.name}' uses {op.registration} but an earlier op "
                    f"uses {compiled_route}; give all compiled ops one of them",
                )
        first = seen.setdefault(op.name.lower(), (op.name, node.get("schema").position))
        if first[1] != node.get("schema").position:
            other, line = first[0], first[1].line
            diagnostics.error(
                node.get("schema").position,
                f"op '{op.name}' is defined twice (first at line {line})" if other == op.name else
                f"op '{op.name}' differs from op '{other}' (line {line}) only in case: their files "
                "(kernels/, tests/) collide on case-insensitive file systems; rename one",
            )
        ops.append(op)
    _mark_not_twice_differentiable(ops)
    if diagnostics.items:
        return None
    ops = _with_stems(ops)
    return Package(
        name=package,
        namespace=namespace,
        version=_text(root.get("version"), "0.1.0"),
        description=_text(root.get("description"), ""),
        ops=tuple(ops),
        spec_text=spec_text,
    )


def _check_package_names(root: Mapping, namespace: str, namespace_at: Position, diagnostics: Diagnostics) -> None:
    """The package becomes an import name and a folder, the namespace torch.ops.<namespace>, the
    version the distribution's: each must be one that works there."""
    package_node = root.get("package")
    package, at = package_node.value, package_node.value_position
    too_long = f"is too long (at most {MAX_NAME_LENGTH} characters)"
    if len(package) > MAX_NAME_LENGTH:
        diagnostics.error(at, f"package name {too_long}")
    elif keyword.iskeyword(package):  # soft keywords (match, type, _) import fine
        diagnostics.error(at, f"package '{package}' is a Python keyword; `import {package}` would not parse")
    elif DUNDER_PATTERN.match(package):
        diagnostics.error(at, f"package '{package}' is a Python special name (__x__), which Python's import "
                              "machinery gives its own meaning; choose another name")
    elif package in SHADOWED_MODULES:
        diagnostics.error(at, f"package '{package}' would shadow the module '{package}' (of the standard library, "
                              "or one the generated code imports); choose another name")
    explicit = root.get("namespace") is not None
    if len(namespace) > MAX_NAME_LENGTH:
        if explicit:  # else the package's length is reported
            diagnostics.error(namespace_at, f"namespace {too_long}")
    elif keyword.iskeyword(namespace):
        if explicit:
            diagnostics.error(namespace_at, f"namespace '{namespace}' is a Python keyword; torch.ops.{namespace} "
                                            "would not parse")
    elif namespace in RESERVED_NAMESPACES or DUNDER_PATTERN.match(namespace):
        why = RESERVED_NAMESPACES.get(namespace, "a Python special name")
        where = "" if explicit else " (the package name, as the spec sets no namespace)"
        diagnostics.error(namespace_at, f"namespace '{namespace}'{where} is reserved by torch ({why}); "
                                        "choose another `namespace:`")
    version = root.get("version")
    if version is not None:
        try:
            if version.value != version.value.strip():
                raise InvalidVersion(version.value)
            Version(version.value)
        except InvalidVersion:
            diagnostics.error(version.value_position, f"version {version.text!r} is not a version number (PEP 440), "
                                                      "like 0.1.0 or 1.2.0rc1")


def _text(node: Node | None, default: str) -> str:
    # check_format let only real strings through; str() here would turn a stray !!binary into "b'...'"
    return default if node is None else node.value


def _with_stems(ops: list[Op]) -> list[Op]:
    """Each op with the stem of its generated names: its name, less the trailing `_` of an in-place op
    (`scale_cpu_kernel`, not `scale__cpu_kernel`). Where that stem is another op's name or stem (`scale`
    beside `scale_`), `scale_inplace`; where that is taken too, the op's own name, which no other op has."""
    names = {op.name for op in ops}
    taken = set(names)
    stems = {}
    for op in ops:
        base = op.name.rstrip("_")
        if base == op.name or not base:
            stems[op.name] = op.name
            continue
        stem = next((s for s in (base, f"{base}_inplace") if s not in taken), op.name)
        taken.add(stem)
        stems[op.name] = stem
    return [dataclasses.replace(op, stem=stems[op.name]) for op in ops]


def _mark_not_twice_differentiable(ops: list[Op]) -> None:
    """Mark formulas that call an own op without a backward as not twice differentiable."""
    # Done after all ops are resolved, since an op may call one defined later in the file.
    differentiable = {op.name for op in ops if op.backward is not None}
    for i, op in enumerate(ops):
        if op.backward is None:
            continue
        called = {name for g in op.backward.gradients if g.formula for name in g.formula.own_ops_called}
        if called - differentiable:
            backward = dataclasses.replace(op.backward, differentiable_twice=False)
            ops[i] = dataclasses.replace(op, backward=backward)


class _OpResolver:
    """Resolves one op entry; every problem goes to `diagnostics` at its node."""

    def __init__(self, node: Mapping, defaults: Mapping | None, namespace: str, own_ops, diagnostics,
                 mutating_ops: frozenset[str] = frozenset(), namespace_at: Position | None = None):
        self.node = node
        self.defaults = defaults
        self.namespace = namespace
        self.own_ops = own_ops
        self.mutating_ops = mutating_ops  # those of own_ops that write an argument: no formula may call them
        self.namespace_at = namespace_at or node.position  # where the spec sets the namespace
        self.diagnostics = diagnostics
        self.reduction: Reduction | None = None  # set by resolve_reduction
        self.custom: Custom | None = None  # set by resolve_custom

    def setting(self, key: str) -> Node | None:
        """The op's own value for `key`, else the spec's `defaults`."""
        value = self.node.get(key)
        if value is None and self.defaults is not None:
            value = self.defaults.get(key)
        return value

    def error(self, position: Position, message: str) -> None:
        self.diagnostics.error(position, message)

    def expr_errors(self, node: Scalar, error: ExprError) -> None:
        """Every problem found in the expression of `node`."""
        for each in error.errors:
            self.error(_inside(node, each), each.message)

    def resolve(self) -> Op | None:
        errors_before = len(self.diagnostics.items)
        schema_node = self.node.get("schema")
        schema = self.parse_schema(schema_node)
        if schema is None:
            return None
        args = tuple(Arg(a, i) for i, a in enumerate(schema.arguments))
        writes = self.resolve_kind(schema, args)
        registration = self.resolve_registration()
        if registration in COMPILED_ROUTES:
            self.check_cpp_names(schema_node, schema)
            if self.custom:
                self.error(
                    self.setting("registration").value_position,
                    f"`kernel: custom` ops take Python kernels in kopgen {__version__}: use registration custom_op or library",
                )
        if registration == "triton_op":
            self.check_triton_op()
        kernels = self.resolve_backends(registration)
        backward = self.resolve_backward(schema, args)
        shapes, atol, rtol = self.resolve_tests(args)
        if len(self.diagnostics.items) > errors_before:
            return None
        doc = self.setting("doc")
        return Op(
            name=schema.name,
            namespace=self.namespace,
            schema=schema,
            doc=doc.value if doc is not None and doc.value.strip() else f"{self.namespace}::{schema.name}",
            args=args,
            writes=writes,
            registration=registration,
            kernels=kernels,
            dtypes=tuple(plain(self.setting("dtypes")) if self.setting("dtypes") else BUILTIN_DEFAULTS["dtypes"]),
            tags=tuple(plain(self.setting("tags"))) if self.setting("tags") is not None else _default_tags(registration),
            shapes=shapes,
            atol=atol,
            rtol=rtol,
            backward=backward,
            reduction=self.reduction,
            custom=self.custom,
        )

    # -- schema

    def parse_schema(self, node: Scalar) -> FunctionSchema | None:
        """The op's schema; its invalid defaults and names are reported all at once (the schema is
        returned with them, so that the rest of the op is checked too)."""
        problems: list[SchemaError] = []
        try:
            schema = parse_schema(node.value, problems)
        except SchemaError as error:
            problems.append(error)
            schema = None
        for problem in problems:
            self.error(node.value_position.shifted(0, problem.column), problem.message)
        if schema is None:
            return None
        at = node.value_position
        name_at = at.shifted(0, len(node.value) - len(node.value.lstrip()))
        self.check_op_name(schema.name, name_at)
        for arg in schema.arguments:
            name, arg_at = arg.name, at.shifted(0, arg.column)
            if keyword.iskeyword(name) or keyword.issoftkeyword(name):
                self.error(arg_at, f"'{name}' is a Python keyword; ops and arguments become Python names")
            elif len(name) > MAX_NAME_LENGTH:
                self.error(arg_at, f"argument name '{name[:20]}...' is too long ({len(name)} characters, "
                                   f"at most {MAX_NAME_LENGTH})")
            elif name == "out" and arg.is_mutated:
                pass  # `Tensor(a!) out` of out= ops: the generated code uses no local `out` beside it
            elif name in RESERVED_NAMES or RESERVED_PATTERN.match(name):
                self.error(arg_at, f"argument name '{name}' is reserved for the generated code; rename it")
        if schema.namespace is not None:
            self.error(at, f"write the schema without a namespace; it comes from `namespace:` ('{self.namespace}')")
        if schema.overload is not None:
            self.error(at, "overload names are not supported; give the op its own name")
        names = {a.name for a in schema.arguments}
        for arg in schema.arguments:
            flags = {f"has_{arg.name}", f"HAS_{arg.name}"} & names if str(arg.type) == "Tensor?" else set()
            if flags:
                self.error(at, f"argument name '{flags.pop()}' is the kernels' flag for whether '{arg.name}' is given; rename it")
        for arg in schema.arguments:
            if arg.annotation is not None and not arg.annotation.is_write:
                self.error(at, f"argument '{arg.name}' is annotated as an alias; only mutation, `Tensor(a!)`, is allowed")
        for ret in schema.returns:
            if ret.annotation is not None:
                self.error(at, "operators must not return (views of) their inputs: return a new Tensor, or `()` from a mutating op")
            elif str(ret.type) != "Tensor":
                self.error(at, f"ops return Tensors; '{ret.type}' returns are not supported")
        return schema

    def check_op_name(self, name: str, at: Position) -> None:
        """An op names a Python function, a module of kernels/ and a test file beside the generated ones."""
        if keyword.iskeyword(name) or keyword.issoftkeyword(name):
            self.error(at, f"'{name}' is a Python keyword; ops and arguments become Python names")
        elif len(name) > MAX_NAME_LENGTH:
            self.error(at, f"op name '{name[:20]}...' is too long ({len(name)} characters, at most {MAX_NAME_LENGTH})")
        elif DUNDER_PATTERN.match(name):
            self.error(at, f"op name '{name}' is a Python special name (__x__): its module kernels/{name}.py "
                           "would replace or break the package's own; rename the op")
        elif name in OP_RESERVED_NAMES:
            self.error(at, f"op name '{name}' is taken by the generated package (a module of it, or a name "
                           "ops.py and reference.py import); rename the op")

    def check_triton_op(self) -> None:
        """What torch.library.triton_op cannot take: a kernel kopgen does not write, tags."""
        at = self.setting("registration").value_position
        if self.custom:
            self.error(at, "a triton_op launches kopgen's Triton kernel through wrap_triton; "
                           "`kernel: custom` ops take registration custom_op or library")
        tags = self.setting("tags")
        if tags is not None and tags.items:
            self.error(tags.position, "torch.library.triton_op takes no tags; use registration custom_op or library for tagged ops")

    def check_cpp_names(self, node: Scalar, schema: FunctionSchema) -> None:
        """Compiled ops become C++ functions and parameters: no C++ keywords, no generated names."""
        at = node.value_position
        if self.namespace in CPP_KEYWORDS:
            self.error(at, f"namespace '{self.namespace}' is a C++ keyword; compiled ops need another namespace")
        elif self.namespace in C_STD_NAMES or C_STD_PATTERN.match(self.namespace):
            self.error(self.namespace_at, f"namespace '{self.namespace}' is a macro or type of the C/C++ standard "
                                          "library; compiled ops need another namespace")
        named = [(schema.name, at.shifted(0, len(node.value) - len(node.value.lstrip())))]
        named += [(a.name, at.shifted(0, a.column)) for a in schema.arguments]
        for name, name_at in named:
            if name in CPP_KEYWORDS:
                self.error(name_at, f"'{name}' is a C++ keyword; compiled routes turn ops and arguments into C++ names")
            elif name in C_STD_NAMES or C_STD_PATTERN.match(name):
                self.error(name_at, f"'{name}' is a macro or type of the C/C++ standard library; compiled routes "
                                    "turn ops and arguments into C++ names: rename it")
            elif name != schema.name and (name in CPP_RESERVED_NAMES or CPP_RESERVED_PATTERN.match(name)):
                self.error(name_at, f"argument name '{name}' is reserved for the generated C++ code; rename it")
        tags = self.setting("tags")
        if tags is not None and tags.items and self.setting("registration").value == "stable_abi":
            self.error(
                tags.position,
                "stable_abi ops cannot carry tags: the stable ABI of torch 2.10, which kopgen targets, "
                "defines schemas without them",
            )

    # -- kind

    def resolve_kind(self, schema: FunctionSchema, args: tuple[Arg, ...]) -> tuple[Write, ...]:
        kinds = [k for k in ("compute", "reduce", "kernel") if self.node.get(k) is not None]
        if len(kinds) != 1:
            message = "an op needs exactly one of compute, reduce or kernel"
            if kinds:
                message += f"; it has {' and '.join(kinds)}"
            self.error(self.node.position if not kinds else self.node.key_position(kinds[1]), message)
            return ()
        kind = kinds[0]
        at = self.node.get("schema").value_position
        for arg in args:  # each reported; the expressions are checked all the same
            if arg.schema.kwarg_only and arg.is_tensor:
                self.error(
                    at.shifted(0, arg.schema.column),
                    f"keyword-only Tensor arguments are not supported ('{arg.name}'): autograd formulas "
                    "differentiate positional inputs only; make it positional",
                )
            if arg.kind == "other":
                self.error(
                    at.shifted(0, arg.schema.column),
                    f"compute ops take Tensor, Tensor?, float, int and bool arguments; '{arg.name}' is {arg.schema.type}",
                )
        if not any(a.kind == "tensor" for a in args):
            self.error(at, "an op needs a Tensor argument that is not optional: its output takes that Tensor's dtype and device")
            return ()
        if any(a.kind == "other" for a in args):  # the expression languages have no value of that type
            return ()
        if kind == "reduce":
            return self.resolve_reduction(schema, args)
        if kind == "kernel":
            return self.resolve_custom(schema, args)
        node = self.node.get("compute")
        mutated = [a for a in args if a.is_mutated]
        if mutated or isinstance(node, Mapping):
            targets = self.resolve_mutation(schema, node, mutated)
        else:
            expressions = list(node.items) if isinstance(node, Sequence) else [node]
            if len(expressions) != len(schema.returns):
                self.error(
                    node.position,
                    f"compute gives {len(expressions)} expression(s) but the schema returns {len(schema.returns)} Tensor(s)",
                )
                return ()
            names = ["out"] if len(expressions) == 1 else [f"out{i}" for i in range(len(expressions))]
            targets = [(name, None, expression) for name, expression in zip(names, expressions)]
        kinds_by_name = {a.name: a.kind for a in args}
        writes = []
        for name, arg, expression in targets:
            try:
                writes.append(Write(parse_pointwise(expression.value, kinds_by_name), name, arg))
            except ExprError as error:
                self.expr_errors(expression, error)
        used = {name for w in writes for name in w.expr.names + w.expr.tested}
        for arg in args:
            if arg.is_tensor and not arg.is_mutated and writes and arg.name not in used:
                self.error(node.position, f"Tensor argument '{arg.name}' is not used by compute")
        return tuple(writes)

    def resolve_custom(self, schema: FunctionSchema, args: tuple[Arg, ...]) -> tuple[Write, ...]:
        """`kernel: custom`: the user writes the kernel; `reference` and `fake` say what it must compute."""
        at = self.node.key_position("kernel")
        errors_before = len(self.diagnostics.items)
        reference, fake = self.node.get("reference"), self.node.get("fake")
        for key, node in (("reference", reference), ("fake", fake)):
            if node is None:
                self.error(at, f"a `kernel: custom` op needs `{key}`: " + (
                    "a PyTorch expression the tests compare the kernel with" if key == "reference"
                    else "the shape (and dtype) of each output, e.g. {shape: x.shape}"))
        if any(a.is_mutated for a in args):
            self.error(at, f"mutating `kernel: custom` ops are not supported by kopgen {__version__} yet")
        for arg in args:
            if arg.is_optional:
                self.error(at, f"`kernel: custom` ops take no optional Tensors (Tensor? {arg.name}) in kopgen {__version__} yet")
        context = FormulaContext({a.name: a.kind for a in args}, 0, self.namespace, self.own_ops, self.mutating_ops)
        formula, outputs = None, []
        if reference is not None:
            try:
                formula = parse_formula(reference.value, context)
            except ExprError as error:
                self.expr_errors(reference, error)
        entries = [] if fake is None else list(fake.items) if isinstance(fake, Sequence) else [fake]
        if fake is not None and len(entries) != len(schema.returns):
            self.error(fake.position, f"fake describes {len(entries)} output(s) but the schema returns {len(schema.returns)}")
            entries = []
        tensors = [a.name for a in args if a.is_tensor]
        ints = [a.name for a in args if a.kind == "int"]
        for entry in entries:
            metadata = []
            for key, default in (("shape", None), ("dtype", f"{tensors[0]}.dtype")):
                node = entry.get(key)
                try:
                    metadata.append(parse_metadata(node.value, tensors, ints) if node else default)
                except ExprError as error:
                    self.expr_errors(node, error)
            outputs.append(tuple(metadata))
        if len(self.diagnostics.items) > errors_before:
            return ()
        self.custom = Custom(formula, tuple(outputs))
        return ()

    def resolve_reduction(self, schema: FunctionSchema, args: tuple[Arg, ...]) -> tuple[Write, ...]:
        """`reduce: {op, expr}`: EXPR (default: the single Tensor argument) reduced over the last dimension."""
        node = self.node.get("reduce")
        at = self.node.get("schema").value_position
        if any(a.is_mutated for a in args):
            self.error(at, "a reduce op returns its result; it cannot mutate arguments")
        if len(schema.returns) != 1:
            self.error(at, f"a reduce op returns one Tensor, not {len(schema.returns)}")
        for arg in args:
            if not arg.is_tensor and arg.name in REDUCTION_ARGUMENTS:
                self.error(
                    at.shifted(0, arg.schema.column),
                    f"reduce ops reduce over the last dimension, so argument '{arg.name}' would not be honoured; "
                    "remove it (or write a `kernel: custom` op)",
                )
        tensors = [a for a in args if a.is_tensor]
        expr_node = node.get("expr")
        if expr_node is None and len(tensors) != 1:
            names = ", ".join(a.name for a in tensors)
            self.error(node.position, f"reduce needs `expr:` when the op has several Tensor arguments ({names})")
            return ()
        text = expr_node.value if expr_node is not None else tensors[0].name
        try:
            expr = parse_pointwise(text, {a.name: a.kind for a in args})
        except ExprError as error:
            self.expr_errors(expr_node, error)
            return ()
        for arg in tensors:
            if arg.name not in expr.names + expr.tested:
                self.error(node.position, f"Tensor argument '{arg.name}' is not used by reduce")
        if any(a.is_mutated for a in args) or len(schema.returns) != 1:
            return ()
        self.reduction = Reduction(node.get("op").value)
        return (Write(expr, "out"),)

    def resolve_mutation(self, schema: FunctionSchema, node: Node, mutated: list[Arg]) -> list:
        """The targets of a mutating op: `compute: {arg: EXPR}` for exactly its `Tensor(a!)` arguments."""
        at = self.node.get("schema").value_position
        names = ", ".join(a.name for a in mutated)
        if not mutated:
            self.error(node.position, "compute names arguments to write, but the schema mutates none; mark them `Tensor(a!)`")
            return []
        if not isinstance(node, Mapping):
            example = f"compute: {{{mutated[0].name}: EXPR}}"
            self.error(node.position, f"a mutating op writes its mutated arguments ({names}): write `{example}`")
            return []
        if schema.returns:
            self.error(at, "a mutating op returns nothing: end its schema with `-> ()`")
        if self.node.get("backward") is not None:
            self.error(self.node.key_position("backward"), "mutating ops take no backward; write a functional op to differentiate")
        by_name = {a.name: a for a in mutated}
        targets = []
        for key, (key_node, value) in node.entries.items():
            if key not in by_name:
                self.error(key_node.position, f"compute writes '{key}', which is not a mutated argument (mutated: {names})")
            elif not isinstance(value, Scalar) or not isinstance(value.value, str):
                self.error(value.position, f"the value written to '{key}' must be an expression string")
            else:
                targets.append((key, by_name[key], value))
        for arg in mutated:
            if arg.name not in node.entries:
                self.error(node.position, f"the schema mutates '{arg.name}' (Tensor(a!)) but compute does not write it")
        return sorted(targets, key=lambda t: t[1].index)

    # -- registration and backends

    def resolve_registration(self) -> str:
        node = self.setting("registration")
        route = node.value if node else BUILTIN_DEFAULTS["registration"]
        if route not in AVAILABLE_ROUTES:
            self.error(
                node.value_position,
                f"registration '{route}' is not supported by kopgen {__version__} yet; use one of {', '.join(AVAILABLE_ROUTES)}",
            )
        return route

    def resolve_backends(self, registration: str) -> tuple[Kernel, ...]:
        node = self.setting("backends")
        backends = plain(node) if node else BUILTIN_DEFAULTS["backends"]
        kernels = []
        for device, language in sorted(backends.items()):
            if registration in PYTHON_ROUTES and language not in PYTHON_KERNELS:
                compiled = "torch_library or stable_abi"
                self.error(
                    node.get(device).position,  # only a spec's own backends can conflict
                    f"registration '{registration}' takes Python kernels (triton, python); "
                    f"{device}: {language} needs registration: {compiled}",
                )
            kernels.append(Kernel(device, language))
        if registration == "triton_op" and backends.get("cuda") != "triton":
            where = node.position if node is not None else self.setting("registration").value_position
            self.error(
                where,
                "registration 'triton_op' wraps a CUDA Triton kernel (wrap_triton) for torch.compile to trace into: "
                "set cuda: triton, or use registration: library",
            )
        if registration in COMPILED_ROUTES and kernels and not any(k.is_compiled for k in kernels):
            where = node.position if node is not None else self.setting("registration").value_position
            self.error(
                where,
                f"registration '{registration}' compiles C++/CUDA kernels, but backends has none: "
                f"set cpu: cpp and/or cuda: cuda, or use registration: library for Python kernels",
            )
        return tuple(kernels)

    # -- backward

    def resolve_backward(self, schema: FunctionSchema, args: tuple[Arg, ...]) -> Backward | None:
        node = self.node.get("backward")
        if node is None or schema.mutated_arguments:  # mutating ops take none (reported with the kind)
            return None
        context = FormulaContext(
            arg_kinds={a.name: a.kind for a in args},
            num_outputs=len(schema.returns),
            namespace=self.namespace,
            own_ops=self.own_ops,
            mutating_ops=self.mutating_ops,
        )
        by_name = {a.name: a for a in args}
        gradients = []
        for key, (key_node, value) in node.entries.items():
            arg = by_name.get(key)
            if arg is None:
                self.error(key_node.position, f"backward names '{key}', which is not an argument of the op")
            elif not arg.is_tensor:
                self.error(key_node.position, f"'{key}' is a {arg.schema.type}; only Tensor arguments take a formula")
            elif value.value == NON_DIFFERENTIABLE:
                gradients.append(Gradient(arg, None))
            else:
                try:
                    gradients.append(Gradient(arg, parse_formula(value.value, context)))
                except ExprError as error:
                    self.expr_errors(value, error)
        for arg in args:
            if arg.is_tensor and arg.name not in node.entries:
                self.error(
                    self.node.key_position("backward"),
                    f"backward has no formula for Tensor argument '{arg.name}' "
                    f"(write one, or '{arg.name}: {NON_DIFFERENTIABLE}')",
                )
        gradients.sort(key=lambda g: g.arg.index)
        return _plan_backward(tuple(gradients), args, num_outputs=len(schema.returns))

    # -- tests

    def resolve_tests(self, args: tuple[Arg, ...]):
        node = self.setting("tests")
        tensors = [a.name for a in args if a.is_tensor]
        shapes = []
        shapes_node = node.get("shapes") if node else None
        for entry in shapes_node.items if shapes_node else ():
            value = plain(entry)
            if isinstance(value, list):
                shapes.append({name: tuple(value) for name in tensors})
                continue
            missing = [name for name in tensors if name not in value]
            unknown = [name for name in value if name not in tensors]
            if missing or unknown:
                what = f"has no shape for {', '.join(missing)}" if missing else f"names {', '.join(unknown)}, not a Tensor argument"
                self.error(entry.position, f"this test shape {what}")
                continue
            shapes.append({name: tuple(value[name]) for name in tensors})
        if not shapes:
            shapes.append({name: DEFAULT_SHAPE for name in tensors})
        atol = node.get("atol") if node else None
        rtol = node.get("rtol") if node else None
        return tuple(shapes), atol.value if atol else None, rtol.value if rtol else None


def _default_tags(registration: str) -> tuple[str, ...]:
    """Tags of an op whose spec sets none: pt2_compliant_tag, which its generated suite proves
    (opcheck, fullgraph compiles, export), on the routes whose definition takes tags."""
    return () if registration in ("triton_op", "stable_abi") else ("pt2_compliant_tag",)


def _inside(node: Scalar, error: ExprError) -> Position:
    """The position of an expression error inside a YAML scalar."""
    return node.value_position.shifted(error.line, error.column)


def _plan_backward(gradients: tuple[Gradient, ...], args: tuple[Arg, ...], num_outputs: int) -> Backward:
    """Decide what setup_context saves: only what formulas read, gated on needs_input_grad."""
    value_users: dict[str, list[int]] = {}
    metadata_users: dict[str, list[int]] = {}
    result_users: dict[int, list[int]] = {}
    scalars: set[str] = set()
    for gradient in gradients:
        formula, index = gradient.formula, gradient.arg.index
        if formula is None:
            continue
        for name in formula.saved_tensors:
            value_users.setdefault(name, []).append(index)
        for name in formula.metadata_only:
            metadata_users.setdefault(name, []).append(index)
        for output in formula.results_used:
            result_users.setdefault(output, []).append(index)
        scalars.update(formula.scalars)
    order = {a.name: a.index for a in args}
    by_name = {a.name: a for a in args}
    # A tensor whose value one formula reads and whose metadata another reads is saved for both:
    # in backward its name is the saved tensor.
    saved_tensors = [
        Saved(name, name, tuple(sorted(set(users) | set(metadata_users.get(name, ())))))
        for name, users in sorted(value_users.items(), key=lambda kv: order[kv[0]])
    ]
    for output, users in sorted(result_users.items()):
        if num_outputs == 1:
            saved_tensors.append(Saved("result", "output", tuple(users)))
        else:
            saved_tensors.append(Saved(f"result{output}", f"output[{output}]", tuple(users)))
    saved_metadata = tuple(
        Saved(name, name, tuple(users), optional=by_name[name].is_optional)
        for name, users in sorted(metadata_users.items(), key=lambda kv: order[kv[0]])
        if name not in value_users
    )
    return Backward(
        gradients=gradients,
        saved_tensors=tuple(saved_tensors),
        saved_metadata=saved_metadata,
        scalars=tuple(sorted(scalars, key=order.get)),
        num_outputs=num_outputs,
        arg_names=tuple(a.name for a in args if not a.schema.kwarg_only),
        differentiable_twice=True,
        keyword_only=tuple(a.name for a in args if a.schema.kwarg_only),
        droppable_inputs=any(a.is_optional and a.schema.default is not None for a in args),
    )
