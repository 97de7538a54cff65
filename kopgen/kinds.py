"""The op kinds, resolved from the spec: `compute` (pointwise), `reduce` (last dimension), `normalize`
(normalize.py) and `kernel: custom`.

Each gives the op's body, one of model.py's kinds (PointwiseCompute, RowReduction, CustomKernel).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import __version__
from .bound import bind_sources
from .expr import ExprError, Formula, FormulaContext, is_dynamic, parse_formula, parse_metadata, parse_pointwise
from .expr.syntax import did_you_mean
from .loader import Mapping, Node, Scalar, Sequence
from .model import (
    Arg,
    Body,
    CustomKernel,
    FakeOutput,
    MutationReference,
    PointwiseCompute,
    Reduction,
    Route,
    RowReduction,
    Write,
)
from .names import output_names
from .normalize import resolve_normalization
from .schema import FunctionSchema
from .split import resolve_split

if TYPE_CHECKING:
    from .errors import Position
    from .resolve import OpResolver

# Scalar arguments a reduction might be expected to honour; kopgen's reductions are over the last dimension.
REDUCTION_ARGUMENTS = ("dim", "dims", "axis", "keepdim")


def resolve_kind(resolver: OpResolver, schema: FunctionSchema, args: tuple[Arg, ...]) -> Body | None:
    """The op's body: exactly one of `compute`, `reduce` and `kernel: custom`, with what it computes
    (None where it has errors, which are reported)."""
    kinds = [k for k in ("compute", "reduce", "normalize", "kernel") if resolver.node.get(k) is not None]
    if len(kinds) != 1:
        message = "an op needs exactly one of compute, reduce, normalize or kernel"
        if kinds:
            message += f"; it has {' and '.join(kinds)}"
        resolver.error(resolver.node.position if not kinds else resolver.node.key_position(kinds[1]), message)
        return None
    kind = kinds[0]
    at = resolver.node.get("schema").value_position
    if kind != "kernel":
        _refuse_custom_keys(resolver, kind)
    for arg in args:  # each reported; the expressions are checked all the same
        if arg.schema.kwarg_only and arg.is_tensor:
            resolver.error(
                at.shifted(0, arg.schema.column),
                f"keyword-only Tensor arguments are not supported ('{arg.name}'): autograd formulas "
                "differentiate positional inputs only; make it positional",
            )
        if _untaken_by(kind, arg):
            resolver.error(at.shifted(0, arg.schema.column), _untaken(kind, arg))
    if not any(a.kind == "tensor" for a in args):
        lists = [a.name for a in args if a.is_tensor_list]
        why = f" ({', '.join(lists)}: a Tensor list does not count)" if lists else ""
        resolver.error(at, f"an op needs a Tensor argument that is not optional{why}: its output takes that Tensor's "
                           "dtype and device")
        return None
    # the expression languages have no value of that type, nor write a Tensor? or a list
    if any(_untaken_by(kind, a) for a in args):
        return None
    if resolver.node.get("split") is not None:  # kopgen/split.py: compute over a Tensor's halves
        return resolve_split(resolver, args, lambda halved: _resolve_compute(resolver, schema, halved))
    if kind == "reduce":
        return _resolve_reduction(resolver, schema, args)
    if kind == "normalize":
        return resolve_normalization(resolver, schema, args)
    if kind == "kernel":
        return bind_sources(resolver, _resolve_custom(resolver, schema, args), schema)
    return _resolve_compute(resolver, schema, args)


def check_list_return(resolver: OpResolver, schema: FunctionSchema, at: Position) -> None:
    """`-> Tensor[]`: a custom kernel's outputs as one list, as many as its `fake` lists, on the Python routes."""
    registration = resolver.resolve_registration()
    why = None
    if resolver.node.get("kernel") is None:
        why = "a compute or reduce op returns a fixed number of Tensors: return them as `-> (Tensor, Tensor)`"
    elif registration not in (Route.CUSTOM_OP, Route.LIBRARY):
        why = (f"registration '{registration}' does not return lists in kopgen {__version__}: "
               "use custom_op or library, or return a fixed number, `-> (Tensor, Tensor)`")
    elif any(a.annotation is not None for a in schema.arguments):
        why = "an op that mutates arguments returns Tensors, not a list: return a fixed number, `-> (Tensor, Tensor)`"
    elif resolver.node.get("backward") is not None:
        why = "kopgen writes no autograd formula for a list of outputs: return a fixed number, `-> (Tensor, Tensor)`"
    if why:
        resolver.error(at, f"'Tensor[]' returns are for `kernel: custom` ops on custom_op or library; {why}")


def _refuse_custom_keys(resolver: OpResolver, kind: str) -> None:
    """The keys that only describe a user's kernel: kopgen writes a compute or reduce op's kernel, its fake and
    its reference from the expression itself, and would otherwise ignore them."""
    why = {"contiguous": f"kopgen's {kind} kernels take inputs of any strides",
           "reference": f"the tests compare a {kind} op with its own expression in PyTorch",
           "fake": f"a {kind} op's output metadata follows from its expression"}
    for key, reason in why.items():
        if resolver.node.get(key) is not None:
            resolver.error(resolver.node.key_position(key), f"{key} is for `kernel: custom` ops; {reason}")


def _untaken_by(kind: str, arg: Arg) -> bool:
    """A custom kernel takes every schema type and writes Tensor and Tensor? arguments; compute and
    reduce take the types of the expression languages and write plain Tensors."""
    if kind == "kernel":
        return arg.is_mutated and not arg.is_tensor
    return arg.kind == "other" or (arg.is_mutated and arg.kind != "tensor")


def _untaken(kind: str, arg: Arg) -> str:
    """Why the op's kind cannot take `arg`: the expression languages have values of a few types only,
    and write only plain Tensors."""
    declared = str(arg.schema).split(" ")[0]  # its type as written: Tensor(a!)?, int[2]
    if kind == "kernel":  # a mutated list: the tests and fake kernels write single Tensors
        return (f"`kernel: custom` ops write Tensor and Tensor? arguments in kopgen {__version__}; "
                f"'{arg.name}' is {declared}")
    if arg.kind == "other":
        return (f"{kind} ops take Tensor, Tensor?, float, int and bool arguments; '{arg.name}' is {declared}: "
                "a `kernel: custom` op takes it")
    return f"{kind} ops write plain Tensors; '{arg.name}' is {declared}: a `kernel: custom` op writes it"


def _resolve_compute(resolver: OpResolver, schema: FunctionSchema, args: tuple[Arg, ...]) -> PointwiseCompute | None:
    """`compute`: one pointwise expression per returned Tensor, or per mutated argument."""
    node = resolver.node.get("compute")
    mutated = [a for a in args if a.is_mutated]
    if mutated or isinstance(node, Mapping):
        targets = resolve_mutation(resolver, schema, node, mutated)
    else:
        expressions = list(node.items) if isinstance(node, Sequence) else [node]
        if len(expressions) != len(schema.returns):
            resolver.error(
                node.position,
                f"compute gives {len(expressions)} expression(s) but the schema returns {len(schema.returns)} Tensor(s)",
            )
            return None
        names = output_names([a.name for a in args], len(expressions))
        targets = [(name, None, expression) for name, expression in zip(names, expressions)]
    kinds_by_name = {a.name: a.kind for a in args}
    writes = []
    for name, arg, expression in targets:
        try:
            writes.append(Write(parse_pointwise(expression.value, kinds_by_name), name, arg))
        except ExprError as error:
            resolver.expr_errors(expression, error)
    used = {name for w in writes for name in w.expr.names + w.expr.tested}
    for arg in args:
        if arg.is_tensor and not arg.is_mutated and writes and arg.name not in used:
            resolver.error(node.position, f"Tensor argument '{arg.name}' is not used by compute")
    return PointwiseCompute(tuple(writes))


def _resolve_custom(resolver: OpResolver, schema: FunctionSchema, args: tuple[Arg, ...]) -> CustomKernel | None:
    """`kernel: custom`: the user writes the kernel; `reference` and `fake` say what it must compute."""
    at = resolver.node.key_position("kernel")
    errors_before = len(resolver.diagnostics.items)
    reference, fake = resolver.node.get("reference"), resolver.node.get("fake")
    if reference is None:
        resolver.error(at, "a `kernel: custom` op needs `reference`: " + _REFERENCE_HINT[any(a.is_mutated for a in args)])
    if fake is None and schema.returns:
        resolver.error(at, "a `kernel: custom` op needs `fake`: the shape (and dtype) of each output, e.g. {shape: x.shape}")
    elif fake is not None and not schema.returns:
        resolver.error(resolver.node.key_position("fake"), "fake describes returned Tensors, but the schema returns none")
        fake = None
    if any(a.is_mutated for a in args) and resolver.node.get("backward") is not None:
        # torch.library.register_autograd refuses ops that mutate ("non-functional operator")
        resolver.error(resolver.node.key_position("backward"), "torch registers no autograd formula for an op that "
                                                               "mutates arguments; write a functional op to differentiate")
    context = FormulaContext({a.name: a.kind for a in args}, 0, resolver.namespace, resolver.own_ops, resolver.mutating_ops,
                             string_keywords=True)
    formula, mutations = _resolve_references(resolver, schema, args, reference, context)
    outputs = _resolve_fake(resolver, schema, args, fake)
    contiguous = _resolve_contiguous(resolver, args)
    if len(resolver.diagnostics.items) > errors_before:
        return None
    return CustomKernel(formula, tuple(outputs), output_names([a.name for a in args], len(outputs)),
                        mutations=mutations, contiguous=contiguous)


# What `reference` gives, for a functional and for a mutating op.
_REFERENCE_HINT = {
    False: "a PyTorch expression the tests compare the kernel with",
    True: "what each mutated argument holds after the op, e.g. {out: x * 2}",
}


def _parse_reference(resolver: OpResolver, node: Scalar, context: FormulaContext) -> Formula | None:
    try:
        return parse_formula(node.value, context)
    except ExprError as error:
        resolver.expr_errors(node, error)
        return None


def _resolve_references(resolver: OpResolver, schema: FunctionSchema, args: tuple[Arg, ...], node: Node | None,
                        context: FormulaContext) -> tuple[Formula | None, tuple[MutationReference, ...]]:
    """`reference`: the returned Tensors' expression; for a mutating op a mapping, one expression per
    mutated argument (its value after the op) and `return` for what the op also returns."""
    mutated = [a for a in args if a.is_mutated]
    if node is None:
        return None, ()
    if not mutated:
        if isinstance(node, Mapping):
            resolver.error(node.position, "reference is a mapping only for a mutating op (its keys are the mutated "
                                          "arguments); this op mutates none: give the returned Tensors' expression")
            return None, ()
        return _parse_reference(resolver, node, context), ()
    names = ", ".join(a.name for a in mutated)
    if not isinstance(node, Mapping):
        resolver.error(node.position, f"a mutating op's reference gives each mutated argument's value after the op "
                                      f"({names}): write `reference: {{{mutated[0].name}: EXPR}}`")
        return None, ()
    keys = [a.name for a in mutated] + (["return"] if schema.returns else [])
    by_name = {a.name: a for a in mutated}
    formula, mutations = None, []
    for key, (key_node, value) in node.entries.items():
        if key not in keys:
            what = "the op returns nothing" if key == "return" else f"'{key}' is not a mutated argument"
            resolver.error(key_node.position, f"reference names '{key}', but {what} (keys: {', '.join(keys)})"
                                              f"{did_you_mean(key, keys) if key != 'return' else ''}")
        elif key == "return":
            formula = _parse_reference(resolver, value, context)
        else:
            parsed = _parse_reference(resolver, value, context)
            mutations.append(MutationReference(by_name[key], parsed) if parsed else None)
    for key in keys:
        if key not in node.entries:
            what = f"what '{key}' holds after the op" if key != "return" else "the returned Tensors' expression, `return`"
            resolver.error(node.position, f"reference does not give {what}: a mutating op's reference names each "
                                          f"mutated argument ({names})" + (" and `return`" if schema.returns else ""))
    ordered = sorted((m for m in mutations if m), key=lambda m: m.arg.index)
    return formula, tuple(ordered)


def _resolve_fake(resolver: OpResolver, schema: FunctionSchema, args: tuple[Arg, ...], fake: Node | None) -> list:
    """`fake`: the shape, dtype and strides of each returned Tensor, in the metadata language."""
    entries = [] if fake is None else list(fake.items) if isinstance(fake, Sequence) else [fake]
    if [str(r.type) for r in schema.returns] == ["Tensor[]"]:  # a list as long as `fake`'s, as a kernel's outputs are
        if not isinstance(fake, Sequence) or not entries:
            where = fake.position if fake is not None else resolver.node.get("schema").value_position
            resolver.error(where, "a `Tensor[]` return needs `fake` as a list, one entry per Tensor it holds: "
                                          "- {shape: x.shape}")
            entries = []
    elif fake is not None and len(entries) != len(schema.returns):
        resolver.error(fake.position, f"fake describes {len(entries)} output(s) but the schema returns {len(schema.returns)}")
        entries = []
    tensors = [a.name for a in args if a.is_tensor]
    ints = [a.name for a in args if a.kind == "int"]
    dtypes = [a.name for a in args if str(a.schema.type) == "ScalarType"]  # an output of the dtype asked for
    lists = [a.name for a in args if str(a.schema.type) in ("int[]", "SymInt[]")]  # ... or of the shape
    outputs = []
    for entry in entries:
        metadata = []
        for key, default in (("shape", None), ("dtype", f"{tensors[0]}.dtype"), ("strides", None)):
            node = entry.get(key)
            try:
                metadata.append(parse_metadata(node.value, tensors, ints, dynamic=key == "shape",
                                               dtypes=dtypes if key == "dtype" else (),
                                               lists=lists if key == "shape" else ()) if node else default)
            except ExprError as error:
                resolver.expr_errors(node, error)
                metadata.append(None)  # reported: no CustomKernel is made
        if metadata[0] is not None and is_dynamic(metadata[0]):
            _check_dynamic_route(resolver, entry.get("shape"))
        outputs.append(FakeOutput(*metadata))
    return outputs


def _check_dynamic_route(resolver: OpResolver, shape: Node) -> None:
    """A `dynamic()` size: only the Python routes let the user's launcher allocate its own output."""
    route = resolver.resolve_registration()
    if route is Route.TRITON_OP or route.is_compiled:
        how = ("torch.library.triton_op traces its body, which allocates from `fake`" if route is Route.TRITON_OP
               else "the generated C++ host function allocates each output from `fake`")
        resolver.error(shape.value_position, f"dynamic() needs registration custom_op or library, whose launcher "
                                             f"allocates its own output: on {route}, {how}")


def _resolve_contiguous(resolver: OpResolver, args: tuple[Arg, ...]) -> tuple[str, ...]:
    """`contiguous:`: the Tensor (and Tensor list) arguments the kernel receives dense; default every one."""
    tensors = [a.name for a in args if a.is_tensor or a.is_tensor_list]
    node = resolver.node.get("contiguous")
    if node is None:
        return tuple(tensors)
    for item in node.items:
        if item.value not in tensors:
            resolver.error(item.position, f"contiguous names '{item.value}', not a Tensor argument of the op "
                                          f"(Tensors: {', '.join(tensors)}){did_you_mean(item.value, tensors)}")
    listed = {item.value for item in node.items}
    return tuple(name for name in tensors if name in listed)


def _resolve_reduction(resolver: OpResolver, schema: FunctionSchema, args: tuple[Arg, ...]) -> RowReduction | None:
    """`reduce: {op, expr}`: EXPR (default: the single Tensor argument) reduced over the last dimension."""
    node = resolver.node.get("reduce")
    at = resolver.node.get("schema").value_position
    if any(a.is_mutated for a in args):
        resolver.error(at, "a reduce op returns its result; it cannot mutate arguments")
    if len(schema.returns) != 1:
        resolver.error(at, f"a reduce op returns one Tensor, not {len(schema.returns)}")
    for arg in args:
        if not arg.is_tensor and arg.name in REDUCTION_ARGUMENTS:
            resolver.error(
                at.shifted(0, arg.schema.column),
                f"reduce ops reduce over the last dimension, so argument '{arg.name}' would not be honoured; "
                "remove it (or write a `kernel: custom` op)",
            )
    tensors = [a for a in args if a.is_tensor]
    expr_node = node.get("expr")
    if expr_node is None and len(tensors) != 1:
        names = ", ".join(a.name for a in tensors)
        resolver.error(node.position, f"reduce needs `expr:` when the op has several Tensor arguments ({names})")
        return None
    text = expr_node.value if expr_node is not None else tensors[0].name
    try:
        expr = parse_pointwise(text, {a.name: a.kind for a in args})
    except ExprError as error:
        if expr_node is not None:
            resolver.expr_errors(expr_node, error)
        else:  # the expression is the argument's name (`Tensor float`): at the argument, unless its name is refused
            where = at.shifted(0, tensors[0].schema.column)
            if all(d.position != where for d in resolver.diagnostics.items):
                for each in error.errors:
                    resolver.error(where, each.message)
        return None
    for arg in tensors:
        if arg.name not in expr.names + expr.tested:
            resolver.error(node.position, f"Tensor argument '{arg.name}' is not used by reduce")
    if any(a.is_mutated for a in args) or len(schema.returns) != 1:
        return None
    (out,) = output_names([a.name for a in args], 1)
    return RowReduction(Reduction(node.get("op").value), Write(expr, out))


def resolve_mutation(resolver: OpResolver, schema: FunctionSchema, node: Node, mutated: list[Arg]) -> list:
    """The targets of a mutating op (`compute`, `normalize.compute`): `{arg: EXPR}` for exactly its `Tensor(a!)` arguments."""
    at = resolver.node.get("schema").value_position
    names = ", ".join(a.name for a in mutated)
    if not mutated:
        resolver.error(node.position, "compute names arguments to write, but the schema mutates none; mark them `Tensor(a!)`")
        return []
    if not isinstance(node, Mapping):
        example = f"compute: {{{mutated[0].name}: EXPR}}"
        resolver.error(node.position, f"a mutating op writes its mutated arguments ({names}): write `{example}`")
        return []
    if schema.returns:
        resolver.error(at, "a mutating op returns nothing: end its schema with `-> ()`")
    if resolver.node.get("backward") is not None:
        resolver.error(resolver.node.key_position("backward"), "mutating ops take no backward; write a functional op to differentiate")
    by_name = {a.name: a for a in mutated}
    targets = []
    for key, (key_node, value) in node.entries.items():
        if key not in by_name:
            resolver.error(key_node.position, f"compute writes '{key}', which is not a mutated argument (mutated: {names})")
        elif not isinstance(value, Scalar) or not isinstance(value.value, str):
            resolver.error(value.position, f"the value written to '{key}' must be an expression string")
        else:
            targets.append((key, by_name[key], value))
    for arg in mutated:
        if arg.name not in node.entries:
            resolver.error(node.position, f"the schema mutates '{arg.name}' (Tensor(a!)) but compute does not write it")
    return sorted(targets, key=lambda t: t[1].index)
