"""This module translates the model into the generated C++ and CUDA code.

As torchgen's api/cpp.py does for ATen, it owns every C++ spelling the csrc/ templates print:
the host function of each op (its signature and the statements that name its tensors), its
functor (the expression over compute-type values), its CUDA launcher, its registration, and
the package's dtypes and route macros. The loops, launches and checks themselves are C++ written
once, in csrc/pointwise.h and csrc/cuda/pointwise.cuh.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..model import Op, Package, PointwiseCompute, RowReduction
from ..model_kinds import RowNormalization
from ..names import locals_for
from ..split import GatedSplit, SplitGradient
from . import autocast, layout, split

LINE_LENGTH = 100  # generated C++/CUDA lines stay within it (but for very long names or expressions)
# C++ types of the scalar arguments, as the host functions and launchers take them.
SCALAR_TYPES = {"float": "double", "int": "int64_t", "bool": "bool"}
# The reductions of csrc/pointwise.h and cuda/pointwise.cuh, by reduce op.
REDUCERS = {"sum": "Sum", "mean": "Mean", "max": "Max", "min": "Min"}


@dataclass(frozen=True)
class Loop:
    """How csrc/ runs the functor of an op kind: the loop of pointwise.h and pointwise.cuh."""

    name: str  # KernelCall's <name>_cpu, cuda::<name>
    allocate: str  # the KernelCall method that allocates each output
    reduces: bool  # the functor gives one value per element, which a reducer (Sum, ...) combines over a row
    normalizes: bool = False  # statistics of each row first, which the functor reads (lang/cpp_norms.py)
    by_rows: bool = False  # the norms loop: rows read in place through their strides, then the functor per element


# The one place this module chooses by op kind (kernel: custom ops have no C++). A split op's gradient runs
# the norms loop with no statistics: its halves are read, and its output's halves written, rows 2d apart.
LOOPS = {PointwiseCompute: Loop("pointwise", "output", False), RowReduction: Loop("rows", "row_output", True),
         GatedSplit: Loop("pointwise", "output", False), RowNormalization: Loop("norms", "output", False, True, True),
         SplitGradient: Loop("norms", "joined_output", False, False, True)}


@dataclass(frozen=True)
class Dtype:
    """A dtype as each language names it."""

    name: str  # torch: float32
    scalar_type: str  # C++ ScalarType enumerator: Float
    cpp_type: str  # host element type: float, Half
    cuda_type: str  # device element type: float, __half


DTYPES = (
    Dtype("float16", "Half", "Half", "__half"),
    Dtype("bfloat16", "BFloat16", "BFloat16", "__nv_bfloat16"),
    Dtype("float32", "Float", "float", "float"),
    Dtype("float64", "Double", "double", "double"),
)


def wrap(opening: str, items: Sequence[str], closing: str, indent: int = 0, after: int = 0) -> str:
    """`opening` items `closing` on one line where it fits (at column `indent`, with `after` more
    characters behind it), else one item per line, 4 columns deeper: long signatures and calls."""
    line = opening + ", ".join(items) + closing
    if indent + len(line) + after <= LINE_LENGTH or not items:
        return line
    pad = " " * (indent + 4)
    return opening + "\n" + ",\n".join(pad + item for item in items) + closing


_OPERATORS = frozenset({"+", "-", "*", "/", "%", "?", ":", "&&", "||", "<", ">", "<=", ">=", "==", "!="})


def wrap_expression(code: str, column: int, indent: int, depth: int = 0) -> str:
    """C++ expression `code`, starting at `column`, broken before the binary operators outside
    parentheses where a line would pass LINE_LENGTH; continuation lines start at `indent`. A line still
    too long is broken the same way inside its parentheses, one level deeper and 4 columns further in,
    and after the commas between a call's arguments there."""
    segments, level, after_comma = [""], 0, False
    for word in code.split(" "):
        if (level == depth and word in _OPERATORS or after_comma) and segments[-1]:
            segments.append(word)
        else:
            segments[-1] = f"{segments[-1]} {word}" if segments[-1] else word
        level += word.count("(") - word.count(")")
        # inside parentheses, a call's arguments may go on lines of their own too
        after_comma = depth > 0 and level == depth and word.endswith(",")
    lines = [segments[0]]
    for segment in segments[1:]:
        start = column if len(lines) == 1 else indent
        if start + len(lines[-1]) + 1 + len(segment) + 2 > LINE_LENGTH:
            lines.append(segment)
        else:
            lines[-1] += " " + segment
    if depth < 3:  # a long operand: its own parenthesised operators
        lines = [wrap_expression(line, column if i == 0 else indent, indent + 4, depth + 1)
                 if (column if i == 0 else indent) + len(line) + 2 > LINE_LENGTH else line
                 for i, line in enumerate(lines)]
    return f"\n{' ' * indent}".join(lines)


def string_literal(text: str, indent: int) -> str:
    """`text` as a C++ string literal at column `indent`; where it is too long, adjacent literals
    (which C++ joins) on lines of their own."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')  # a schema's str defaults are quoted
    if indent + len(text) + 3 <= LINE_LENGTH:
        return f'"{text}"'
    pieces, line = [], ""
    for word in text.split(" "):
        if line and indent + len(line) + len(word) + 3 > LINE_LENGTH:
            pieces.append(line)
            line = ""
        line += word + " "
    pieces.append(line.rstrip(" "))
    return f"\n{' ' * indent}".join(f'"{piece}"' for piece in pieces)


@dataclass(frozen=True)
class CppOp:
    """An op as the C++ and CUDA templates print it."""

    op: Op

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def _loop(self) -> Loop:
        return LOOPS[type(self.op.body)]

    # -- the host function (csrc/ops.cpp and csrc/cuda/ops.cpp)

    @property
    def host_signature(self) -> str:
        """`Tensor muladd(const Tensor& a, const Tensor& b, double c)`: Tensors by const reference,
        by value on the stable ABI (TORCH_BOX takes them so)."""
        by_value = self.op.registration == "stable_abi"
        types = {
            "tensor": "Tensor" if by_value else "const Tensor&",
            "optional": "std::optional<Tensor>" if by_value else "const std::optional<Tensor>&",
            **SCALAR_TYPES,
        }
        parameters = [f"{types[a.kind]} {a.name}" for a in self.op.args]
        return wrap(f"{self._return_type} {self.name}(", parameters, ")", after=2)

    @property
    def _return_type(self) -> str:
        count = len(self.op.output_names)  # a split op's gradient: one Tensor, whose halves are its two writes
        if count == 0:
            return "void"
        return "Tensor" if count == 1 else f"std::tuple<{', '.join(['Tensor'] * count)}>"

    def host_body(self, device: str) -> list[str]:
        """The statements of the host function: the call's tensors, in the order the functor reads
        and writes them, then the kernel's run."""
        call = locals_for(self.op).call
        tensors = "{" + ", ".join(a.name for a in self.op.kernel_args) + "}"  # a `split` argument's halves
        statements = [*split.cpp_bind(self.op), wrap(f"KernelCall {call}(", [f'"{self.op.qualname}"', tensors], ");", indent=2)]
        if self._loop.normalizes:
            statements.append(f"{call}.by_rows();")
        written = {w.arg.name for w in self.op.mutated_writes}
        read = {a.name for a in self.op.read_args}
        for arg in self.op.kernel_args:
            if arg.name in written:
                method = "update" if arg.name in read else "write"
                statements.append(f'{call}.{method}({arg.name}, "{arg.name}");')
            elif arg.name in read:
                statements.append(f"{call}.read({arg.name});")
        sums = {c.name: c.like for c in getattr(self.op.body, "column_sums", ())}
        # A gradient summed over the rows: in its input's shape (KernelCall sums it, or its kernel's partial rows).
        statements += [f"Tensor {name} = {call}.column_sum({sums[name]});" if name in sums
                       else f"Tensor {name} = {call}.{self._loop.allocate}();" for name in self.op.output_names]
        statements.append(self._cpu_run if device == "cpu" else self._cuda_run)
        names = self.op.output_names
        if names:
            statements.append(f"return {names[0] if len(names) == 1 else '{' + ', '.join(names) + '}'};")
        return statements

    @property
    def _scalar_arguments(self) -> list[str]:
        """What the host passes on for the functor's members: the scalars, then a has_x flag for each
        optional Tensor the expression tests."""
        return [a.name for a in self.op.kernel_scalars] + [f"{a.name}.has_value()" for a in self.op.tested_optionals]

    @property
    def _flags(self) -> list[str]:
        """The functor's and launcher's has_x flag of each optional Tensor the expression tests."""
        return [locals_for(self.op).cpp_flag(a.name) for a in self.op.tested_optionals]

    @property
    def _functor_template(self) -> str:
        """`functors::muladd`, or `Sum, functors::rowsum` for a row reduction."""
        functor = f"functors::{self.name}"
        return f"{REDUCERS[self.op.body.reduction.kind]}, {functor}" if self._loop.reduces else functor

    @property
    def _cpu_run(self) -> str:
        call = locals_for(self.op).call
        return wrap(f"{call}.{self._loop.name}_cpu<{self._functor_template}>(", self._scalar_arguments, ");", indent=2)

    @property
    def _cuda_run(self) -> str:
        # The namespace's launch helper, qualified where an argument or the op itself hides it.
        hidden = "launch" in {self.op.name, *(a.name for a in self.op.args)}
        launch = f"{self.op.namespace}::launch" if hidden else "launch"
        arguments = [locals_for(self.op).call, f"kernels::{self.name}", *self._scalar_arguments]
        return wrap(f"{launch}(", arguments, ");", indent=2)

    # -- the functor: the op's expression over compute-type values (acc_t)

    @property
    def functor_members(self) -> list[str]:
        """The scalars in the compute type (bools as they are), then the has_x flags."""
        members = [f"{'bool' if a.kind == 'bool' else 'acc_t'} {a.name}" for a in self.op.kernel_scalars]
        return members + [f"bool {flag}" for flag in self._flags]

    def _operator(self, prefix: str) -> str:
        result = "acc_t" if self._loop.reduces else f"Values<acc_t, {len(self._written_exprs('cpu'))}>"
        parameters = [f"acc_t {a.name}" for a in self.op.read_args]
        if self._loop.normalizes:  # the row's statistics first
            parameters.insert(0, _norms().stat_parameter(self.op, self._compute_reads))
        elif self._loop.by_rows:  # the norms loop passes statistics, of which this functor has none
            parameters.insert(0, "const acc_t* /*no statistics*/")
        return wrap(f"{prefix}{result} operator()(", parameters, ") const", indent=2, after=2)

    @property
    def cpu_operator(self) -> str:
        return self._operator("")

    @property
    def cuda_operator(self) -> str:
        return self._operator("__device__ ")

    def _written_exprs(self, device: str) -> list[str]:
        """The C++ of each written tensor for `device`, in the order the host names them: the mutated
        arguments in schema order, then the returned outputs."""
        by_arg = {w.arg.name: w for w in self.op.mutated_writes}
        writes = [by_arg[a.name] for a in self.op.tensor_args if a.name in by_arg]
        writes += [w for w in self.op.writes if w.arg is None]
        # then a normalisation's backward kernel's gradients summed over the rows (functor column_sums)
        exprs = self._per_element([w.expr for w in writes] + [c.expr for c in self._column_sums])
        return [e.to_functor(device) for e in exprs]

    def _per_element(self, exprs: list) -> list:
        """A normalisation's expressions read its row values (lang/cpp_norms.py); others are as they are."""
        return [_norms().per_element(self.op, e) for e in exprs] if self._loop.normalizes else exprs

    @property
    def _column_sums(self) -> tuple:
        return getattr(self.op.body, "column_sums", ())

    @property
    def _compute_reads(self) -> set[str]:
        exprs = self._per_element([*(w.expr for w in self.op.writes), *(c.expr for c in self._column_sums)])
        return {n for e in exprs for n in (*e.names, *e.tested)}

    def functor_methods(self, device: str) -> list[str]:
        """The functor's lines before operator(): a row normalisation's statistics (none for a split op's
        gradient, which runs in the same loop)."""
        if self._loop.normalizes:
            return _norms().methods(self.op, device)
        if not self._loop.by_rows:
            return []
        return ["using Reductions = std::tuple<>;", *(_norms().kept_inputs(self.op) if device == "cuda" else [])]

    def functor_return(self, device: str) -> str:
        """`return {a * b + c};`, or the value of a reduction's element: `return x * x;`."""
        if self._loop.normalizes:  # the statistics it reads, bound by name
            bindings = _norms().stat_bindings(self.op, self._compute_reads)
            return "\n    ".join([*bindings, self._values_return(device)])
        return self._values_return(device)

    def _values_return(self, device: str) -> str:
        exprs = self._written_exprs(device)
        if self._loop.reduces:
            return f"return {wrap_expression(exprs[0], 11, 8)};"
        one_line = f"return {{{', '.join(exprs)}}};"
        if 4 + len(one_line) <= LINE_LENGTH:
            return one_line
        if len(exprs) == 1:
            return f"return {{{wrap_expression(exprs[0], 12, 8)}}};"
        return "return {\n" + ",\n".join(" " * 8 + wrap_expression(e, 8, 12) for e in exprs) + "};"

    # -- the CUDA launcher (csrc/cuda/kernels.h, kernels.cu)

    @property
    def launcher_signature(self) -> str:
        scalars = [f"{SCALAR_TYPES[a.kind]} {a.name}" for a in self.op.kernel_scalars]
        flags = [f"bool {flag}" for flag in self._flags]
        launch = f"const Launch& {locals_for(self.op).launch}"
        return wrap(f"cudaError_t {self.name}(", [launch, *scalars, *flags], ")", after=2)

    @property
    def launcher_return(self) -> str:
        names = [locals_for(self.op).launch] + [a.name for a in self.op.kernel_scalars] + self._flags
        return wrap(f"return cuda::{self._loop.name}<{self._functor_template}>(", names, ");", indent=2)

    # -- registration

    @property
    def definition(self) -> str:
        """`m.def("schema")`, with the op's tags."""
        arguments = [string_literal(self.op.schema_text, indent=6)]
        if self.op.tags:
            arguments.append("{" + ", ".join(f"at::Tag::{tag}" for tag in self.op.tags) + "}")
        return wrap("m.def(", arguments, ");", indent=2)

    def impl(self, device: str) -> str:
        function = f"&{self.op.namespace}::{device}::{self.name}"
        if self.op.registration == "stable_abi":
            function = f"TORCH_BOX({function})"
        return f'm.impl("{self.name}", {function});'


def _norms():
    """lang/cpp_norms.py, which writes a row normalisation's functor with this module's helpers."""
    from . import cpp_norms

    return cpp_norms


def _host_op(op: Op) -> CppOp:
    """The op as its host function prints it: kopgen's kernel (a functor in a loop), or the user's."""
    from .cpp_user import CustomCppOp  # which extends CppOp

    return CppOp(op) if type(op.body) in LOOPS else CustomCppOp(op)


def cpu_ops(package: Package) -> tuple[CppOp, ...]:
    """The ops with a C++ CPU kernel: each has a host function in csrc/ops.cpp."""
    return tuple(_host_op(op) for op in package.cpp_ops)


def cuda_ops(package: Package) -> tuple[CppOp, ...]:
    """The ops with a CUDA kernel: each has a host function in csrc/cuda/ops.cpp."""
    return tuple(_host_op(op) for op in package.cuda_ops)


def cpu_functor_ops(package: Package) -> tuple[CppOp, ...]:
    """The ops whose C++ CPU kernel kopgen writes: a functor each, run by pointwise.h's loops."""
    return tuple(CppOp(op) for op in package.cpp_ops if type(op.body) in LOOPS)


def cuda_functor_ops(package: Package) -> tuple[CppOp, ...]:
    """The ops whose CUDA kernel kopgen writes: a functor and a launcher each (kernels.cu)."""
    return tuple(CppOp(op) for op in package.cuda_ops if type(op.body) in LOOPS)


def compiled_ops(package: Package) -> tuple[CppOp, ...]:
    """The ops the extension defines (TORCH_LIBRARY), whatever their kernels."""
    return tuple(CppOp(op) for op in package.compiled_ops)


def dtypes(package: Package) -> tuple[Dtype, ...]:
    """Every dtype a compiled kernel of the package dispatches on (float64 too where an op has
    gradients: gradcheck runs in float64)."""
    listed = {dtype for op in package.compiled_ops for dtype in op.dtypes}
    listed |= {dtype for op in package.compiled_ops for dtype in autocast.kernel_dtypes(op)}  # autocast runs them in
    if any(op.has_gradients for op in package.compiled_ops):
        listed.add("float64")
    return tuple(d for d in DTYPES if d.name in listed)


def dtype_names(package: Package) -> str:
    return ", ".join(d.name for d in dtypes(package))


def check_macro(package: Package) -> str:
    """The torch check KOPGEN_CHECK stands for: the stable ABI's throws std::runtime_error."""
    return "STD_TORCH_CHECK" if package.stable_abi else "TORCH_CHECK"


def library_header(package: Package) -> str:
    return "torch/csrc/stable/library.h" if package.stable_abi else "torch/library.h"


def library_macro(package: Package) -> str:
    return "STABLE_TORCH_LIBRARY" if package.stable_abi else "TORCH_LIBRARY"


def impl_macro(package: Package) -> str:
    return "STABLE_TORCH_LIBRARY_IMPL" if package.stable_abi else "TORCH_LIBRARY_IMPL"


def ops_cpp_summary(package: Package) -> str:
    """The comment that opens csrc/ops.cpp: what it holds, and where the CUDA kernels are."""
    held = "their schemas and CPU kernels" if package.cpp_ops else "their schemas"
    if package.cpp_ops and not cpu_functor_ops(package):
        held = "their schemas and the host functions of their CPU kernels"
    lines = [f"// The operators of torch.ops.{package.namespace} built in C++: {held}."]
    if package.cuda_ops:
        lines.append("// Their CUDA kernels are in cuda/.")
    if package.compiled_custom_ops:
        lines.append("// The kernels you write are declared in kernels.h.")
    return "\n".join(lines)


def cuda_ops_summary(package: Package) -> str:
    """The comment that opens csrc/cuda/ops.cpp: what its host functions do around which kernels."""
    lines = [f"// The CUDA side of torch.ops.{package.namespace}: "]
    if cuda_functor_ops(package):
        lines = [lines[0] + "each op's host function names its tensors; the",
                 "// launch below sets the device guard and the current stream around the launchers of kernels.cu."]
        if package.compiled_custom_ops:
            lines.append("// The kernels you write (declared in ../kernels.h) get them from their host functions.")
    else:
        lines = [lines[0] + "each op's host function checks its tensors, allocates",
                 "// its outputs and calls your kernel (declared in ../kernels.h) on the current stream."]
    return "\n".join(lines)


def sources(package: Package) -> str:
    """setup.py's `SOURCES = [...]`: ops.cpp, then the user's C++ files (laid out as ruff does)."""
    from .cpp_user import user_sources

    return layout.statement("SOURCES = " + json.dumps([f"{package.name}/csrc/ops.cpp", *user_sources(package, "cpu")]), 0)


def cuda_sources(package: Package) -> str:
    """setup.py's `CUDA_SOURCES = [...]`: kopgen's CUDA files, then the user's (laid out as ruff does)."""
    from .cpp_user import user_sources

    sources = []
    if package.cuda_ops:
        sources.append(f"{package.name}/csrc/cuda/ops.cpp")
        if cuda_functor_ops(package):
            sources.append(f"{package.name}/csrc/cuda/kernels.cu")
        sources += user_sources(package, "cuda")
    return layout.statement("CUDA_SOURCES = " + json.dumps(sources), 0)


def source_files(package: Package) -> list[str]:
    """setup.py's lines after SOURCES and CUDA_SOURCES: the user's own C++ and CUDA files in the package's csrc/
    (a helper .cpp, a second .cu: extension-cpp compiles its whole csrc/ so), and DEPENDS, every header and CUDA
    file, which setuptools puts in the sdist that `python -m build` makes the wheel from (without them the
    wheel did not build: no kernels.h)."""
    from .cpp_user import user_sources

    csrc = f"{package.name}/csrc"
    lines = []
    if package.compiled_custom_ops:  # the user writes into csrc/, and kernels.h is there for their files
        lines += ["# Your own files beside your kernels (a helper .cpp, a second .cu) compile with them.",
                  layout.statement(f'SOURCES += [path for path in files("{csrc}", ".cpp", ".cc") if path not in SOURCES]',
                                   0)]
        if package.cuda_ops:
            lines.append(layout.statement(f'CUDA_SOURCES += [path for path in files("{csrc}/cuda", ".cu", ".cpp") '
                                          "if path not in CUDA_SOURCES]", 0))
    # The folders of bound files outside csrc/ (the repo's own csrc/): their headers, for the sdist.
    folders = sorted({str(PurePosixPath(path).parent) for device in ("cpu", "cuda")
                      for path in user_sources(package, device) if not path.startswith(f"{csrc}/")})
    depends = [f'files("{csrc}", *HEADERS, ".cu", ".cpp", ".cc", deep=True)']
    depends += [f'files("{folder}", *HEADERS, deep={folder != "."})' for folder in folders]
    lines += ["# The sdist, which `python -m build` builds the wheel from, holds every header and CUDA file too:",
              "# setuptools adds an extension's `depends` to it.",
              'HEADERS = (".h", ".hpp", ".cuh", ".inl")',
              layout.statement("DEPENDS = " + " + ".join(depends), 0)]
    return lines


def requirements(package: Package) -> str:
    """setup.py's `REQUIREMENTS = [...]` of a TORCH_LIBRARY package: torch's C++ API changes with each release, so
    the wheel requires the torch it is built against (its major.minor, added by setup.py), and what else it needs."""
    others = ["triton>=3.4"] * package.needs_triton + ["numpy"] * package.needs_interpreter
    items = ['f"torch=={TORCH_VERSION}.*"', *map(json.dumps, others)]
    return layout.statement(f"REQUIREMENTS = [{', '.join(items)}]", 0)
