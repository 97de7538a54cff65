"""Every name the generated code uses, the renaming of its own locals, and the checks of a spec's names.

A spec's names become Python modules and functions, C++ identifiers, file names and torch
namespaces. Where an argument (or the op) takes a name the generated code binds itself (`result`,
`grad`, `mask`, `out1`, ...), the generated code renames its local, as torchgen's api/cpp.py does:
`Locals` holds every such name of an op, and the templates and lang/ modules take them from it.
The names an op binds at module level (`_f_backward`, its handle `_f`, ...) are settled package-wide
(`module_level_names`): op f's backward function gives way to the handle of op f_backward.
The names Python, C++ and torch keep for themselves, and those the generated functions read from
their modules, cannot be renamed: the checks report a spec name that takes one, at its position.
"""

from __future__ import annotations

import errno
import keyword
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from .errors import Diagnostics, Position
from .loader import Mapping, Scalar
from .schema import FunctionSchema

if TYPE_CHECKING:
    from .model import Op

Report = Callable[[Position, str], None]  # where and what: Diagnostics.error

# Names the generated functions of an op read from their module or from Python, beside the op's
# arguments: an argument of that name would hide them there, so it is refused. Names starting with
# `_` are the generated modules' private names (_support, _lib, _C, the op handles _<op>).
MODULE_NAMES = frozenset(
    {
        *("torch", "tl", "triton", "math", "Tensor", "reference", "wrap_triton", "upcast"),
        *("row_sum", "row_mean", "row_max", "row_min", "summed_to", "split_halves"),
        *("min", "max", "int", "float", "len", "range", "tuple", "zip"),  # builtins the functions call
    }
)
MODULE_PATTERN = re.compile(r"^(_.*|.*_kernels)$")  # private names; _registration's kernels modules
# Types the generated C++ of an op names unqualified in its host function, functor and launcher: an
# argument of that name would hide them there (`Tensor` is one of MODULE_NAMES already).
CPP_TYPE_NAMES = frozenset({"KernelCall", "Values", "Sum", "Mean", "Max", "Min", "acc_t", "Signature"})
# a row normalisation's functor (lang/cpp_norms.py): its types, and its methods and members, which a scalar
# argument (a member of the functor too) would clash with
CPP_TYPE_NAMES |= {"Stat", "Reductions", "RowValue", "Passes", "Together"}
CPP_TYPE_NAMES |= {"reduced", "finished", "kKept", "column_sums", "kept_stat", "from_kept"}
CPP_TYPE_NAMES |= {"AutogradContext", "variable_list"}  # the autograd of csrc/ops.cpp (lang/cpp_autograd.py)
# A CUDA functor's storage type, its compute type and the exp it calls (csrc/cuda/kernels.cu, pointwise.cuh);
# the exp a CPU functor calls (csrc/pointwise.h)
CPP_TYPE_NAMES |= {"scalar_t", "compute_t", "exp_for", "exp_of", "divide_for", "nan_max", "nan_min"}
# The helpers of csrc/custom.h that a custom kernel's host function calls (ops.cpp, cuda/ops.cpp) among
# its arguments: an argument of that name hides them there (the op's own function has another name)
CPP_HELPER_NAMES = frozenset({"check_device", "check_contiguous", "as_dense", "new_output", "new_strided_output"})
CPP_HELPER_NAMES |= {"shape_of", "strides_of", "shape_slice", "concat", "repeat", "current_stream", "Shape"}

# -- the generated code's own names, renamed where the op's names take them

# Every local the generated code binds where an op's argument names are in scope too, and the few
# module-level names of kernels/<op>.py its functions read. Python: the launchers and Triton kernels
# of kernels/<op>.py, the `python` kernels, references, fake kernels, setup_context and backward.
PYTHON_LOCALS = (
    *("kernel", "grid", "n_elements", "compute_dtype", "BLOCK_SIZE", "COMPUTE_DTYPE", "offsets", "mask"),
    *("shape", "n_rows", "n_cols", "block_rows", "block_cols", "BLOCK_ROWS", "BLOCK_COLS", "num_warps", "CONST_COLS"),
    *("rows", "row_mask", "total", "start", "cols", "values", "tiles", "tile", "col_tiles", "strides", "layout"),
    "nans",  # a max or min row reduction: how many NaNs each row holds
    *("dtype", "expected", "outputs", "output", "want", "dtypes"),
    *("ctx", "grad", "grads", "result", "results", "needs_input_grad", "_"),  # `_`: an input setup_context skips
    "wrap",  # a triton_op's custom launcher: what it wraps each kernel in before launching it
    *("ONE_PASS", "one_pass"),  # a row normalisation's kernel: whether a row fits in one block
    *("SAVE_STATS", "save_stats"),  # ... and whether it writes each row's statistics (for backward)
    # ... and a backward kernel's gradients summed over the rows: whether it sums them, its partial rows
    *("COLUMN_SUMS", "column_sums", "partials", "partials_ptr", "sums"),
    *("program", "step", "steps", "n_programs", "per_sm", "CONST_STEPS"),  # ... each program taking steps of blocks
    "keyset",  # ... and its autograd kernel's dispatch keys
    *("DENSE_LAUNCHES", "dense"),  # a launcher's launches of dense tensors (pointwise, row reduction), their outputs
)
# C++ and CUDA: the host functions (csrc/ops.cpp, cuda/ops.cpp) and launchers (cuda/kernels.cu).
CPP_LOCALS = ("call", "launch", "guard")  # guard: a custom kernel's CUDA device guard
# ... and the autograd of csrc/ops.cpp: the saved tensors in backward, an op's dispatcher handle.
CPP_LOCALS += ("saved", "handle")
CPP_LOCALS += ("stat",)  # a row normalisation's functor: the statistics of the row
CPP_LOCALS += ("kept",)  # ... and, in from_kept, the value its loop kept of a statistic's element
CPP_LOCALS += ("stream",)  # a custom CUDA kernel's last parameter (lang/cpp_user.py)
# Names derived from an argument, an output or the op (its stem in Python names): `{}` stands for it.
DERIVED_NAMES = {
    "output": "out{}",  # the outputs: `out`, or out0, out1, ...
    "pointer": "{}_ptr",  # Triton: a Tensor's kernel parameter
    "row_stride": "{}_row_stride",  # ... and its strides, between rows and between columns
    "col_stride": "{}_col_stride",
    "numel": "{}_numel",  # a custom kernel's skeleton: the size of a tensor it writes (an output, a mutated argument)
    "mask": "{}_mask",  # ... and mask
    "dense": "{}_dense",  # a written argument's dense buffer
    "flag": "HAS_{}",  # Triton: whether an optional Tensor is given (a constexpr)
    "cpp_flag": "has_{}",  # C++ and CUDA: the same (a functor member)
    "gradient": "grad_{}",  # backward: an input's gradient
    "shape": "{}_shape",  # setup_context: an input's shape, as an attribute of ctx
    "result": "result{}",  # backward: the saved outputs, `result` or result0, result1, ...
    "kernel": "{}_kernel",  # kernels/<op>.py: the Triton kernel,
    "interpreted": "{}_kernel_interpreted",  # ... its interpreted form,
    "launch": "{}_launch",  # ... and a triton_op's launch
    # backward: what one call of an op of the namespace gives where several gradients read it (a fused
    # backward's gradients), named after the op less its `_backward`: rms_norm_backward -> rms_norm_grads
    "shared_call": "{}_grads",
    "row_value": "row{}",  # C++ and CUDA: a normalisation's row values, row0, row1, ... (lang/cpp_norms.py)
}
# The names each op binds at module level in _registration.py (its handle in ops.py too), `{}` its stem.
# Two ops' names can meet (op f's `_f_backward` is the handle of op f_backward): module_level_names
# settles them package-wide.
MODULE_LEVEL_NAMES = {
    "handle": "_{}",  # the op's OpOverload (ops.py), its custom op or triton_op (_registration.py)
    "cpu_op": "_{}_cpu",  # a triton_op's CPU kernel as an op of its own
    "cuda_launcher": "_{}_cuda",  # a triton_op's eager CUDA kernel around the user's launcher
    "fake": "_{}_fake",
    "setup_context": "_{}_setup_context",
    "backward": "_{}_backward",
    "kernels": "{}_kernels",  # kernels/<op>.py, as _registration.py and the benchmark import it
    "cpu_kernel": "{}_cpu_kernel",  # an existing function bound as a device's kernel, as imported
    "cuda_kernel": "{}_cuda_kernel",
    "eager_kernels": "_{}_kernels",  # the kernel per device type that ops.py calls in plain eager calls
    "vmap": "_{}_vmap",  # the op's vmap rule (lang/vmap.py)
    # a normalisation that saves its statistics (lang/norms.py): the op returning them, its fake kernel,
    # and the op's autograd kernel, which saves them
    "forward_op": "_{}_forward",
    "forward_fake": "_{}_forward_fake",
    "autograd_kernel": "_{}_autograd",
    "function_apply": "_{}_apply",  # its autograd.Function's apply, as ops.py calls it (lang/eager.py)
}
# What the generated modules bind at module level besides the ops' names: their imports, the Library fragment.
MODULE_IMPORTS = frozenset(
    {"annotations", "torch", "Tensor", "Sequence", "wrap_triton", "_C", "_support", "_lib", "_registration", "reference"}
)
# torch calls setup_context(ctx=, inputs=, output=, keyword_only_inputs=) by keyword: these parameter
# names cannot change, so an argument of one of them is unpacked there under another name.
SETUP_CONTEXT_PARAMETERS = ("ctx", "inputs", "output", "keyword_only_inputs")
# An op's vmap rule (lang/vmap.py) takes the op's arguments as *args and **kwargs: no argument name meets these.
VMAP_RULE_PARAMETERS = ("info", "in_dims", "args", "kwargs")
# The attributes of the ctx that setup_context and backward share, which it must not overwrite.
CTX_MEMBERS = frozenset(
    {
        *("apply", "apply_boxed", "apply_jvp", "dirty_tensors", "mark_dirty", "mark_non_differentiable"),
        *("mark_shared_storage", "materialize_grads", "maybe_clear_saved_tensors", "metadata", "name"),
        *("needs_input_grad", "next_functions", "non_differentiable", "register_hook", "register_prehook"),
        *("requires_grad", "save_for_backward", "save_for_forward", "saved_for_forward", "saved_tensors"),
        *("saved_variables", "set_materialize_grads", "to_save"),
    }
)


def fresh(name: str, taken: set[str] | frozenset[str]) -> str:
    """`name`, with `_` appended until no name in `taken` is it (as torchgen's api/cpp.py renames a
    generated local that meets an argument)."""
    while name in taken:
        name += "_"
    return name


def module_level_names(stems: Sequence[str]) -> list[dict[str, str]]:
    """Per op (by its stem, in spec order) its module-level names, unique in the package: each as
    MODULE_LEVEL_NAMES has it, or with `_` appended where a name settled before takes it. Kinds are
    settled in the table's order across all ops, so the handles come first and keep their names (but
    where an import has it: op support's is `_support_`): beside op f_backward, whose handle is
    `_f_backward`, op f's backward function is `_f_backward_`."""
    taken = set(MODULE_IMPORTS)
    names: list[dict[str, str]] = [{} for _ in stems]
    for kind, pattern in MODULE_LEVEL_NAMES.items():
        for settled, stem in zip(names, stems, strict=True):
            settled[kind] = fresh(pattern.format(stem), taken)
            taken.add(settled[kind])
    return names


def module_name(op: Op, kind: str) -> str:
    """`op`'s module-level name of `kind` (MODULE_LEVEL_NAMES), as its package settled it."""
    return dict(op.module_names).get(kind) or MODULE_LEVEL_NAMES[kind].format(op.stem)


def output_names(arg_names: Iterable[str], count: int) -> tuple[str, ...]:
    """What the generated code calls the op's outputs: `out`, or out0, out1, ..., each renamed off the
    argument names (an input may be called `out`)."""
    taken = set(arg_names)
    outputs = []
    for i in range(count):
        outputs.append(fresh(DERIVED_NAMES["output"].format("" if count == 1 else i), taken))
        taken.add(outputs[-1])
    return tuple(outputs)


def optional_flags(arg_names: Iterable[str], optionals: Iterable[str]) -> dict[str, str]:
    """The kernels' flags for the optional Tensors (`HAS_x` in Triton, `has_x` in C++), each renamed
    off the op's argument names and the flags before it. The pointwise language's translations
    (expr.py) and Locals both take them from here, so they agree."""
    taken = set(arg_names)
    flags = {}
    for optional in optionals:
        for pattern in (DERIVED_NAMES["flag"], DERIVED_NAMES["cpp_flag"]):
            natural = pattern.format(optional)
            flags[natural] = fresh(natural, taken)
            taken.add(flags[natural])
    return flags


class Locals:
    """The generated code's own names for one op: each as the tables above have it, or with `_`
    appended where a name the op brings (an argument's, the op's) takes it. The names are settled
    once, in a fixed order, each avoiding the op's names and those settled before it: the same
    spec always gets the same names, and no two meet (but setup_context's, settled among its own
    names only). The user's names stay as written."""

    def __init__(self, op_name: str, stem: str, args: Sequence[tuple[str, bool]], outputs: Sequence[str],
                 results: Sequence[str], called: Sequence[str] = ()):
        """`args`: (name, is an optional Tensor) per argument; `outputs`: the outputs' names (settled
        by output_names); `results`: the natural names of the saved outputs in backward (result, ...);
        `called`: the ops of the namespace the backward formulas call."""
        arg_names = [name for name, _ in args]
        flags = optional_flags(arg_names, [name for name, optional in args if optional])
        taken = {*arg_names, *flags.values(), *outputs, op_name}
        self._names: dict[tuple[str, str], str] = {("flag", n): f for n, f in flags.items()}

        def settle(kind: str, natural: str, avoid: frozenset[str] = frozenset()) -> None:
            if (kind, natural) in self._names:  # `result` is a local and the single saved output
                return
            final = fresh(natural, taken | avoid)
            self._names[(kind, natural)] = final
            taken.add(final)

        for name in (*PYTHON_LOCALS, *CPP_LOCALS):
            settle("local", name)
        for output in outputs:
            for kind in ("pointer", "row_stride", "col_stride", "numel", "mask"):
                settle(kind, DERIVED_NAMES[kind].format(output))
        for name in arg_names:
            for kind in ("pointer", "row_stride", "col_stride", "dense", "gradient", "numel", "mask"):
                settle(kind, DERIVED_NAMES[kind].format(name))
            settle("shape", DERIVED_NAMES["shape"].format(name), CTX_MEMBERS)
            if name in CTX_MEMBERS:  # kept on ctx under its own name elsewhere (a scalar the formulas read)
                settle("attribute", name, CTX_MEMBERS)
        for result in results:
            settle("local", result)
        for kind in ("kernel", "interpreted", "launch"):
            settle(kind, DERIVED_NAMES[kind].format(stem))
        for called_op in called:  # keyed by the op: `norm` and `norm_backward` both make norm_grads
            self._names[("shared_call", called_op)] = fresh(shared_call_name(called_op), taken)
            taken.add(self._names[("shared_call", called_op)])
        # setup_context's names for the arguments it unpacks: only its own names are in the way there (the
        # arguments, torch's parameters, its needs_input_grad and `_`), so `ctx` becomes ctx_ as in backward.
        in_setup = {*arg_names, *SETUP_CONTEXT_PARAMETERS, self.needs_input_grad, self._}
        for name in arg_names:
            if name in SETUP_CONTEXT_PARAMETERS:
                self._names[("unpacked", name)] = fresh(name, in_setup)
                in_setup.add(self._names[("unpacked", name)])

    def __getattr__(self, name: str) -> str:
        """A local of PYTHON_LOCALS or CPP_LOCALS: `local.grad`."""
        try:
            return self.__dict__["_names"][("local", name)]
        except KeyError:
            raise AttributeError(f"'{name}' is not a generated local of names.py's tables") from None

    def result(self, natural: str) -> str:
        """A saved output in backward: `result`, or result0, result1, ..."""
        return self._names[("local", natural)]

    def derived(self, kind: str, name: str) -> str:
        """The name DERIVED_NAMES[kind] derives from `name` (an argument, an output or the op's stem)."""
        natural = DERIVED_NAMES[kind].format(name)
        return self._names[("flag" if kind in ("flag", "cpp_flag") else kind, natural)]

    def pointer(self, name: str) -> str:
        return self.derived("pointer", name)

    def flag(self, name: str) -> str:
        return self.derived("flag", name)

    def cpp_flag(self, name: str) -> str:
        return self.derived("cpp_flag", name)

    def shared_call(self, called_op: str) -> str:
        """backward's local for the one call of `called_op` that several gradients read."""
        return self._names[("shared_call", called_op)]

    def unpacked(self, name: str) -> str:
        """An argument as setup_context unpacks it from `inputs`: its own name, but where torch's
        parameters of setup_context have it."""
        return self._names.get(("unpacked", name), name)

    def attribute(self, name: str) -> str:
        """An argument kept on ctx (a scalar or a tensor's metadata): its name, but where ctx has it."""
        return self._names.get(("attribute", name), name)


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
    r"|U?INTMAX|U?INTPTR|PTRDIFF|SIZE|SIG_ATOMIC|WCHAR|WINT)_\w+"
    # torch's, CUDA's and the extension build's macros (TORCH_API, C10_API, TORCH_EXTENSION_NAME, NDEBUG)
    r"|(TORCH|C10|AT|CAFFE2|AOTI|STD_TORCH|CUDA|CUDART|CUB|THRUST|NVTX|HIP)_\w+|NDEBUG)$"
)
MAX_NAME_LENGTH = 64  # package, namespace, op and argument names: well before the file system's limit
# Modules a package must not be named after: the standard library's and those the generated code,
# its tests and its build import (the package would shadow them, or import itself).
# The generated repo's own top-level names: a package of that name would be merged into them or hidden.
REPO_LAYOUT = {
    "tests": "would be merged into the repo's test suite (tests/)",
    "benchmarks": "would be merged into the repo's benchmarks/",
    "conftest": "would stand for pytest's tests/conftest.py, which pytest imports as `conftest`",
    "dist": "would be left out of git: .gitignore leaves out dist/ (python -m build's wheels)",
    "LICENSE": "would stand where the repo's LICENSE file goes",
    "kopgen": "would hide kopgen itself, which updates the repo",
}
SHADOWED_MODULES = frozenset(sys.stdlib_module_names) | frozenset(
    {
        *("torch", "torchgen", "functorch", "triton", "numpy", "pytest", "setuptools", "pkg_resources", "hypothesis"),
        *("sympy", "mpmath", "networkx", "jinja2", "markupsafe", "filelock", "fsspec", "typing_extensions"),
        *("packaging", "pluggy", "iniconfig", "pygments", "_pytest", "_distutils_hack"),
        *("build", "pyproject_hooks"),  # tests/test_wheel.py runs `python -m build`
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
# and reference.py, which define a function per op beside them; `aoti`, whose tests/test_aoti.py is
# the AOTInductor test's (lang/aoti.py) and not an op's.
OP_RESERVED_NAMES = frozenset(
    {
        *("ops", "reference", "kernels", "functors", "_registration", "_support", "_C", "aoti", "wheel"),
        *("torch", "math", "triton", "tl", "Tensor", "Sequence", "upcast", "row_sum", "row_mean", "row_max", "row_min"),
        *("summed_to", "split_halves"),
    }
)
DUNDER_PATTERN = re.compile(r"^__.*__$")


def shared_call_name(called_op: str) -> str:
    """The natural name of backward's local for one call of `called_op` (before renaming)."""
    base = called_op.removesuffix("_backward") or called_op
    return DERIVED_NAMES["shared_call"].format(base)


def locals_for(op: Op) -> Locals:
    """The generated code's own names for `op` (templates: `local(op).grad`)."""
    # with the halves of a `split` argument, which the kernels read as Tensors of their own
    args = tuple((a.name, a.is_optional) for a in op.args) + tuple((a.name, False) for a in op.kernel_args if a not in op.args)
    count = op.num_outputs
    results = ("result",) if count == 1 else tuple(DERIVED_NAMES["result"].format(i) for i in range(count))
    gradients = op.backward.gradients if op.backward else ()
    called = tuple(sorted({name for g in gradients if g.formula for name in g.formula.own_ops_called}))
    # and the tensors the kernels write besides (a split op's backward kernel writes its output's halves)
    outputs = tuple(dict.fromkeys((*op.output_names, *(w.name for w in op.writes if w.arg is None))))
    return _locals(op.name, op.stem, args, outputs, results, called)


@lru_cache(maxsize=256)
def _locals(op_name: str, stem: str, args: tuple[tuple[str, bool], ...], outputs: tuple[str, ...],
            results: tuple[str, ...], called: tuple[str, ...]) -> Locals:
    return Locals(op_name, stem, args, outputs, results, called)


def check_package_names(root: Mapping, namespace: str, namespace_at: Position, diagnostics: Diagnostics) -> None:
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
    elif package in REPO_LAYOUT:
        diagnostics.error(at, f"package '{package}' {REPO_LAYOUT[package]}; choose another name")
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


def check_op_name(name: str, at: Position, report: Report) -> None:
    """An op names a Python function, a module of kernels/ and a test file beside the generated ones."""
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        report(at, f"'{name}' is a Python keyword; ops and arguments become Python names")
    elif len(name) > MAX_NAME_LENGTH:
        report(at, f"op name '{name[:20]}...' is too long ({len(name)} characters, at most {MAX_NAME_LENGTH})")
    elif DUNDER_PATTERN.match(name):
        report(at, f"op name '{name}' is a Python special name (__x__): its module kernels/{name}.py "
                   "would replace or break the package's own; rename the op")
    elif name in OP_RESERVED_NAMES:
        report(at, f"op name '{name}' is taken by the generated package (a module or test file of it, or a name "
                   "ops.py and reference.py import); rename the op")
    elif name.startswith("_"):
        report(at, f"op name '{name}' starts with '_': the generated package names its own ops so (_<op>_cpu, "
                   "_<op>_forward), which it would replace; rename the op")


def check_argument_names(schema: FunctionSchema, at: Position, report: Report) -> None:
    """Arguments become Python parameters. The generated code's own locals make way for them
    (Locals); the names its functions read from their module or from Python cannot."""
    for arg in schema.arguments:
        name, arg_at = arg.name, at.shifted(0, arg.column)
        if keyword.iskeyword(name) or keyword.issoftkeyword(name):
            report(arg_at, f"'{name}' is a Python keyword; ops and arguments become Python names")
        elif len(name) > MAX_NAME_LENGTH:
            report(arg_at, f"argument name '{name[:20]}...' is too long ({len(name)} characters, "
                           f"at most {MAX_NAME_LENGTH})")
        elif name in MODULE_NAMES or MODULE_PATTERN.match(name):
            report(arg_at, f"argument name '{name}' {_hidden(name)}; rename it")


def _hidden(name: str) -> str:
    """Why an argument cannot be named `name` (a MODULE_NAMES one)."""
    if name.startswith("_"):
        return "starts with '_', which the generated modules keep for their own names (_support, _lib, _<op>)"
    if name.endswith("_kernels"):
        return "would hide a kernels module of _registration.py (imported as <op>_kernels)"
    if name in ("min", "max", "int", "float", "len", "range", "tuple", "zip"):
        return f"would hide the builtin '{name}', which the generated functions call"
    return f"would hide '{name}', which the generated functions import"


def check_cpp_names(namespace: str, namespace_at: Position, node: Scalar, schema: FunctionSchema,
                    report: Report) -> None:
    """Compiled ops become C++ functions and parameters: no C++ keywords, macros, or types their code names."""
    at = node.value_position
    if namespace in CPP_KEYWORDS:
        report(at, f"namespace '{namespace}' is a C++ keyword; compiled ops need another namespace")
    elif namespace in C_STD_NAMES or C_STD_PATTERN.match(namespace):
        report(namespace_at, f"namespace '{namespace}' is a macro or type of the C/C++ standard "
                             "library or torch's headers; compiled ops need another namespace")
    named = [(schema.name, at.shifted(0, len(node.value) - len(node.value.lstrip())), False)]
    named += [(a.name, at.shifted(0, a.column), True) for a in schema.arguments]
    for name, name_at, argument in named:
        if name in CPP_KEYWORDS:
            report(name_at, f"'{name}' is a C++ keyword; compiled routes turn ops and arguments into C++ names")
        elif name in C_STD_NAMES or C_STD_PATTERN.match(name):
            report(name_at, f"'{name}' is a macro or type of the C/C++ standard library or torch's headers; "
                            "compiled routes turn ops and arguments into C++ names: rename it")
        elif name in CPP_TYPE_NAMES or (argument and name in CPP_HELPER_NAMES):
            report(name_at, f"'{name}' would hide the C++ name '{name}', which the generated code uses inside "
                            "the op's functions; rename it")
