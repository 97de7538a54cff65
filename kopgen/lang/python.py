"""This module translates the model into the generated Python: the typed API (ops.py), the
registration with its fake kernels and autograd (_registration.py), the PyTorch references
(reference.py) and the `python` kernels (the shared helpers are lang/support.py's, the benchmark's
lang/bench.py's).

As torchgen's api/python.py does for its bindings: functions over the model's Op and Package
that return Python source, which the templates print. Layout follows `ruff format`'s defaults
(88 columns, double quotes, magic trailing commas), so that the generated files are formatted
as they are written.
"""

from __future__ import annotations

import textwrap
import unicodedata
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ..backward_kernel import RowGradient
from ..expr import fake_source, is_dynamic
from ..model import Arg, CustomKernel, FakeOutput, Kernel, Op, Package, PointwiseCompute, RowNormalization, RowReduction
from ..names import locals_for, module_name
from ..schema import python_annotation, python_default
from ..split import GatedSplit, SplitGradient
from . import fusion, layout
from .layout import LINE_LENGTH, literal, wrap

# -- signatures and calls


def parameters(op: Op) -> list[str]:
    """`a: Tensor, b: Tensor, *, alpha: float = 1.0`: the parameters of the API and the kernels."""
    return _with_star(op, [_parameter(op, i) for i in range(len(op.args))])


def _parameter(op: Op, index: int) -> str:
    arg = op.args[index]
    text = f"{arg.name}: {python_annotation(arg.schema.type)}"
    default = python_default(arg.schema)
    return text if default is None else f"{text} = {layout.requote(default)}"


def _with_star(op: Op, parts: list[str]) -> list[str]:
    """`parts` (one per argument) with `*` before the first keyword-only one."""
    first = next((i for i, a in enumerate(op.args) if a.schema.kwarg_only), None)
    return parts if first is None else [*parts[:first], "*", *parts[first:]]


def define(name: str, op: Op, indent: int = 0, first: Sequence[str] = (), returns: str | None = None) -> str:
    """The `def` line of a function over the op's arguments (after `first`), returning the op's result."""
    returns = return_annotation(op) if returns is None else returns
    return wrap(f"def {name}(", [*first, *parameters(op)], f") -> {returns}:", indent)


def call_args(op: Op) -> list[str]:
    """How a Python function passes the op's arguments on: keyword-only ones by name."""
    return [f"{a.name}={a.name}" if a.schema.kwarg_only else a.name for a in op.args]


def call(function: str, op: Op, indent: int = 0, first: Sequence[str] = (), prefix: str = "") -> str:
    """The statement `prefix` + a call of `function` on the op's arguments (after `first`)."""
    return layout.statement(prefix + call_text(function, op, first), indent)


def call_text(function: str, op: Op, first: Sequence[str] = ()) -> str:
    """A call of `function` on the op's arguments (after `first`), on one line."""
    return f"{function}({', '.join([*first, *call_args(op)])})"


def return_annotation(op: Op) -> str:
    """The returned Tensors: None where the op returns nothing (it only writes its arguments)."""
    if returns_list(op):
        return "list[Tensor]"
    return _tensors(op.num_outputs) if op.num_outputs else "None"


def returns_list(op: Op) -> bool:
    """`-> Tensor[]` (a custom kernel's only return): the outputs, as many as `fake` lists, in one list."""
    return [str(r.type) for r in op.schema.returns] == ["Tensor[]"]


def output_target(op: Op) -> str:
    """What the outputs of the op's allocator are unpacked into: `out`, `out0, out1`, or `(out,)` from a list."""
    names = op.output_names
    return f"({names[0]},)" if returns_list(op) and len(names) == 1 else ", ".join(names)


def returned(op: Op) -> str:
    """The op's outputs as its launcher returns them: `out`, `out0, out1`, or the list `[out0, out1]`."""
    names = ", ".join(op.output_names)
    return f"[{names}]" if returns_list(op) else names


def _tensors(count: int) -> str:
    return "Tensor" if count == 1 else f"tuple[{', '.join(['Tensor'] * count)}]"


def docstring(text: str, indent: str) -> str:
    """`text` made safe inside \"\"\"...\"\"\": no escape sequences, no closing quotes, control and invisible
    characters escaped (ruff refuses a zero-width space as it stands); lines indented, as ruff leaves them
    (no trailing spaces, blank lines empty)."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    text = "".join(_escaped(c) if c not in "\n " and unicodedata.category(c) in _UNSEEN else c for c in text)
    return "\n".join(f"{indent}{line.rstrip()}" if line.strip() else "" for line in text.splitlines())[len(indent):]


_UNSEEN = ("Cc", "Cf", "Zl", "Zp", "Zs")  # controls, format characters (zero-width), separators, odd spaces


def _escaped(character: str) -> str:
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def doc(op: Op) -> str:
    """The op's doc as the body of its API function's docstring."""
    return docstring(op.doc.strip(), indent="    ")


def description(package: Package) -> str:
    """The description as the first lines of the package's docstring."""
    return docstring(package.description.strip() or package.name, indent="")


def api_import(package: Package) -> str:
    """__init__.py's import of the API functions."""
    names = sorted(op.name for op in package.ops)
    one_line = f"from .ops import {', '.join(names)}"
    return one_line if len(one_line) <= LINE_LENGTH else wrap("from .ops import (", names, ")", explode=True)


def handle(op: Op) -> str:
    """ops.py's module-level name of the op's OpOverload (and _registration.py's of its custom op)."""
    return module_name(op, "handle")


def handle_definition(op: Op) -> str:
    """ops.py's `_op = torch.ops.<namespace>.<op>.default`, laid out as ruff does for long names."""
    return layout.assign(handle(op), f"torch.ops.{op.namespace}.{op.name}.default", 0)


def exports(package: Package) -> str:
    """__init__.py's `__all__`."""
    return wrap("__all__ = [", [literal(name) for name in sorted(op.name for op in package.ops)], "]")


def api_imports(package: Package) -> list[str]:
    """The imports of ops.py above `torch`: `Sequence` where the signatures take lists."""
    return typing_imports(package.ops)


def registration_typing_imports(package: Package) -> list[str]:
    """_registration.py's standard-library imports and a blank line: `Sequence`, where a triton_op takes a list
    (its body's annotations are its schema: torch.library.triton_op infers it from them); `Path` for
    stale_build_check."""
    lines = typing_imports([op for op in package.ops if op.is_triton_op])[:1]
    if stale_build_check(package):
        lines.append("from pathlib import Path")
    return [*lines, ""] if lines else []


def _annotations(ops: Sequence[Op]) -> list[str]:
    return [python_annotation(a.schema.type) for op in ops for a in op.args]


def typing_imports(ops: Sequence[Op]) -> list[str]:
    """`from collections.abc import Sequence` and a blank line, where the ops' signatures take lists (`int[]`, `Tensor[]`)."""
    return ["from collections.abc import Sequence", ""] if any("Sequence[" in a for a in _annotations(ops)) else []


def annotations_need_torch(ops: Sequence[Op]) -> bool:
    """Whether the ops' signatures name torch's types (`torch.dtype` for ScalarType, `torch.Generator`, ...)."""
    return any("torch." in a for a in _annotations(ops))


# -- _registration.py


def section(package: Package, op: Op) -> str:
    """The comment that opens an op's part of _registration.py, `# ns::op ---...` to the line length,
    after two blank lines (one right after the imports, as isort has it)."""
    title = f"# {op.qualname} "
    after_imports = op is package.ops[0] and not library_fragment(package)
    return ("\n" if after_imports else "\n\n") + title + "-" * max(3, LINE_LENGTH - len(title))


def kernels_module(op: Op) -> str:
    """The name _registration.py and the benchmark import the op's kernels module under."""
    return module_name(op, "kernels")


def registration_imports(package: Package) -> list[str]:
    """The imports of _registration.py after `import torch`."""
    triton_ops = any(op.is_triton_op for op in package.ops)
    lines = ["from torch import Tensor", "from torch.library import wrap_triton"] if triton_ops else []
    lines.append("")
    reference = ", reference" if fusion.traces_references(package) else ""  # what torch.compile traces
    if package.compiled_ops:
        block = "STABLE_TORCH_LIBRARY" if package.stable_abi else "TORCH_LIBRARY"
        lines += [f"# Importing _C loads the extension, whose {block} block defines the compiled ops.",
                  f"from . import _C, _support{reference}  # noqa: F401"]
    elif any(op.mutated_writes or not sized_by_data(op) for op in package.ops):  # the others' fakes allocate
        lines.append(f"from . import _support{reference}")
    lines += [f"from .kernels import {op.name} as {kernels_module(op)}" for op in with_python_kernels(package)]
    return [*lines, *bound_imports(package, ".", after_imports=lines[-1] != "")]


def with_python_kernels(package: Package) -> list[Op]:
    """The ops with a kernels/<op>.py: a Python kernel that is not an existing function bound to it."""
    return sorted((op for op in package.ops if op.unbound_python_kernels), key=lambda op: op.name)


def bound_imports(package: Package, prefix: str, after_imports: bool = True) -> list[str]:
    """The imports of the existing Python functions the spec binds as kernels, each under the name
    `bound_kernel` gives it (the user's own name could be one of the module's); `after_imports`: a blank
    line first, which ruff's isort and format want between an import and the comment above these."""
    lines = []
    for op in package.ops:
        for kernel in op.python_kernels:
            if bound := op.bound_kernel(kernel.device):
                module = prefix + bound.path.removesuffix(".py").split("/", 1)[1].replace("/", ".")
                name = f"{bound.function} as {bound_kernel(op, kernel.device)}"
                one_line = f"from {module} import {name}"
                lines.append(one_line if len(one_line) <= LINE_LENGTH else wrap(f"from {module} import (", [name], ")"))
    if lines:
        lines[:0] = [""] * after_imports + ["# Existing kernels the spec binds (`kernel: {source: ...}`): yours, never written by kopgen."]
    return lines


def bound_kernel(op: Op, device: str) -> str:
    """The name a bound function is imported under: `<op>_<device>_kernel`."""
    return module_name(op, f"{device}_kernel")


def registered_kernel(op: Op, kernel: Kernel) -> str:
    """The Python function registered as `kernel`: an existing function bound to its device, or kernels/<op>.py's."""
    return bound_kernel(op, kernel.device) if op.bound_kernel(kernel.device) else kernel_function(op, kernel.language)


def stale_build_check(package: Package) -> list[str]:
    """A stable-ABI package's check that no build of the torch_library route (left from before the spec
    changed) lies beside its _C.abi3.so: Python would load that _C.cpython-*.so first, and run its old kernels."""
    if not (package.compiled_ops and package.stable_abi):
        return []
    return ["", "# Python loads a _C.cpython-*.so before _C.abi3.so: one left by a build of the torch_library",
            "# route would run its old kernels instead of this stable-ABI build.",
            'if any(Path(__file__).parent.glob("_C.cpython-*")):',
            "    raise ImportError(",
            '        f"{Path(__file__).parent} holds a build of the torch_library route (_C.cpython-*), "',
            '        "which Python loads before this stable-ABI build: delete it and build again"',
            "    )"]


def library_fragment(package: Package) -> list[str]:
    """The Library fragment of _registration.py, where the `library` route defines its ops or
    compiled ops get Python kernels; no lines where nothing needs one."""
    purposes = []
    if any(op.registration == "library" for op in package.ops):
        purposes.append("the `library` route defines its ops on it")
    if any(op.is_compiled and op.python_kernels for op in package.ops):
        purposes.append("Python kernels of compiled ops are added to it")
    if any(op.backward is not None and op.backward.stats for op in package.ops):
        purposes.append("normalisations define the op that saves their statistics on it")
    if not purposes:
        return []
    comment = textwrap.wrap(f"A fragment of the namespace: {'; '.join(purposes)}.", 97)
    return ["", *(f"# {line}" for line in comment), f'_lib = torch.library.Library("{package.namespace}", "FRAGMENT")']


def definition_template(op: Op) -> str:
    """The part of _registration.py that defines the op and registers its kernels, by route."""
    route = "compiled" if op.is_compiled else op.registration
    return f"package/_registration/{route}.py.j2"


def kernel_function(op: Op, language: str) -> str:
    """The Python kernel of `language` (triton, python), as _registration.py reaches it."""
    return f"{kernels_module(op)}.{op.stem}_{language}"


def _kernels_by_language(op: Op) -> list[tuple[str, str]]:
    """(device_types, kernel) per kernel function of a custom_op (one per language, one per bound function):
    the first is defined with the op (which kernel is first only changes which call registers it)."""
    devices: dict[str, list[str]] = {}
    for kernel in sorted(op.python_kernels, key=lambda k: (k.language, k.device)):
        devices.setdefault(registered_kernel(op, kernel), []).append(kernel.device)
    return [(literal(tuple(each)), function) for function, each in devices.items()]


def primary_kernel(op: Op) -> str:
    """The kernel torch.library.custom_op defines the op with (`primary_devices` its device_types)."""
    return _kernels_by_language(op)[0][1]


def primary_devices(op: Op) -> str:
    return _kernels_by_language(op)[0][0]


def register_other_kernels(op: Op) -> list[str]:
    """The custom_op's kernels of its other languages, registered after it."""
    return [wrap(f"{handle(op)}.register_kernel(", [devices, kernel]) for devices, kernel in _kernels_by_language(op)[1:]]


def register_kernels(op: Op) -> list[str]:
    """A triton_op's kernels, registered per device for eager calls."""
    return [wrap(f"{handle(op)}.register_kernel(", [literal(k.device), _eager_kernel(op, k)]) for k in op.kernels]


def _eager_kernel(op: Op, kernel: Kernel) -> str:
    """The kernel eager calls of a device run: a user's launcher runs CUDA tensors inside the device guard of
    cuda_launcher (in _registration.py); the others are registered as they are."""
    if op.body.user_writes_kernel and kernel.device == "cuda":
        return cuda_launcher(op)
    return registered_kernel(op, kernel)


def cuda_launcher(op: Op) -> str:
    """_registration.py's eager CUDA kernel of a triton_op whose launcher is the user's."""
    return module_name(op, "cuda_launcher")


def cuda_launcher_call(op: Op, indent: int) -> str:
    """The user's launcher, as the eager CUDA kernel calls it (wrap left at its default)."""
    return call(kernel_function(op, "triton"), op, indent, prefix="return ")


def user_launcher_traced(op: Op) -> bool:
    """Whether a triton_op's body calls the user's launcher (kernel: custom) rather than kopgen's launch."""
    return op.is_triton_op and op.body.user_writes_kernel


def tags_argument(op: Op) -> list[str]:
    """custom_op's `tags=` argument: none where the op has no tags."""
    return [tags_literal(op)] if op.tags else []


def cpu_handle(op: Op) -> str:
    """_registration.py's name of a triton_op's CPU op."""
    return module_name(op, "cpu_op")


def traced_launch(op: Op) -> str:
    """A triton_op's body on CUDA: the kernel launched through wrap_triton, which torch.compile traces."""
    kernels = kernels_module(op)
    if op.body.user_writes_kernel:  # the user's launcher launches each kernel as wrap(kernel)[grid](...)
        arguments = [*call_args(op), f"{locals_for(op).wrap}=wrap_triton"]
        return layout.statement(f"return {kernel_function(op, 'triton')}({', '.join(arguments)})", 4)
    launch, kernel = (locals_for(op).derived(kind, op.stem) for kind in ("launch", "kernel"))
    return call(f"{kernels}.{launch}", op, 4, first=[f"wrap_triton({kernels}.{kernel})"], prefix="return ")


def triton_op_decorator(op: Op) -> str:
    return wrap("@torch.library.triton_op(", [literal(op.qualname), f"mutates_args={mutates_args(op)}"])


def not_differentiable_message(op: Op) -> str:
    """What asking for the gradient of an op without formulas raises, from Python or C++ autograd."""
    if op.backward_of:  # kopgen's backward kernel (backward_kernel.py): a second derivative takes the formulas
        return f"{op.qualname} is not differentiable: it is the backward kernel of {op.namespace}::{op.backward_of}"
    return f"{op.qualname} is not differentiable: its spec has no backward formulas"


def not_differentiable_error(op: Op) -> str:
    return wrap("raise RuntimeError(", [literal(not_differentiable_message(op))], ")", 4)


def setup_context_function(op: Op) -> str:
    """_registration.py's setup_context of the op's autograd formula."""
    return module_name(op, "setup_context")


def backward_function(op: Op) -> str:
    """_registration.py's backward of the op's autograd formula."""
    return module_name(op, "backward")


def register_no_autograd(op: Op) -> str:
    return wrap("torch.library.register_autograd(",
                [literal(op.qualname), backward_function(op), f"setup_context={setup_context_function(op)}"])


def impls(op: Op) -> list[str]:
    """`_lib.impl(...)` of each Python kernel."""
    return [wrap("_lib.impl(", [literal(op.name), registered_kernel(op, k), literal(k.dispatch_key)])
            for k in op.python_kernels]


def library_define(op: Op) -> str:
    tags = [f"tags={tags_literal(op)}"] if op.tags else []
    return wrap("_lib.define(", [literal(op.schema_text), *tags])


def compiled_comment(op: Op) -> str:
    names = {"cpp": "C++ CPU kernel", "cuda": "CUDA kernel"}
    kernels = " and ".join(names[k.language] for k in op.kernels if k.is_compiled)
    python = "; the Python kernel is added here" if op.python_kernels else ""
    return f"# Defined by the extension, with its {kernels}{python}."


def mutates_args(op: Op) -> str:
    return literal(tuple(a.name for a in op.args if a.schema.is_mutated))


def tags_literal(op: Op) -> str:
    return literal(tuple(Code(f"torch.Tag.{tag}") for tag in op.tags))


class Code(str):
    """Python source that `literal` prints as it is."""

    def __repr__(self) -> str:
        return str(self)


def cpu_op(op: Op) -> str:
    """A triton_op's CPU kernel as an op of its own (tracing never enters it): its qualified name."""
    return f"{op.namespace}::_{op.stem}_cpu"  # unique in the namespace: no op's name starts with `_`


def fake_target(op: Op) -> str:
    """The op the fake kernel is registered for: a triton_op's body is its own fake kernel,
    so there the fake describes its CPU op."""
    return cpu_op(op) if op.is_triton_op and op.cpu_kernel else op.qualname


def fake_decorator(op: Op) -> str:
    return wrap("@torch.library.register_fake(", [literal(fake_target(op))])


def fake_define(op: Op) -> str:
    """The fake kernel's `def`: untyped, with the defaults the dispatcher drops trailing arguments at."""
    parts = []
    for arg in op.args:
        default = python_default(arg.schema)
        parts.append(arg.name if default is None else f"{arg.name}={layout.requote(default)}")
    return wrap(f"def {module_name(op, 'fake')}(", _with_star(op, parts), "):")


def fake_body(op: Op) -> list[str]:
    """The fake kernel's body: a mutating op's checks, or the output described from metadata."""
    if op.mutated_writes:
        return ["    # Only checks: the op writes its arguments in place and returns nothing.",
                "    " + check_written(op, indent=4)]
    if not op.num_outputs:  # a custom kernel's writes have no metadata kopgen could check
        return [f"    # Nothing to describe: the op writes {names_of(op.mutated_args)} in place and returns nothing.",
                "    return None"]
    if sized_by_data(op):
        return dynamic_fake_body(op)
    if op.num_outputs == 1 or allocates_all(op):
        noun = "outputs" if op.num_outputs > 1 else "output"
        return [f"    # Only metadata: the same {noun} the launcher allocates, never reading data.",
                "    " + layout.assign("return", allocate(op), 4)]
    names = op.output_names
    return ["    # Only metadata: the same outputs the launcher allocates, never reading data.",
            *("    " + layout.assign(name, allocate(op), 4) for name in names),
            "    " + returns(names, 4)]


def sized_by_data(op: Op) -> bool:
    """A custom op with an output whose size only the data decides (`dynamic()`): its launcher allocates it."""
    return isinstance(op.body, CustomKernel) and any(is_dynamic(o.shape) for o in op.body.outputs)


def dynamic_fake_body(op: Op) -> list[str]:
    """A custom op whose output size only the data decides: a new symbolic size from the fake context."""
    device = f"{op.lead.name}.device"
    outputs = [empty_output(o, fake_source(o.shape, "ctx"), device) for o in op.body.outputs]
    lines = ["    # Only metadata: a size the data decides is a new symbol (the launcher allocates the real output).",
             "    ctx = torch.library.get_ctx()"]
    if len(outputs) == 1:
        return lines + ["    " + layout.assign("return", outputs[0], 4)]
    return lines + ["    " + wrap("return (", outputs, ")", 4, explode=True)]


def empty_output(output: FakeOutput, shape: str, device: str) -> str:
    """One output's allocation: contiguous, or with the strides `fake` gives (a kernel that writes it transposed)."""
    if output.strides is None:
        return f"torch.empty({shape}, dtype={output.dtype}, device={device})"
    return f"torch.empty_strided({shape}, {output.strides}, dtype={output.dtype}, device={device})"


def written_dict(op: Op) -> str:
    """`{"out": out}`: the mutated arguments by name, for the shape checks of _support."""
    return "{" + ", ".join(f'"{w.name}": {w.name}' for w in op.mutated_args) + "}"


def check_written(op: Op, indent: int) -> str:
    """The shape and dtype checks of a mutating op, before it writes."""
    tensors = [a.name for a in op.kernel_args]  # a `split` argument's halves, as the kernel reads them
    return wrap("_support.check_written(", [literal(op.qualname), written_dict(op), *tensors], ")", indent)


def output_allocator(op: Op) -> str:
    """The _support function that allocates (and fake kernels describe) the output."""
    return _kind(op).allocator(op)


def allocate(op: Op) -> str:
    """The call that allocates the op's output (each of them: outputs share their shape), or all its outputs."""
    return f"_support.{output_allocator(op)}({', '.join(_kind(op).allocator_args(op))})"


def _qualname_and_tensors(op: Op) -> list[str]:
    """What the shared allocators take: the op's name for messages, and its Tensors (a `split` one's halves)."""
    return [literal(op.qualname), *(a.name for a in op.kernel_args)]


def _normalization_allocator(op: Op) -> str:
    if op.body.column_sums:
        return "norm_gradient_outputs"
    return "norm_gradient_output" if op.body.row_stats else "normalization_output"


def _normalization_tensors(op: Op) -> list[str]:
    """A normalisation's backward kernel's saved statistics apart (float32 beside bfloat16: their dtype
    is checked apart, by norm_gradient_output), then the inputs of its gradients summed over the rows
    (norm_gradient_outputs), then its other Tensors."""
    row_stats, sums = op.body.row_stats, [c.like for c in op.body.column_sums]
    if not row_stats and not sums:
        return _qualname_and_tensors(op)
    likes = [tuple_expression(sums)] if sums else []
    others = [a.name for a in op.kernel_args if a.name not in row_stats]
    return [literal(op.qualname), tuple_expression(row_stats), *likes, *others]


def autograd_template(op: Op) -> str:
    """What _registration.py registers for autograd: the formulas, an error, or nothing (mutating ops)."""
    if op.cpp_autograd:  # the extension registers it (lang/cpp_autograd.py)
        return "package/_registration/cpp_autograd.py.j2"
    if op.backward and op.backward.stats:  # a normalisation's forward saves its statistics (lang/norms.py)
        return "package/_registration/saved_stats.py.j2"
    if op.backward:
        return "package/_registration/autograd.py.j2"
    return "package/_registration/no_autograd.py.j2" if op.is_mutating else "package/_registration/not_differentiable.py.j2"


def tuple_target(names: Sequence[str]) -> str:
    """The target of an unpacking assignment, as ruff writes a single one: `(x,)`."""
    return f"({names[0]},)" if len(names) == 1 else ", ".join(names)


def tuple_expression(names: Sequence[str]) -> str:
    """A tuple of the names as Python source: `(x,)`, `(a, b)`, `()`."""
    return f"({', '.join(names)}{',' if len(names) == 1 else ''})"


def names_of(args: Sequence[Arg]) -> str:
    return ", ".join(a.name for a in args)


def returns(values: Sequence[str], indent: int) -> str:
    """`return a, b`: a tuple, `(a,)` where it has one value."""
    value = f"({values[0]},)" if len(values) == 1 else ", ".join(values)
    return layout.statement(f"return {value}", indent)


# -- what differs between op kinds: one row per kind, the one place this module chooses by kind


class _Kind(NamedTuple):
    allocator: Callable[[Op], str]  # the _support function that allocates (and fake kernels describe) its outputs
    allocator_args: Callable[[Op], list[str]]  # what that function is called with
    allocates_all: bool = False  # one call allocates all its outputs (else one call per output)


_KINDS = {
    PointwiseCompute: _Kind(lambda op: "pointwise_output", _qualname_and_tensors),
    RowReduction: _Kind(lambda op: "reduction_output", _qualname_and_tensors),
    RowNormalization: _Kind(_normalization_allocator, _normalization_tensors),
    GatedSplit: _Kind(lambda op: "pointwise_output", _qualname_and_tensors),
    SplitGradient: _Kind(lambda op: "joined_output", _qualname_and_tensors),
    RowGradient: _Kind(lambda op: "pointwise_output", _qualname_and_tensors),
    CustomKernel: _Kind(lambda op: f"{op.stem}_output", call_args, allocates_all=True),
}


def allocates_all(op: Op) -> bool:
    """Whether one call of the allocator gives all the op's outputs (a custom kernel's; a normalisation's
    backward kernel's with gradients summed over the rows, each in its input's shape)."""
    return _kind(op).allocates_all or bool(getattr(op.body, "column_sums", ()))


def _kind(op: Op) -> _Kind:
    return _KINDS[type(op.body)]
