"""Resolve a checked spec tree into the frozen model that the templates print.

Everything a template needs is computed here (argument lists, kernels per device, what backward saves and when).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, NamedTuple

from . import __version__
from .choices import Autocast, Device, Language, Route
from .expr import Formula, Pointwise
from .model_kinds import RowNormalization
from .project import Project
from .schema import Argument, FunctionSchema

BUILTIN_DEFAULTS = {
    "registration": "custom_op",
    "backends": {"cpu": "triton", "cuda": "triton"},
    "dtypes": ["float32"],
}
DEFAULT_SHAPE = (8, 6)
SCHEMA_MODELINE = "# yaml-language-server: $schema=.kopgen/schema.json"


# the closed sets of the spec live in choices.py; the model's users import them from here


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
    def is_tensor_list(self) -> bool:
        """A `Tensor[]` or `Tensor?[]` (which only `kernel` ops take)."""
        return str(self.schema.type) in ("Tensor[]", "Tensor?[]")

    @property
    def is_any_tensor_list(self) -> bool:
        """A Tensor list, optional or not (`Tensor[]`, `Tensor?[]`, `Tensor[]?`): autograd wants its gradient as
        a list of as many where the call passed one."""
        return str(self.schema.type) in ("Tensor[]", "Tensor?[]", "Tensor[]?")

    @property
    def is_optional(self) -> bool:
        """A `Tensor?`: the op also runs without it (None), where present(name) is false."""
        return self.kind == "optional"

    @property
    def is_mutated(self) -> bool:
        return self.schema.is_mutated


@dataclass(frozen=True)
class SampleArg:
    """How the tests draw one argument (`tests: args: {name: ...}`); None: as for any other argument."""

    name: str
    dtype: str | None = None  # a Tensor's own dtype, kept in every sample (never the op's dtypes)
    low: float | None = None  # a Tensor's values drawn from [low, high)
    high: float | None = None
    value: bool | int | float | str | tuple | None = None  # a non-Tensor argument's value in every sample (lists as tuples)
    shape: str | None = None  # a Tensor's shape from the other arguments (fake's metadata language, Python source)


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
    eager: Formula | None = None  # the formula as written, where `formula` calls the op's backward kernel


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
    stats: tuple[str, ...] = ()  # a normalisation's statistics the formulas read: its forward saves them
    # (op, its kernels): the namespace's ops a Python backward runs without the dispatcher, set by resolve (lang/eager.py)
    direct_calls: tuple[tuple[str, str], ...] = ()

    def gradient_for(self, arg: Arg) -> Gradient | None:
        return next((g for g in self.gradients if g.arg == arg), None)


@dataclass(frozen=True)
class Kernel:
    """One of an op's kernels: the device it serves and the language it is written in."""

    device: Device
    language: Language

    @property
    def dispatch_key(self) -> str:
        return self.device.dispatch_key

    @property
    def is_compiled(self) -> bool:
        return self.language.is_compiled


@dataclass(frozen=True)
class Reduction:
    """A reduction over the last dimension, as each language writes its pieces."""

    kind: str  # sum, mean, max or min

    @property
    def is_mean(self) -> bool:
        return self.kind == "mean"


@dataclass(frozen=True)
class KernelTensor:
    """A Tensor a kernel touches, and what each launcher passes for it."""

    name: str  # the argument or output it stands for
    read: bool
    written: bool
    optional: bool = False  # a Tensor? input: None (a null pointer in C++) when not given


@dataclass(frozen=True)
class Write:
    """One tensor a compute op writes: a returned Tensor, or a mutated argument."""

    expr: Pointwise
    name: str  # `out`, `out0`, ... for returns; the argument's name for a mutated argument
    arg: Arg | None = None  # the mutated argument


# -- op kinds: an op's body is one of these. Each names the templates it renders, by role:
#   "kernels": kernels/<op>.py (the user's, created once, where `user_writes_kernel`);
#   "triton": its Triton kernel and launcher, which the "kernels" template includes;
#   "support": its helpers in _support.py, once per package that has an op of the kind.
#   "dense": its launcher's dense path in _support.py, where an op of the kind has one (lang/dense_launch.py).
# plan.py and the lang modules choose by the body's type: a new kind is a new type here, its
# templates and its translations (a row in each lang module's table of kinds).


@dataclass(frozen=True)
class PointwiseCompute:
    """`compute`: a pointwise expression per returned Tensor, or per mutated argument (in place)."""

    writes: tuple[Write, ...]
    templates: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "kernels": "package/kernels/op.py.j2",
            "triton": "package/kernels/_pointwise.py.j2",
            "dense": "package/_support/dense_pointwise.py.j2",
        }
    )
    user_writes_kernel: ClassVar[bool] = False

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(w.name for w in self.writes if w.arg is None)

    @property
    def imports(self) -> frozenset[str]:
        """The modules its PyTorch expressions call into (torch, math), recorded when they were parsed."""
        return frozenset(m for w in self.writes for m in w.expr.imports)


@dataclass(frozen=True)
class RowReduction:
    """`reduce`: a pointwise expression of the inputs, reduced over the last dimension into one Tensor."""

    reduction: Reduction
    write: Write  # the expression reduced, written to `out`
    templates: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "kernels": "package/kernels/op.py.j2",
            "triton": "package/kernels/_reduction.py.j2",
            "support": "package/_support/rows.py.j2",
            "dense": "package/_support/dense_rows.py.j2",
        }
    )
    user_writes_kernel: ClassVar[bool] = False

    @property
    def writes(self) -> tuple[Write, ...]:
        return (self.write,)

    @property
    def output_names(self) -> tuple[str, ...]:
        return (self.write.name,)

    @property
    def imports(self) -> frozenset[str]:
        return self.write.expr.imports


class FakeOutput(NamedTuple):
    """An output of a custom kernel as its `fake` describes it: Python source over the arguments."""

    shape: str
    dtype: str
    strides: str | None = None  # None: contiguous


@dataclass(frozen=True)
class MutationReference:
    """What a mutated argument of a custom kernel holds after the op: PyTorch over the arguments' values before it."""

    arg: Arg
    reference: Formula


class BoundKernel(NamedTuple):
    """An existing function bound as an op's kernel on one device (`kernel: {source: {DEVICE: PATH:FUNCTION}}`).

    It has the op's own signature; kopgen registers it and never writes PATH.
    """

    device: Device
    path: str  # relative to the repo root
    function: str


@dataclass(frozen=True)
class CustomKernel:
    """`kernel: custom`: the user writes the kernel; the spec gives its oracle and its outputs' metadata."""

    reference: Formula | None  # PyTorch over the arguments: the returned Tensors' oracle (None: the op returns nothing)
    outputs: tuple[FakeOutput, ...]  # per returned Tensor
    output_names: tuple[str, ...]  # `out`, or `out0`, `out1`, ..., renamed past the op's arguments (names.py)
    mutations: tuple[MutationReference, ...] = ()  # one per mutated argument, in schema order
    contiguous: tuple[str, ...] = ()  # the Tensor arguments the kernel receives dense (`contiguous:`)
    bound: tuple[BoundKernel, ...] = ()  # existing functions, per device; a device not bound gets a skeleton
    templates: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"kernels": "package/kernels/custom.py.j2", "support": "package/_support/custom_outputs.py.j2"}
    )
    user_writes_kernel: ClassVar[bool] = True

    @property
    def writes(self) -> tuple[Write, ...]:
        return ()  # kopgen writes no kernel of it

    @property
    def imports(self) -> frozenset[str]:
        # The reference returns the dtypes `fake` gives, torch.int64 and the like.
        fake_dtypes = {"torch"} if any(o.dtype.startswith("torch.") for o in self.outputs) else set()
        references = ([self.reference] if self.reference else []) + [m.reference for m in self.mutations]
        return frozenset(m for r in references for m in r.imports) | fake_dtypes


Body = PointwiseCompute | RowReduction | RowNormalization | CustomKernel
KINDS = (PointwiseCompute, RowReduction, RowNormalization, CustomKernel)  # in the order their "support" helpers are printed


@dataclass(frozen=True)
class Op:
    name: str
    namespace: str
    schema: FunctionSchema
    doc: str
    args: tuple[Arg, ...]
    body: Body  # what the op computes: its kind
    registration: Route
    kernels: tuple[Kernel, ...]  # sorted by device
    dtypes: tuple[str, ...]
    tags: tuple[str, ...]
    shapes: tuple[dict[str, tuple[int, ...]], ...]  # the "normal" test shapes, per Tensor argument
    atol: float | None
    rtol: float | None
    backward: Backward | None
    stem: str = ""  # the op in generated names (`scale` for `scale_`), unique in its package; see resolve.with_stems
    module_names: tuple[tuple[str, str], ...] = ()  # (kind, name): names.module_level_names, by resolve.with_stems
    sample_args: tuple[SampleArg, ...] = ()  # the arguments the spec's `tests: args:` sets
    cpp_autograd: bool = False  # backward in C++ (csrc/ops.cpp), not Python: set by resolve (lang/cpp_autograd.py)
    backward_of: str = ""  # the op whose gradients this backward kernel computes (backward_kernel.py)
    autocast: Autocast = Autocast.NONE  # its rule under torch.autocast (lang/autocast.py)

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
    def writes(self) -> tuple[Write, ...]:
        """The tensors kopgen's kernels write: one per returned Tensor, or one per mutated argument."""
        return self.body.writes

    @property
    def tensor_args(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.is_tensor)

    @property
    def kernel_args(self) -> tuple[Arg, ...]:
        """The Tensor arguments as kopgen's kernels read them: a `split` one as its halves (kopgen/split.py)."""
        return self.body.kernel_args(self.tensor_args) if hasattr(self.body, "kernel_args") else self.tensor_args

    @property
    def lead(self) -> Arg:
        """The first required Tensor argument: outputs take its dtype and device, tests vary it first."""
        return next(a for a in self.tensor_args if not a.is_optional)

    @property
    def optional_args(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.is_optional)

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
    def mutated_args(self) -> tuple[Arg, ...]:
        """The arguments the op writes in place (`Tensor(a!)`, `Tensor!`, `Tensor!?`), in schema order."""
        return tuple(a for a in self.args if a.is_mutated)

    @property
    def is_mutating(self) -> bool:
        return bool(self.mutated_args)

    @property
    def read_args(self) -> tuple[Arg, ...]:
        """Tensor arguments the expressions read, in schema order."""
        used = {name for w in self.writes for name in w.expr.names} | set(getattr(self.body, "reads", ()))
        return tuple(a for a in self.kernel_args if a.name in used)

    @property
    def input_args(self) -> tuple[Arg, ...]:
        """Tensor arguments that are only read (broadcast and made dense by the launchers)."""
        return tuple(a for a in self.read_args if not a.is_mutated)

    @property
    def kernel_tensors(self) -> tuple[KernelTensor, ...]:
        """The Tensors a kernel reads or writes: the arguments it touches, then the returned outputs."""
        written = {w.arg.name for w in self.mutated_writes}
        read = {a.name for a in self.read_args}
        tensors = []
        for arg in self.kernel_args:
            if arg.name in written:
                tensors.append(KernelTensor(arg.name, arg.name in read, True))
            elif arg.name in read:
                tensors.append(KernelTensor(arg.name, True, False, arg.is_optional))
        tensors += [KernelTensor(w.name, False, True) for w in self.writes if w.arg is None]
        return tuple(tensors)

    @property
    def positional_count(self) -> int:
        return sum(1 for a in self.args if not a.schema.kwarg_only)

    @property
    def keyword_only_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.schema.kwarg_only)

    @property
    def num_outputs(self) -> int:
        return len(self.output_names)

    @property
    def output_names(self) -> tuple[str, ...]:
        """The returned Tensors' names: `out`, or `out0`, `out1`, ... (none for a mutating op)."""
        return self.body.output_names

    @property
    def kernel_languages(self) -> tuple[Language, ...]:
        return tuple(sorted({k.language for k in self.kernels}))

    def devices_for(self, language: Language) -> tuple[Device, ...]:
        return tuple(k.device for k in self.kernels if k.language == language)

    @property
    def devices(self) -> tuple[Device, ...]:
        return tuple(k.device for k in self.kernels)

    @property
    def uses_triton(self) -> bool:
        return "triton" in self.kernel_languages

    @property
    def is_triton_op(self) -> bool:
        return self.registration is Route.TRITON_OP

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
        used = {name for w in self.writes for name in w.expr.names} | set(getattr(self.body, "reads", ()))
        return tuple(a for a in self.args if not a.is_tensor and a.name in used)

    @property
    def has_gradients(self) -> bool:
        """Whether some input has a formula (all may be non_differentiable)."""
        return self.backward is not None and any(g.formula for g in self.backward.gradients)

    # -- compiled routes (their C++ and CUDA text is kopgen/lang/cpp.py's)

    @property
    def is_compiled(self) -> bool:
        return self.registration.is_compiled

    @property
    def python_kernels(self) -> tuple[Kernel, ...]:
        return tuple(k for k in self.kernels if not k.is_compiled)

    def bound_kernel(self, device: str) -> BoundKernel | None:
        """The existing function bound as the op's kernel on `device` (`kernel: {source: ...}`), if any."""
        bound = self.body.bound if isinstance(self.body, CustomKernel) else ()
        return next((b for b in bound if b.device == device), None)

    @property
    def unbound_python_kernels(self) -> tuple[Kernel, ...]:
        """The Python kernels of kernels/<op>.py: those no existing function is bound to."""
        return tuple(k for k in self.python_kernels if self.bound_kernel(k.device) is None)

    def has_kernel(self, device: str, language: str) -> bool:
        return Kernel(device, language) in self.kernels

    @property
    def compiled_custom_kernels(self) -> tuple[Kernel, ...]:
        """The C++/CUDA kernels the user writes or binds (a `kernel: custom` op's; see lang/cpp_user.py)."""
        return tuple(k for k in self.kernels if k.is_compiled) if isinstance(self.body, CustomKernel) else ()

    def user_source(self, device: str) -> str:
        """The skeleton of a custom kernel, relative to the package: csrc/<stem>.cpp for the CPU,
        csrc/cuda/<stem>.cu for CUDA (names.py refuses the ops `ops` and `kernels`, whose files
        would meet kopgen's csrc/ops.cpp and cuda/kernels.cu)."""
        return f"csrc/{self.stem}.cpp" if device == "cpu" else f"csrc/cuda/{self.stem}.cu"


@dataclass(frozen=True)
class Package:
    name: str
    namespace: str
    version: str
    description: str
    ops: tuple[Op, ...]
    spec_text: str  # the spec as the user wrote it; the generated repo keeps it as kopgen.yaml
    kopgen_version: str = __version__
    project: Project = field(default_factory=Project)  # license, authors, Python, repository (project.py)

    @property
    def needs_triton(self) -> bool:
        return any("triton" in op.kernel_languages for op in self.ops)

    @property
    def needs_interpreter(self) -> bool:
        return any(op.uses_interpreter for op in self.ops)

    @property
    def kinds(self) -> tuple[type, ...]:
        """The kinds of the package's ops, in KINDS' order."""
        return tuple(kind for kind in KINDS if any(isinstance(op.body, kind) for op in self.ops))

    @property
    def reductions(self) -> tuple[str, ...]:
        """The kinds of reduction the package's ops use (each gets a reference helper)."""
        reduced = [op.body.reduction for op in self.ops if isinstance(op.body, RowReduction)]
        reduced += [s.reduction for op in self.ops if isinstance(op.body, RowNormalization) for s in op.body.stats]
        return tuple(sorted({r.kind for r in reduced}))

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
        """The spec as the repo keeps it: headed by a line that points editors at its JSON Schema (unless
        the spec names a schema of its own there)."""
        if self.spec_text.startswith("# yaml-language-server:"):
            return self.spec_text
        return f"{SCHEMA_MODELINE}\n{self.spec_text}"

    @property
    def compiled_ops(self) -> tuple[Op, ...]:
        return tuple(op for op in self.ops if op.is_compiled)

    @property
    def compiled_route(self) -> Route | None:
        """torch_library or stable_abi (one per package), None without compiled ops."""
        return self.compiled_ops[0].registration if self.compiled_ops else None

    @property
    def stable_abi(self) -> bool:
        return self.compiled_route is Route.STABLE_ABI

    @property
    def cpp_ops(self) -> tuple[Op, ...]:
        """Ops with a C++ CPU kernel."""
        return tuple(op for op in self.ops if op.has_kernel("cpu", "cpp"))

    @property
    def compiled_custom_ops(self) -> tuple[Op, ...]:
        """Ops with a C++/CUDA kernel the user writes (a skeleton) or binds (an existing function)."""
        return tuple(op for op in self.ops if op.compiled_custom_kernels)

    @property
    def cuda_ops(self) -> tuple[Op, ...]:
        """Ops with a CUDA kernel."""
        return tuple(op for op in self.ops if op.has_kernel("cuda", "cuda"))

