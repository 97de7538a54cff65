"""Warnings about a valid spec: the seed's traps that kopgen can see without running the user's kernel.

A custom kernel puts three promises in the user's hands: which arguments it writes, what its outputs
look like (`fake`), and its backward. The generated suite checks them against the kernel; some can
be seen earlier, from the spec alone:

- an argument named like an output (`out`, `result`, `out1`, `*_out`) that the schema does not mark
  mutated: a kernel that writes it would be an undeclared mutation (trap 1);
- a `fake` whose shape or dtype cannot match what `reference` returns on the spec's test shapes
  (trap 2), found by running both on meta tensors: no data, no kernel. This needs torch, which only
  `kopgen check` imports (`kopgen new` is text work and never does); without torch it says nothing;
- with torch, names a `reference` or `backward` formula reads of torch or of a Tensor that torch does not
  have (`torch.sigmod`): the generated tests would fail on them.

Resolution never imports this module: it runs on the resolved model, with the spec's nodes for positions.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from collections.abc import Iterator

from .bound_signature import signature_warnings
from .errors import Diagnostic, Position
from .expr import evaluate
from .expr.syntax import did_you_mean
from .lang.sample_shapes import SampleShapeError, checked_shape
from .lang.tests import is_tensor_list, sample_setting, sample_shapes, sample_value, tensor_list
from .loader import Mapping, Scalar, Sequence
from .model import CustomKernel, Op, Package, PointwiseCompute

# Names kernel authors give the Tensors their kernels write into.
OUTPUT_NAME = re.compile(r"(out|output|result|dst)\d*|out_.*|.*_out")
UPCAST_DTYPES = ("float32", "float64")  # where the generated reference computes in the op's own dtype


def spec_warnings(root: Mapping, package: Package) -> list[Diagnostic]:
    """The warnings kopgen can give from the spec alone (what `new` and `update` print)."""
    bound = [w for node, op in _custom_ops(root, package) for w in signature_warnings(node, op)]
    return sorted([*_unmarked_outputs(root, package), *bound])


def meta_warnings(root: Mapping, package: Package) -> list[Diagnostic]:
    """The warnings of running `reference` and `fake` on meta tensors (what `check` adds); none without torch."""
    try:
        import torch
    except ImportError:
        return []
    found = []
    for node, op in _custom_ops(root, package):
        if op.body.reference is not None and op.body.outputs:
            found += _fake_against_reference(torch, node, op)
    for node, _ in _spec_ops(root, package):
        for text in _torch_expressions(node):
            found += _unknown_torch_names(torch, text)
    return sorted(found)


def _torch_expressions(node: Mapping) -> Iterator[Scalar]:
    """An op's expressions in PyTorch (its `reference`, its `backward` formulas): each one's text node."""
    for key in ("reference", "backward"):
        value = node.get(key)
        entries = [v for _, v in value.entries.values()] if isinstance(value, Mapping) else [value] if value else []
        yield from (entry for entry in entries if isinstance(entry, Scalar) and isinstance(entry.value, str))


def _unknown_torch_names(torch, text: Scalar) -> list[Diagnostic]:
    """`torch.frobnicate(x)`, `grad.sigmod()`: names torch does not have, which the formula languages (they
    check the shape of an expression, not torch's names) let through to the generated tests' AttributeError."""
    try:
        tree = ast.parse(text.value.strip(), mode="eval")
    except SyntaxError:  # a backward's non_differentiable, say; the languages report real syntax errors
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        path, base = [node.attr], node.value
        while isinstance(base, ast.Attribute):
            path.insert(0, base.attr)
            base = base.value
        at = text.value_position.shifted(node.end_lineno - 1, node.end_col_offset - len(node.attr))
        if isinstance(base, ast.Name) and base.id == "torch":
            owner = functools.reduce(lambda value, name: getattr(value, name, None), path[:-1], torch)
            if owner is not None and not hasattr(owner, node.attr):
                hint = did_you_mean(node.attr, [n for n in dir(owner) if not n.startswith("_")])
                found.append(_warning(at, f"torch.{'.'.join(path)} does not exist in torch {torch.__version__}"
                                          f"{hint}: the generated tests would fail on it"))
        elif not any(hasattr(kind, node.attr) for kind in (torch.Tensor, torch.Size, torch.dtype, int, float, tuple)):
            hint = did_you_mean(node.attr, [n for n in dir(torch.Tensor) if not n.startswith("_")])
            found.append(_warning(at, f"'{node.attr}' is no attribute or method of a Tensor{hint}: the generated "
                                      "tests would fail on it"))
    return found


def sample_errors(root: Mapping, package: Package) -> list[Diagnostic]:
    """Errors only the tests' samples show (part of validating a spec, torch or not): a Tensor's shape
    relation (`tests: args: NAME: {shape: EXPR}`) that fails or gives no shape on one of the spec's test
    shapes, and a sample Tensor too large to draw."""
    found = []
    defaults = root.get("defaults")
    for node, op in _spec_ops(root, package):
        tests = node.get("tests") or (defaults.get("tests") if defaults is not None else None)
        for index, given in enumerate(op.shapes):
            try:
                shapes = sample_shapes(op, given)
                for name, shape in shapes.items():
                    checked_shape(name, shape)
            except SampleShapeError as error:
                relations = tests.get("args") if tests is not None else None
                relation = relations.get(error.name) if relations is not None else None
                if relation is not None and relation.get("shape") is not None:
                    where, what = relation.get("shape").value_position, f"the shape of '{error.name}'"
                elif tests is not None and tests.get("shapes") is not None:
                    where, what = tests.get("shapes").items[index].position, f"the test shape of '{error.name}'"
                else:  # kopgen's default shapes, which are small
                    where, what = node.position, f"the test shape of '{error.name}'"
                related = {s.name for s in op.sample_args if s.shape}
                shapes = ", ".join(f"{name}: {_shape(shape)}" for name, shape in given.items() if name not in related)
                found.append(Diagnostic(where, f"{what} {error} (test shapes {shapes})"))
                break  # one set of shapes shows it
            written = _narrow_in_place_write(op, shapes)
            if written:
                where = tests.get("shapes").items[index].position if tests is not None and tests.get("shapes") else \
                    node.position
                found.append(Diagnostic(where, written))
                break
    return found


def _narrow_in_place_write(op: Op, shapes: dict[str, tuple[int, ...]]) -> str | None:
    """A compute op's argument written in place whose test shape is not the inputs' broadcast shape: every
    test would fail (`x has shape [6] but the result has shape [8, 6]`)."""
    if not isinstance(op.body, PointwiseCompute):
        return None
    full = _broadcast(list(shapes.values()))
    for write in op.body.writes:
        if write.arg is not None and full is not None and shapes.get(write.arg.name) != full:
            return (f"'{write.arg.name}' is written in place, but its test shape {_shape(shapes[write.arg.name])} is "
                    f"not the inputs' broadcast shape {_shape(full)}: an in-place write keeps its argument's shape")
    return None


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    """The shapes broadcast together, as torch does; None where they do not."""
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for sizes in zip(*[(1,) * (rank - len(s)) + tuple(s) for s in shapes], strict=True):
        others = {n for n in sizes if n != 1}
        if len(others) > 1:
            return None
        result.append(others.pop() if others else 1)
    return tuple(result)


def _spec_ops(root: Mapping, package: Package) -> Iterator[tuple[Mapping, Op]]:
    """Each op of the spec with its node. A package exists only when every op resolved, in the spec's order."""
    spec_ops = [op for op in package.ops if not op.backward_of]  # less the backward kernels kopgen adds
    yield from zip(root.get("ops").items, spec_ops, strict=True)


def _custom_ops(root: Mapping, package: Package) -> Iterator[tuple[Mapping, Op]]:
    for node, op in _spec_ops(root, package):
        if isinstance(op.body, CustomKernel):
            yield node, op


def _warning(position: Position, message: str) -> Diagnostic:
    return Diagnostic(position, message, "warning")


def _unmarked_outputs(root: Mapping, package: Package) -> Iterator[Diagnostic]:
    for node, op in _custom_ops(root, package):
        at = node.get("schema").value_position
        for arg in op.tensor_args:
            if not arg.is_mutated and OUTPUT_NAME.fullmatch(arg.name):
                yield _warning(
                    at.shifted(0, arg.schema.column),
                    f"'{arg.name}' is named like an output but the schema does not mark it mutated: if the kernel "
                    f"writes it, write `Tensor! {arg.name}`, or torch may reorder or drop the write "
                    "(trap 1, undeclared mutation)",
                )


def _fake_against_reference(torch, node: Mapping, op: Op) -> list[Diagnostic]:
    """One warning per `fake` entry that differs from the reference on some test shapes and dtype."""
    fake = node.get("fake")
    entries = list(fake.items) if isinstance(fake, Sequence) else [fake]
    for shapes in (sample_shapes(op, given) for given in op.shapes):
        for dtype in [d for d in op.dtypes if d in UPCAST_DTYPES][:1] or op.dtypes[:1]:
            pairs = _evaluate(torch, op, shapes, getattr(torch, dtype))
            found = [
                _warning(_where(entry, got, want), _mismatch(op, shapes, index, got, want))
                for index, (entry, (got, want)) in enumerate(zip(entries, pairs))
                if (got.shape, got.dtype) != (want.shape, want.dtype)
            ]
            if found:
                return found  # one set of shapes shows it; the others would repeat it
    return []


def _where(entry: Mapping, got, want) -> Position:
    """At the entry's `shape` where the shapes differ, else at its `dtype` (or the entry, which has none)."""
    node = entry.get("shape") if got.shape != want.shape else entry.get("dtype")
    return node.value_position if node is not None else entry.position


def _evaluate(torch, op: Op, shapes: dict, dtype) -> list[tuple]:
    """(fake's output, the reference's) per output on meta tensors; none where either cannot run on
    them (a data-dependent reference, an op of the namespace that is not registered here)."""
    values = {}
    for arg in op.args:
        setting = sample_setting(op, arg)
        if arg.is_tensor:
            own = getattr(torch, setting.dtype) if setting is not None and setting.dtype else dtype
            values[arg.name] = torch.empty(shapes[arg.name], dtype=own, device="meta")
        elif is_tensor_list(arg):  # as the samples draw them: Tensors of the lead's shape
            values[arg.name] = tensor_list(arg, torch.empty(shapes[op.lead.name], dtype=dtype, device="meta"), None)
        else:
            values[arg.name] = eval(sample_value(arg, op), {"torch": torch, "math": math})  # a literal kopgen printed
    # No builtins, and tensors made without a device on meta: the text is the spec's, checked by kopgen's
    # formula language, run here only to compare shapes.
    scope = {"__builtins__": {}, "torch": torch, "math": math, **values}
    try:
        with torch.device("meta"):
            fakes = [_fake_output(torch, output, scope) for output in op.body.outputs]
            references = eval(op.body.reference.python, scope)
    except Exception:  # noqa: BLE001 - whatever fails on meta tensors is the generated suite's to test
        return []
    references = tuple(references) if isinstance(references, (tuple, list)) else (references,)
    # a reference that gives no Tensor (x.size(0)) is the generated suite's to show, not a shape to compare
    return [(fake, reference) for fake, reference in zip(fakes, references) if isinstance(reference, torch.Tensor)]


def _fake_output(torch, output, scope: dict):
    shape = evaluate(output.shape, scope)  # the fake language: sizes, slices, tuples, // and +
    return torch.empty(shape, dtype=eval(output.dtype, scope), device="meta")


def _mismatch(op: Op, shapes: dict, index: int, got, want) -> str:
    which = f"output {index}" if len(op.body.outputs) > 1 else "the output"
    inputs = ", ".join(f"{name}: {_shape(shape)}" for name, shape in shapes.items())
    return (
        f"fake cannot match the reference: on the test shapes ({inputs}) `fake` says {which} is "
        f"{_shape(got.shape)} {_dtype(got.dtype)}, the reference returns {_shape(want.shape)} {_dtype(want.dtype)} "
        "(trap 2, fake kernel)"
    )


def _shape(shape) -> str:
    return str(tuple(shape))


def _dtype(dtype) -> str:
    return str(dtype).removeprefix("torch.")
