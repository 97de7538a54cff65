"""Every name the generated code reserves, and the checks that keep a spec's names out of their way.

A spec's names become Python modules and functions, C++ identifiers, file names and torch
namespaces. The tables below say which names the generated code, Python, C++ and torch keep for
themselves; the checks report a spec name that collides, at its position.
"""

from __future__ import annotations

import errno
import keyword
import re
import sys
from collections.abc import Callable

from packaging.version import InvalidVersion, Version

from .errors import Diagnostics, Position
from .loader import Mapping, Scalar
from .schema import FunctionSchema

Report = Callable[[Position, str], None]  # where and what: Diagnostics.error

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
        *("call", "KernelCall", "launch", "Launch", "Values", "functors", "kernels", "Sum", "Mean", "Max", "Min"),
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
        *("ops", "reference", "kernels", "functors", "_registration", "_support", "_C"),
        *("torch", "math", "triton", "tl", "Tensor", "Sequence", "upcast", "row_sum", "row_mean", "row_max", "row_min"),
    }
)
DUNDER_PATTERN = re.compile(r"^__.*__$")


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
        report(at, f"op name '{name}' is taken by the generated package (a module of it, or a name "
                   "ops.py and reference.py import); rename the op")


def check_argument_names(schema: FunctionSchema, at: Position, report: Report) -> None:
    """Arguments become Python parameters beside the generated code's own locals."""
    for arg in schema.arguments:
        name, arg_at = arg.name, at.shifted(0, arg.column)
        if keyword.iskeyword(name) or keyword.issoftkeyword(name):
            report(arg_at, f"'{name}' is a Python keyword; ops and arguments become Python names")
        elif len(name) > MAX_NAME_LENGTH:
            report(arg_at, f"argument name '{name[:20]}...' is too long ({len(name)} characters, "
                           f"at most {MAX_NAME_LENGTH})")
        elif name == "out" and arg.is_mutated:
            pass  # `Tensor(a!) out` of out= ops: the generated code uses no local `out` beside it
        elif name in RESERVED_NAMES or RESERVED_PATTERN.match(name):
            report(arg_at, f"argument name '{name}' is reserved for the generated code; rename it")
    names = {a.name for a in schema.arguments}
    for arg in schema.arguments:
        flags = {f"has_{arg.name}", f"HAS_{arg.name}"} & names if str(arg.type) == "Tensor?" else set()
        if flags:
            report(at, f"argument name '{flags.pop()}' is the kernels' flag for whether '{arg.name}' is given; rename it")


def check_cpp_names(namespace: str, namespace_at: Position, node: Scalar, schema: FunctionSchema,
                    report: Report) -> None:
    """Compiled ops become C++ functions and parameters: no C++ keywords, macros or generated names."""
    at = node.value_position
    if namespace in CPP_KEYWORDS:
        report(at, f"namespace '{namespace}' is a C++ keyword; compiled ops need another namespace")
    elif namespace in C_STD_NAMES or C_STD_PATTERN.match(namespace):
        report(namespace_at, f"namespace '{namespace}' is a macro or type of the C/C++ standard "
                             "library; compiled ops need another namespace")
    named = [(schema.name, at.shifted(0, len(node.value) - len(node.value.lstrip())))]
    named += [(a.name, at.shifted(0, a.column)) for a in schema.arguments]
    for name, name_at in named:
        if name in CPP_KEYWORDS:
            report(name_at, f"'{name}' is a C++ keyword; compiled routes turn ops and arguments into C++ names")
        elif name in C_STD_NAMES or C_STD_PATTERN.match(name):
            report(name_at, f"'{name}' is a macro or type of the C/C++ standard library; compiled routes "
                            "turn ops and arguments into C++ names: rename it")
        elif name != schema.name and (name in CPP_RESERVED_NAMES or CPP_RESERVED_PATTERN.match(name)):
            report(name_at, f"argument name '{name}' is reserved for the generated C++ code; rename it")
