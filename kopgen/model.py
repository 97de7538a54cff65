"""Resolve a checked spec tree into the frozen model that the templates print.

Everything a template needs is computed here (argument lists, kernels per device,
what backward saves and under which condition), so templates only print.
"""

from __future__ import annotations

import ast
import dataclasses
import keyword
import re
from dataclasses import dataclass
from functools import cached_property

from . import __version__
from .errors import Diagnostics, Position
from .expr import ExprError, Formula, FormulaContext, Pointwise, parse_formula, parse_pointwise
from .loader import Mapping, Node, Scalar, Sequence, plain
from .schema import Argument, FunctionSchema, SchemaError, parse_schema, python_annotation, python_default

BUILTIN_DEFAULTS = {
    "registration": "custom_op",
    "backends": {"cpu": "triton", "cuda": "triton"},
    "dtypes": ["float32"],
}
# Routes and kernels this version of kopgen generates; the SPEC lists more.
AVAILABLE_ROUTES = ("custom_op", "library")
PYTHON_KERNELS = ("triton", "python")
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
        *("torch", "tl", "triton", "math", "Tensor", "reference"),
        *("kernel", "grid", "n_elements", "compute_dtype", "offsets", "mask", "BLOCK_SIZE", "COMPUTE_DTYPE"),
    }
)
RESERVED_PATTERN = re.compile(r"^(_.*|out\d+|grad_.*|.*_ptr|.*_shape)$")
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
        """'tensor', 'float', 'int', 'bool' or 'other' (what the pointwise language may use)."""
        text = str(self.schema.type)
        if text == "Tensor":
            return "tensor"
        return {"float": "float", "int": "int", "SymInt": "int", "bool": "bool"}.get(text, "other")

    @property
    def is_tensor(self) -> bool:
        return self.kind == "tensor"

    @property
    def python_parameter(self) -> str:
        """The parameter as written in a Python signature: `alpha: float = 1.0`."""
        text = f"{self.name}: {python_annotation(self.schema.type)}"
        default = python_default(self.schema)
        return text if default is None else f"{text} = {default}"

    @property
    def sample_value(self) -> str:
        return SAMPLE_SCALARS[self.kind]


@dataclass(frozen=True)
class Saved:
    """A value that setup_context keeps for backward, and when it is needed."""

    name: str  # its name inside backward (`b`, `result`)
    source: str  # how setup_context reaches it (`b`, `output`, `output[1]`)
    needed_by: tuple[int, ...]  # indices of the inputs whose gradient formula reads it

    @property
    def condition(self) -> str:
        return " or ".join(f"ctx.needs_input_grad[{i}]" for i in self.needed_by)


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
    arg_names: tuple[str, ...]
    differentiable_twice: bool  # every function the formulas call has a derivative

    @property
    def single_output(self) -> bool:
        return self.num_outputs == 1

    @property
    def results_tuple(self) -> str:
        """`results` for formulas of multi-output ops: saved outputs, None for the others."""
        saved = {s.name for s in self.saved_tensors}
        if self.single_output or not any(name.startswith("result") for name in saved):
            return ""
        names = [f"result{i}" if f"result{i}" in saved else "None" for i in range(self.num_outputs)]
        return "(" + ", ".join(names) + ")"

    @property
    def inputs_unpacked(self) -> str:
        """`a, b, _` for setup_context: the inputs it keeps something of, `_` for the rest."""
        kept = {s.source for s in self.saved_tensors + self.saved_metadata} | set(self.scalars)
        kept |= {g.arg.name for g in self.gradients if g.formula}
        names = [name if name in kept else "_" for name in self.arg_names]
        return ", ".join(names) + ("," if len(names) == 1 else "")

    @property
    def saved_tensor_names(self) -> str:
        return ", ".join(s.name for s in self.saved_tensors)

    def gradient_for(self, arg: Arg) -> Gradient | None:
        return next((g for g in self.gradients if g.arg == arg), None)


@dataclass(frozen=True)
class Kernel:
    device: str  # 'cpu' or 'cuda'
    language: str  # 'triton' or 'python'

    @property
    def dispatch_key(self) -> str:
        return DISPATCH_KEYS[self.device]


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
    outputs: tuple[Pointwise, ...]  # one expression per returned Tensor
    registration: str
    kernels: tuple[Kernel, ...]  # sorted by device
    dtypes: tuple[str, ...]
    tags: tuple[str, ...]
    shapes: tuple[dict[str, tuple[int, ...]], ...]  # the "normal" test shapes, per Tensor argument
    atol: float | None
    rtol: float | None
    backward: Backward | None

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
    def python_signature(self) -> str:
        """`a: Tensor, b: Tensor, c: float`, with `*` before keyword-only arguments."""
        parts: list[str] = []
        for arg in self.args:
            if arg.schema.kwarg_only and "*" not in parts:
                parts.append("*")
            parts.append(arg.python_parameter)
        return ", ".join(parts)

    @property
    def call_args(self) -> str:
        """How the Python API passes its parameters on: keyword-only ones by name."""
        return ", ".join(f"{a.name}={a.name}" if a.schema.kwarg_only else a.name for a in self.args)

    @property
    def arg_names(self) -> str:
        return ", ".join(a.name for a in self.args)

    @property
    def tensor_arg_names(self) -> str:
        return ", ".join(a.name for a in self.tensor_args)

    @property
    def return_annotation(self) -> str:
        if len(self.outputs) == 1:
            return "Tensor"
        return f"tuple[{', '.join(['Tensor'] * len(self.outputs))}]"

    @property
    def output_names(self) -> tuple[str, ...]:
        return ("out",) if len(self.outputs) == 1 else tuple(f"out{i}" for i in range(len(self.outputs)))

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
    def triton_parameters(self) -> tuple[str, ...]:
        """Kernel parameters: input and output pointers, then the scalars the expressions read."""
        pointers = [f"{a.name}_ptr" for a in self.tensor_args] + [f"{o}_ptr" for o in self.output_names]
        return tuple(pointers + [a.name for a in self.triton_scalars])

    @property
    def triton_arguments(self) -> str:
        return ", ".join([a.name for a in self.tensor_args] + list(self.output_names) + [a.name for a in self.triton_scalars])

    @property
    def doc_literal(self) -> str:
        """The doc as the body of a triple-quoted docstring (quotes and backslashes escaped)."""
        text = self.doc.strip().replace("\\", "\\\\").replace('"', '\\"')
        return "\n    ".join(text.splitlines())

    @property
    def mutates_args_literal(self) -> str:
        names = [a.name for a in self.args if a.schema.is_mutated]
        return repr(tuple(names))

    @property
    def tags_literal(self) -> str:
        return "(" + "".join(f"torch.Tag.{tag}, " for tag in self.tags).rstrip() + ")"

    @property
    def backward_returns(self) -> str:
        """One gradient per argument, as backward returns them: None where there is none."""
        parts = []
        for arg in self.args:
            gradient = self.backward.gradient_for(arg) if self.backward else None
            parts.append(f"grad_{arg.name}" if gradient and gradient.formula else "None")
        return ", ".join(parts) + ("," if len(parts) == 1 else "")

    @property
    def uses_interpreter(self) -> bool:
        return "cpu" in self.devices_for("triton")

    @property
    def uses_compiled_triton(self) -> bool:
        return "cuda" in self.devices_for("triton")

    @property
    def triton_scalars(self) -> tuple[Arg, ...]:
        """Non-Tensor arguments the kernel reads (passed to it as scalars)."""
        used = {name for output in self.outputs for name in output.names}
        return tuple(a for a in self.args if not a.is_tensor and a.name in used)

    @property
    def positive_inputs(self) -> bool:
        """Whether tests draw inputs from (0.5, 1.5): the expressions use log, sqrt, ..."""
        called = set()
        for output in self.outputs:
            for node in ast.walk(ast.parse(output.text, mode="eval")):
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
            label = "normal" if len(self.shapes) == 1 else f"normal{i}"
            samples.append(self._sample(label, lambda a, shapes=shapes: _make(shapes[a.name])))
        first = self.shapes[0]
        samples.append(self._sample("empty", lambda a: _make((0,) + first[a.name][1:])))
        samples.append(self._sample("noncontiguous", lambda a: _strided(first[a.name])))
        if len(self.tensor_args) > 1 and first[self.tensor_args[0].name]:
            lead = self.tensor_args[0].name
            samples.append(
                self._sample("broadcast", lambda a: _make(first[a.name] if a.name == lead else first[a.name][-1:]))
            )
        return tuple(samples)

    @property
    def samples_with_resized(self) -> tuple[Sample, ...]:
        """The samples, plus one of other sizes that dynamic-shape compiles run on."""
        first = self.shapes[0]
        resized = self._sample("resized", lambda a: _make(tuple(n + 3 for n in first[a.name])))
        return self.samples + (resized,)

    @property
    def gradient_args(self) -> tuple[Arg, ...]:
        """Tensors the tests ask gradients of: those with a formula (all, for an op without backward)."""
        if self.backward is None:
            return self.tensor_args
        return tuple(g.arg for g in self.backward.gradients if g.formula)

    def sample_arguments(self, sample: Sample) -> str:
        """Python source of a sample's arguments; differentiable tensors made leaves."""
        parts = [f"leaf({text})" if arg in self.gradient_args else text for arg, text in zip(self.args, sample.args)]
        return ", ".join(parts) + ("," if len(parts) == 1 else "")

    @property
    def api_call_from_args(self) -> str:
        """A call of the Python API on `args`, keyword-only arguments by name."""
        return ", ".join(
            f"{a.name}=args[{a.index}]" if a.schema.kwarg_only else f"args[{a.index}]" for a in self.args
        )

    @property
    def export_call(self) -> str:
        """The op called in an exported module: Tensors as inputs, scalars as constants."""
        return ", ".join(
            (f"{a.name}={value}" if a.schema.kwarg_only else value)
            for a in self.args
            for value in [a.name if a.is_tensor else a.sample_value]
        )

    @property
    def tolerances_literal(self) -> str:
        """assert_close's keyword arguments: its per-dtype defaults unless the spec sets tolerances."""
        if self.atol is None and self.rtol is None:
            return "{}"
        return repr({"atol": self.atol or 0.0, "rtol": self.rtol or 0.0})

    def _sample(self, label, make_tensor) -> Sample:
        return Sample(label, tuple(make_tensor(a) if a.is_tensor else a.sample_value for a in self.args))


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
    def needs_tensor_metadata(self) -> bool:
        return any(op.backward and op.backward.saved_metadata for op in self.ops)

    @property
    def reference_uses_torch(self) -> bool:
        return any("torch." in output.to_torch() for op in self.ops for output in op.outputs)

    @property
    def reference_uses_math(self) -> bool:
        return any("math." in output.to_torch() for op in self.ops for output in op.outputs)

    @property
    def typing_imports(self) -> tuple[str, ...]:
        """The `typing` names the signatures of ops.py use."""
        text = " ".join(op.python_signature for op in self.ops)
        return tuple(name for name in ("Optional", "Sequence", "Union") if f"{name}[" in text)

    @property
    def repo_spec_text(self) -> str:
        """The spec as the repo keeps it: headed by a line that points editors at its JSON Schema."""
        if self.spec_text.startswith(SCHEMA_MODELINE):
            return self.spec_text
        return f"{SCHEMA_MODELINE}\n{self.spec_text}"

    @property
    def routes(self) -> tuple[str, ...]:
        return tuple(sorted({op.registration for op in self.ops}))


# --------------------------------------------------------------------------- resolve


def resolve(root: Mapping, spec_text: str, diagnostics: Diagnostics) -> Package | None:
    """Build the model from a tree that passed check_format; report semantic errors."""
    package = root.get("package").value
    namespace_node = root.get("namespace")
    namespace = namespace_node.value if namespace_node else package
    defaults = root.get("defaults")
    op_nodes = root.get("ops").items
    names = {}
    for node in op_nodes:
        schema_node = node.get("schema")
        name = schema_node.value.split("(", 1)[0].strip()
        names.setdefault(name, schema_node)
    own_ops = frozenset(names)
    ops = []
    seen: dict[str, Position] = {}
    for node in op_nodes:
        op = _OpResolver(node, defaults, namespace, own_ops, diagnostics).resolve()
        if op is None:
            continue
        if op.name in seen:
            diagnostics.error(
                node.get("schema").position,
                f"op '{op.name}' is defined twice (first at line {seen[op.name].line})",
            )
        seen.setdefault(op.name, node.get("schema").position)
        ops.append(op)
    _mark_not_twice_differentiable(ops)
    if diagnostics.items:
        return None
    return Package(
        name=package,
        namespace=namespace,
        version=_text(root.get("version"), "0.1.0"),
        description=_text(root.get("description"), ""),
        ops=tuple(ops),
        spec_text=spec_text,
    )


def _text(node: Node | None, default: str) -> str:
    return default if node is None else str(node.value)


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

    def __init__(self, node: Mapping, defaults: Mapping | None, namespace: str, own_ops, diagnostics):
        self.node = node
        self.defaults = defaults
        self.namespace = namespace
        self.own_ops = own_ops
        self.diagnostics = diagnostics

    def setting(self, key: str) -> Node | None:
        """The op's own value for `key`, else the spec's `defaults`."""
        value = self.node.get(key)
        if value is None and self.defaults is not None:
            value = self.defaults.get(key)
        return value

    def error(self, position: Position, message: str) -> None:
        self.diagnostics.error(position, message)

    def resolve(self) -> Op | None:
        errors_before = len(self.diagnostics.items)
        schema_node = self.node.get("schema")
        schema = self.parse_schema(schema_node)
        if schema is None:
            return None
        args = tuple(Arg(a, i) for i, a in enumerate(schema.arguments))
        outputs = self.resolve_kind(schema, args)
        registration = self.resolve_registration()
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
            doc=doc.value if doc is not None else f"{self.namespace}::{schema.name}",
            args=args,
            outputs=outputs,
            registration=registration,
            kernels=kernels,
            dtypes=tuple(plain(self.setting("dtypes")) if self.setting("dtypes") else BUILTIN_DEFAULTS["dtypes"]),
            tags=tuple(plain(self.setting("tags")) or ()) if self.setting("tags") else (),
            shapes=shapes,
            atol=atol,
            rtol=rtol,
            backward=backward,
        )

    # -- schema

    def parse_schema(self, node: Scalar) -> FunctionSchema | None:
        try:
            schema = parse_schema(node.value)
        except SchemaError as error:
            self.error(node.value_position.shifted(0, error.column), error.message)
            return None
        at = node.value_position
        for name in [schema.name] + [a.name for a in schema.arguments]:
            if keyword.iskeyword(name) or keyword.issoftkeyword(name):
                self.error(at, f"'{name}' is a Python keyword; ops and arguments become Python names")
            elif name != schema.name and (name in RESERVED_NAMES or RESERVED_PATTERN.match(name)):
                self.error(at, f"argument name '{name}' is reserved for the generated code; rename it")
        if schema.namespace is not None:
            self.error(at, f"write the schema without a namespace; it comes from `namespace:` ('{self.namespace}')")
        if schema.overload is not None:
            self.error(at, "overload names are not supported; give the op its own name")
        for arg in schema.arguments:
            if arg.annotation is not None and not arg.annotation.is_write:
                self.error(at, f"argument '{arg.name}' is annotated as an alias; only mutation, `Tensor(a!)`, is allowed")
        for ret in schema.returns:
            if ret.annotation is not None:
                self.error(at, "operators must not return (views of) their inputs: return a new Tensor, or `()` from a mutating op")
            elif str(ret.type) != "Tensor":
                self.error(at, f"ops return Tensors; '{ret.type}' returns are not supported")
        return schema

    # -- kind

    def resolve_kind(self, schema: FunctionSchema, args: tuple[Arg, ...]) -> tuple[Pointwise, ...]:
        kinds = [k for k in ("compute", "reduce", "kernel") if self.node.get(k) is not None]
        if len(kinds) != 1:
            message = "an op needs exactly one of compute, reduce or kernel"
            if kinds:
                message += f"; it has {' and '.join(kinds)}"
            self.error(self.node.position if not kinds else self.node.key_position(kinds[1]), message)
            return ()
        kind = kinds[0]
        if kind != "compute":
            self.error(self.node.key_position(kind), f"'{kind}' ops are not supported by kopgen {__version__} yet; use compute")
            return ()
        node = self.node.get("compute")
        if schema.mutated_arguments or isinstance(node, Mapping):
            self.error(node.position, f"mutating ops are not supported by kopgen {__version__} yet")
            return ()
        for arg in args:
            if arg.schema.kwarg_only:
                self.error(
                    self.node.get("schema").value_position,
                    f"keyword-only arguments are not supported by kopgen {__version__} yet ('{arg.name}')",
                )
                return ()
            if arg.kind == "other":
                self.error(
                    self.node.get("schema").value_position,
                    f"compute ops take Tensor, float, int and bool arguments; '{arg.name}' is {arg.schema.type}",
                )
                return ()
        expressions = list(node.items) if isinstance(node, Sequence) else [node]
        if len(expressions) != len(schema.returns):
            self.error(
                node.position,
                f"compute gives {len(expressions)} expression(s) but the schema returns {len(schema.returns)} Tensor(s)",
            )
            return ()
        kinds_by_name = {a.name: a.kind for a in args}
        outputs = []
        for expression in expressions:
            try:
                outputs.append(parse_pointwise(expression.value, kinds_by_name))
            except ExprError as error:
                self.error(_inside(expression, error), error.message)
        used = {name for output in outputs for name in output.names}
        for arg in args:
            if arg.is_tensor and outputs and arg.name not in used:
                self.error(node.position, f"Tensor argument '{arg.name}' is not used by compute")
        return tuple(outputs)

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
            if registration in ("custom_op", "library") and language not in PYTHON_KERNELS:
                compiled = "torch_library or stable_abi"
                self.error(
                    node.get(device).position,  # only a spec's own backends can conflict
                    f"registration '{registration}' takes Python kernels (triton, python); "
                    f"{device}: {language} needs registration: {compiled}",
                )
            kernels.append(Kernel(device, language))
        return tuple(kernels)

    # -- backward

    def resolve_backward(self, schema: FunctionSchema, args: tuple[Arg, ...]) -> Backward | None:
        node = self.node.get("backward")
        if node is None:
            return None
        context = FormulaContext(
            arg_kinds={a.name: a.kind for a in args},
            num_outputs=len(schema.returns),
            namespace=self.namespace,
            own_ops=self.own_ops,
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
                    self.error(_inside(value, error), error.message)
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
    saved_tensors = [Saved(name, name, tuple(users)) for name, users in sorted(value_users.items(), key=lambda kv: order[kv[0]])]
    for output, users in sorted(result_users.items()):
        if num_outputs == 1:
            saved_tensors.append(Saved("result", "output", tuple(users)))
        else:
            saved_tensors.append(Saved(f"result{output}", f"output[{output}]", tuple(users)))
    saved_metadata = tuple(
        Saved(name, name, tuple(users))
        for name, users in sorted(metadata_users.items(), key=lambda kv: order[kv[0]])
        if name not in value_users
    )
    return Backward(
        gradients=gradients,
        saved_tensors=tuple(saved_tensors),
        saved_metadata=saved_metadata,
        scalars=tuple(sorted(scalars, key=order.get)),
        num_outputs=num_outputs,
        arg_names=tuple(a.name for a in args),
        differentiable_twice=True,
    )
