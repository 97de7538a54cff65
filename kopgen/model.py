"""Resolve a checked spec tree into the frozen model that the templates print.

Everything a template needs is computed here (argument lists, kernels per device,
what backward saves and under which condition), so templates only print.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import __version__
from .expr import Formula, Pointwise
from .names import output_names
from .schema import Argument, FunctionSchema

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
DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA"}
DEFAULT_SHAPE = (8, 6)
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

    @property
    def is_mutated(self) -> bool:
        return self.schema.is_mutated


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
    read: bool
    written: bool
    optional: bool = False  # a Tensor? input: None (a null pointer in C++) when not given


@dataclass(frozen=True)
class Write:
    """One tensor a compute op writes: a returned Tensor, or a mutated argument."""

    expr: Pointwise
    name: str  # `out`, `out0`, ... for returns; the argument's name for a mutated argument
    arg: Arg | None = None  # the mutated argument

    @property
    def buffer(self) -> str:
        """The dense tensor the kernel writes: a returned output itself, a copy of a strided argument."""
        return self.name if self.arg is None else f"{self.name}_dense"


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
    stem: str = ""  # the op in generated names (`scale` for `scale_`), unique in its package; see resolve.with_stems

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
    def kernel_tensors(self) -> tuple[KernelTensor, ...]:
        """The Tensors a kernel reads or writes: the arguments it touches, then the returned outputs."""
        written = {w.arg.name: w for w in self.mutated_writes}
        read = {a.name for a in self.read_args}
        tensors = []
        for arg in self.tensor_args:
            if arg.name in written:
                buffer = written[arg.name].buffer
                tensors.append(KernelTensor(arg.name, buffer, arg.name in read, True))
            elif arg.name in read:
                tensors.append(KernelTensor(arg.name, arg.name, True, False, arg.is_optional))
        tensors += [KernelTensor(w.name, w.name, False, True) for w in self.writes if w.arg is None]
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
            return output_names([a.name for a in self.args], self.num_outputs)
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
    def is_triton_op(self) -> bool:
        return self.registration == "triton_op"

    @property
    def cpu_kernel(self) -> Kernel | None:
        return next((k for k in self.kernels if k.device == "cpu"), None)

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
    def has_gradients(self) -> bool:
        """Whether some input has a formula (all may be non_differentiable)."""
        return self.backward is not None and any(g.formula for g in self.backward.gradients)

    # -- compiled routes (their C++ and CUDA text is kopgen/lang/cpp.py's)

    @property
    def is_compiled(self) -> bool:
        return self.registration in COMPILED_ROUTES

    @property
    def python_kernels(self) -> tuple[Kernel, ...]:
        return tuple(k for k in self.kernels if not k.is_compiled)

    def has_kernel(self, device: str, language: str) -> bool:
        return Kernel(device, language) in self.kernels



def _docstring_body(text: str, indent: str) -> str:
    """`text` made safe inside \"\"\"...\"\"\": no escape sequences, no closing quotes; lines indented."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return f"\n{indent}".join(text.splitlines())


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
    def cuda_ops(self) -> tuple[Op, ...]:
        """Ops with a CUDA kernel."""
        return tuple(op for op in self.ops if op.has_kernel("cuda", "cuda"))

