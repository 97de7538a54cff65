"""Resolve a checked spec tree into the model: per op its schema, kind, route, kernels, backward and tests.

Every problem goes to the Diagnostics at its YAML node. An op with a problem gives no model, but
the other ops are still resolved, so that the user sees every error of the spec at once.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

from . import __version__
from .backward import mark_not_twice_differentiable, resolve_backward
from .backward_kernel import with_backward_kernels
from .errors import Diagnostics, Position
from .expr import ExprError
from .kinds import check_list_return, resolve_kind
from .lang import autocast
from .lang.cpp_autograd import autograd_in_cpp
from .lang.cpp_types import cpp_type_problem
from .lang.eager import direct_calls
from .loader import Mapping, Node, Scalar, plain
from .model import (
    BUILTIN_DEFAULTS,
    DEFAULT_SHAPE,
    Arg,
    CustomKernel,
    Device,
    Kernel,
    Language,
    Op,
    Package,
    Route,
)
from .names import check_argument_names, check_cpp_names, check_op_name, check_package_names, module_level_names
from .project import resolve_project
from .samples import resolve_sample_args
from .schema import Argument, FunctionSchema, ListType, OptionalType, SchemaError, parse_schema
from .split import half_width_samples


def resolve(root: Mapping, spec_text: str, diagnostics: Diagnostics,
            stems: dict[str, str] | None = None) -> Package | None:
    """Build the model from a tree that passed check_format; report semantic errors. `stems`: the stems the
    repo's files were written under, which the ops keep (with_stems)."""
    package = root.get("package").value
    namespace_node = root.get("namespace")
    namespace = namespace_node.value if namespace_node else package
    namespace_at = (namespace_node or root.get("package")).value_position
    check_package_names(root, namespace, namespace_at, diagnostics)
    project = resolve_project(root, diagnostics)
    defaults = root.get("defaults")
    op_nodes = root.get("ops").items
    own_ops, mutating, returns = _own_ops(op_nodes)
    ops = []
    seen: dict[str, tuple[str, Position]] = {}  # by the name in lower case: files differ in case only on some systems
    compiled_route = None
    for node in op_nodes:
        resolver = OpResolver(node, defaults, namespace, own_ops, diagnostics, mutating, namespace_at, package)
        resolver.own_op_returns = returns
        op = resolver.resolve()
        if op is None:
            continue
        if op.registration.is_compiled:
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
    if diagnostics.items:
        return None
    ops = with_backward_kernels(ops, namespace)
    mark_not_twice_differentiable(ops)
    ops = with_stems(ops, stems or {})
    # Resolved once: where each formula translates, the op's autograd is C++ (lang/cpp_autograd.py).
    ops = [dataclasses.replace(op, cpp_autograd=True) if autograd_in_cpp(op, ops) else op for op in ops]
    ops = [dataclasses.replace(op, backward=dataclasses.replace(op.backward, direct_calls=direct_calls(op, ops)))
           if op.backward else op for op in ops]
    return Package(
        name=package,
        namespace=namespace,
        version=_text(root.get("version"), "0.1.0"),
        description=_text(root.get("description"), ""),
        ops=tuple(ops),
        spec_text=spec_text,
        project=project,
    )


def _own_ops(op_nodes: tuple[Mapping, ...]) -> tuple[frozenset[str], frozenset[str], dict[str, int]]:
    """The names of the spec's ops, which its formulas may call, those whose schema mutates an
    argument, which they may not, and how many values each returns (a call of several is indexed)."""
    names, mutating, returns = set(), set(), {}
    for node in op_nodes:
        schema = node.get("schema").value
        name = schema.split("(", 1)[0].strip()
        names.add(name)
        try:
            parsed = parse_schema(schema)
        except SchemaError:
            continue  # reported with the op
        returns[name] = len(parsed.returns)
        if parsed.mutated_arguments:
            mutating.add(name)
    return frozenset(names), frozenset(mutating), returns


def with_stems(ops: list[Op], pinned: dict[str, str] | None = None) -> list[Op]:
    """Each op with the stem of its generated names: its name, less the trailing `_` of an in-place op
    (`scale_cpu_kernel`, not `scale__cpu_kernel`). Where that stem is another op's name or stem (`scale`
    beside `scale_`), `scale_inplace`; where that is taken too, the op's own name, which no other op has.
    `pinned`: the stems the repo's files were written under (.kopgen/state.json), which their ops keep, so
    that an op added later never renames another's files: `scale` added beside `scale_` (stem `scale`)
    becomes `scale_functional`. A pinned op gone from the spec keeps its stem too (its kernel is kept; the op
    added back takes it back), so no newcomer takes it. And the names the op binds at module level, settled
    package-wide."""
    names = {op.name for op in ops}
    kept: dict[str, str] = {}
    for name, stem in (pinned or {}).items():  # checked: the state may have been edited by hand
        if name in names and stem.isidentifier() and stem.startswith(name.rstrip("_")) and stem not in kept.values():
            kept[name] = stem
    gone = {stem for name, stem in (pinned or {}).items() if name not in names}  # reserved for the op's return
    used = set(kept.values()) | gone
    stems = {}
    for op in ops:
        base = op.name.rstrip("_")
        if op.name in kept:
            candidates: tuple[str, ...] = (kept[op.name],)
        elif base == op.name or not base:
            candidates = (op.name, f"{op.name}_functional")
        else:
            candidates = (base, f"{base}_inplace", op.name)
        free = [s for s in candidates if op.name in kept or (s not in used and (s == op.name or s not in names))]
        stem = free[0] if free else next(s for n in itertools.count(2) if (s := f"{op.name}_{n}") not in used | names)
        used.add(stem)
        stems[op.name] = stem
    # the names each op binds at module level (_registration.py, ops.py), unique in the package
    module_names = module_level_names([stems[op.name] for op in ops])
    return [dataclasses.replace(op, stem=stems[op.name], module_names=tuple(names.items()))
            for op, names in zip(ops, module_names, strict=True)]


def _text(node: Node | None, default: str) -> str:
    # check_format let only real strings through; str() here would turn a stray !!binary into "b'...'"
    return default if node is None else node.value


class OpResolver:
    """Resolves one op entry; every problem goes to `diagnostics` at its node."""

    def __init__(self, node: Mapping, defaults: Mapping | None, namespace: str, own_ops, diagnostics,
                 mutating_ops: frozenset[str] = frozenset(), namespace_at: Position | None = None, package: str = ""):
        self.node = node
        self.package = package  # the import package, which holds a Python kernel bound from a file (bound.py)
        self.defaults = defaults
        self.namespace = namespace
        self.own_ops = own_ops
        self.mutating_ops = mutating_ops  # those of own_ops that write an argument: no formula may call them
        self.own_op_returns: dict[str, int] = {}  # how many values each of own_ops returns (resolve sets it)
        self.namespace_at = namespace_at or node.position  # where the spec sets the namespace
        self.diagnostics = diagnostics

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
            self.error(node.value_position.shifted(each.line, each.column), each.message)

    def resolve(self) -> Op | None:
        errors_before = len(self.diagnostics.items)
        schema_node = self.node.get("schema")
        schema = self.parse_schema(schema_node)
        if schema is None:
            return None
        args = tuple(Arg(a, i) for i, a in enumerate(schema.arguments))
        body = resolve_kind(self, schema, args)
        registration = self.resolve_registration()
        if registration.is_compiled:
            check_cpp_names(self.namespace, self.namespace_at, schema_node, schema, self.error)
            self.check_stable_abi_tags()
            if isinstance(body, CustomKernel):  # the user's C++ function takes each argument in its C++ type
                for arg in schema.arguments:
                    problem = cpp_type_problem(arg, registration)
                    if problem:
                        self.error(schema_node.value_position.shifted(0, arg.column), f"{registration}: {problem}")
        if registration is Route.TRITON_OP:
            self.check_triton_op()
            check_triton_op_arguments(schema, schema_node.value_position, self.error)
        kernels = self.resolve_backends(registration)
        backward = resolve_backward(self, schema, args, body)
        shapes, atol, rtol = self.resolve_tests(args)
        sample_args = half_width_samples(self, args, body, resolve_sample_args(self, args, body))
        if len(self.diagnostics.items) > errors_before:
            return None
        doc = self.setting("doc")
        return Op(
            name=schema.name,
            namespace=self.namespace,
            schema=schema,
            doc=doc.value if doc is not None and doc.value.strip() else f"{self.namespace}::{schema.name}",
            args=args,
            body=body,
            registration=registration,
            kernels=kernels,
            dtypes=tuple(plain(self.setting("dtypes")) if self.setting("dtypes") else BUILTIN_DEFAULTS["dtypes"]),
            tags=tuple(plain(self.setting("tags"))) if self.setting("tags") is not None else _default_tags(registration),
            shapes=shapes,
            atol=atol,
            rtol=rtol,
            backward=backward,
            sample_args=sample_args,
            autocast=autocast.resolve(self, body, schema),
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
        check_op_name(schema.name, name_at, self.error)
        check_argument_names(schema, at, self.error)
        if schema.namespace is not None:
            self.error(at, f"write the schema without a namespace; it comes from `namespace:` ('{self.namespace}')")
        if schema.overload is not None:
            self.error(at, "overload names are not supported; give the op its own name")
        alias_sets: dict[str, str] = {}
        for arg in schema.arguments:
            if arg.annotation is not None and not arg.annotation.is_write:
                self.error(at, f"argument '{arg.name}' is annotated as an alias; only mutation, `Tensor(a!)`, is allowed")
            elif arg.annotation is not None and arg.annotation.alias_set is not None:
                # One alias set for two arguments says they may be the same memory, which no kernel handles.
                first = alias_sets.setdefault(arg.annotation.alias_set, arg.name)
                if first != arg.name:
                    self.error(at.shifted(0, arg.column), f"arguments '{first}' and '{arg.name}' share the alias set "
                                                          f"'{arg.annotation.alias_set}'; give each its own, or write `Tensor!`")
        _check_writes_something(self, schema, node)
        for ret in schema.returns:
            if ret.annotation is not None:
                self.error(at, "operators must not return (views of) their inputs: return a new Tensor, or `()` from a mutating op")
            elif str(ret.type) == "Tensor[]" and len(schema.returns) == 1:
                check_list_return(self, schema, at)
            elif str(ret.type) != "Tensor":
                hint = ": return a fixed number, `-> (Tensor, Tensor)`" if ret.type.is_tensor_like else ""
                self.error(at, f"ops return Tensors in kopgen {__version__}; '{ret.type}' returns are not supported{hint}")
        return schema

    def check_triton_op(self) -> None:
        """What torch.library.triton_op cannot take: tags."""
        tags = self.setting("tags")
        if tags is not None and tags.items:
            self.error(tags.position, "torch.library.triton_op takes no tags; use registration custom_op or library for tagged ops")

    def check_stable_abi_tags(self) -> None:
        tags = self.setting("tags")
        if tags is not None and tags.items and self.setting("registration").value == "stable_abi":
            self.error(
                tags.position,
                "stable_abi ops cannot carry tags: the stable ABI of torch 2.10, which kopgen targets, "
                "defines schemas without them",
            )

    # -- registration and backends

    def resolve_registration(self) -> Route:
        node = self.setting("registration")
        return Route(node.value if node else BUILTIN_DEFAULTS["registration"])  # check_format allows only Routes

    def resolve_backends(self, registration: Route) -> tuple[Kernel, ...]:
        node = self.setting("backends")
        backends = plain(node) if node else BUILTIN_DEFAULTS["backends"]
        kernels = []
        for device, language in sorted(backends.items()):
            device, language = Device(device), Language(language)  # check_format allows only these
            if not registration.is_compiled and language.is_compiled:
                compiled = "torch_library or stable_abi"
                self.error(
                    node.get(device).position,  # only a spec's own backends can conflict
                    f"registration '{registration}' takes Python kernels (triton, python); "
                    f"{device}: {language} needs registration: {compiled}",
                )
            kernels.append(Kernel(device, language))
        if registration is Route.TRITON_OP and backends.get("cuda") != "triton":
            where = node.position if node is not None else self.setting("registration").value_position
            self.error(
                where,
                "registration 'triton_op' wraps a CUDA Triton kernel (wrap_triton) for torch.compile to trace into: "
                "set cuda: triton, or use registration: library",
            )
        if registration.is_compiled and kernels and not any(k.is_compiled for k in kernels):
            where = node.position if node is not None else self.setting("registration").value_position
            self.error(
                where,
                f"registration '{registration}' compiles C++/CUDA kernels, but backends has none: "
                f"set cpu: cpp and/or cuda: cuda, or use registration: library for Python kernels",
            )
        return tuple(kernels)

    # -- tests

    def resolve_tests(self, args: tuple[Arg, ...]):
        node = self.setting("tests")
        tensors = [a.name for a in args if a.is_tensor]
        shapes = []
        shapes_node = node.get("shapes") if node else None
        # A Tensor whose shape `tests: args:` computes from the others needs none in a mapping (its () is replaced).
        args_node = node.get("args") if node else None
        related = {name for name, (_, entry) in args_node.entries.items() if "shape" in entry.entries} if args_node else set()
        for entry in shapes_node.items if shapes_node else ():
            value = plain(entry)
            if isinstance(value, list):
                shapes.append({name: tuple(value) for name in tensors})
                continue
            missing = [name for name in tensors if name not in value and name not in related]
            unknown = [name for name in value if name not in tensors]
            if missing or unknown:
                what = f"has no shape for {', '.join(missing)}" if missing else f"names {', '.join(unknown)}, not a Tensor argument"
                self.error(entry.position, f"this test shape {what}")
                continue
            shapes.append({name: tuple(value.get(name, ())) for name in tensors})
        if not shapes:
            shapes.append({name: DEFAULT_SHAPE for name in tensors})
        atol = node.get("atol") if node else None
        rtol = node.get("rtol") if node else None
        return tuple(shapes), atol.value if atol else None, rtol.value if rtol else None


def check_triton_op_arguments(schema: FunctionSchema, at: Position, error: Callable[[Position, str], None]) -> None:
    """The arguments a triton_op's schema cannot declare. torch.library.triton_op infers the schema from its
    body's annotations and defaults (torch 2.10 to 2.13 ignore its `schema=`), and torch.library.infer_schema
    reads no Layout, MemoryFormat, Generator, str[] or Tensor[]? annotation nor a list default: importing the
    package raised its ValueError."""
    for arg in schema.arguments:
        problem = _triton_op_argument_problem(arg)
        if problem:
            error(at.shifted(0, arg.column), f"torch.library.triton_op infers its schema from the Python signature, "
                                             f"which cannot declare {problem} ('{arg.name}'); use registration "
                                             "custom_op or library, which take the schema as written")


def _triton_op_argument_problem(arg: Argument) -> str | None:
    """What torch.library.infer_schema cannot read from the Python signature of a triton_op's body, if anything."""
    optional = isinstance(arg.type, OptionalType)
    inner = arg.type.elem if optional else arg.type
    listed = isinstance(inner, ListType)
    base = inner.elem.elem if listed and isinstance(inner.elem, OptionalType) else inner.elem if listed else inner
    if str(base) in ("Layout", "MemoryFormat", "Generator"):
        return f"a {base} argument"
    if listed and str(base) == "str":
        return "a str[] argument"
    if listed and optional and str(inner.elem) == "Tensor":
        return "an optional list of Tensors, Tensor[]?"
    if listed and arg.default not in (None, "None"):
        return f"a list default, {arg.default}"
    return None


def _default_tags(registration: Route) -> tuple[str, ...]:
    """Tags of an op whose spec sets none: pt2_compliant_tag, which its generated suite proves
    (opcheck, fullgraph compiles, export), on the routes whose definition takes tags."""
    return () if registration in (Route.TRITON_OP, Route.STABLE_ABI) else ("pt2_compliant_tag",)


def _check_writes_something(resolver: OpResolver, schema: FunctionSchema, node: Scalar) -> None:
    """An op returns a Tensor or writes an argument: one doing neither has nothing to call it for (its generated
    code had no output to return nor argument to compare, and did not import)."""
    if not schema.returns and not any(a.annotation is not None and a.annotation.is_write for a in schema.arguments):
        resolver.error(node.value_position.shifted(0, max(node.value.rfind("->"), 0)), "the op returns nothing and "
                       "writes no argument: return its result (`-> Tensor`), or mark the argument it writes (`Tensor! out`)")
