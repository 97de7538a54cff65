"""This module translates the model into the generated benchmark (benchmarks/bench_ops.py): the
Python kernels it times against the operators, and the arguments it calls them with.
"""

from __future__ import annotations

import math

from ..model import Arg, CustomKernel, Op, Package
from . import layout, python, split, tests
from .layout import literal
from .sample_shapes import SampleShapeError, with_shape_relations

# Two row counts the sample of a kernel op is made with, to tell which of its sizes follow its rows.
_ROWS = (10007, 10009)


def imports(package: Package) -> list[str]:
    lines = [_import(f"{package.name}.kernels", f"{op.name} as {python.kernels_module(op)}")
             for op in python.with_python_kernels(package)]
    return lines + python.bound_imports(package, f"{package.name}.")


def _import(module: str, name: str) -> str:
    """`from module import name`, in parentheses where it is too long for a line (as ruff's isort has it)."""
    line = f"from {module} import {name}"
    return line if len(line) <= layout.LINE_LENGTH else f"from {module} import (\n    {name},\n)"


def launchers(op: Op) -> str:
    """An op's entry of variants_of's launchers: its Python kernels by device."""
    kernels = [f"{literal(k.device)}: {python.registered_kernel(op, k)}" for k in op.python_kernels]
    return layout.statement(f"{literal(op.name)}: {{{', '.join(kernels)}}},", 8)


def _table(name: str, values: dict[str, str]) -> str:
    """A module-level dict of the benchmark, from op name to `values`' Python source."""
    items = ", ".join(f"{literal(op)}: {value}" for op, value in values.items())
    return layout.statement(f"{name} = {{{items}}}", 0)


def ops(package: Package) -> str:
    return _table("OPS", {op.name: literal(op.devices) for op in package.ops})


def keyword_only(package: Package) -> str:
    return _table("KEYWORD_ONLY", {op.name: literal(op.keyword_only_names) for op in package.ops})


def read_and_written(package: Package) -> str:
    return _table("READ_AND_WRITTEN", {op.name: literal(_read_and_written(op)) for op in package.ops})


def _read_and_written(op: Op) -> tuple[int, ...]:
    """The positions of the arguments the op writes after reading them (scale_'s x), which a call
    moves twice. An out= argument is only written; a custom kernel's mutated arguments count once,
    as kopgen cannot see what the kernel reads."""
    writes = getattr(op.body, "writes", ())
    read = {n for w in writes for n in w.expr.names} | set(getattr(op.body, "reads", ()))
    return tuple(i for i, a in enumerate(op.args) if a.is_mutated and a.name in read)


def _large(arg: Arg, op: Op) -> str:
    """A large Tensor (or list of them, as the tests' samples hold), else the tests' value."""
    if arg.is_tensor and split.is_split(op) and arg != op.body.source:
        return "make()[:, :512].contiguous()"  # as wide as a half of the split Tensor's rows
    if arg.is_tensor and arg.name in getattr(op.body, "per_row", ()):  # a row reduction's backward kernel's
        return "make()[:, 0].contiguous()"  # one value per row
    if arg.is_tensor:
        return "make()"
    if tests.is_tensor_list(arg):
        return f"[{', '.join(tests.tensor_list(arg, 'make()', 'None'))}]"
    return tests.sample_value(arg, op)


def make_args(op: Op) -> str:
    """An op's entry of make_args: a large tensor for each Tensor argument, a sample value for the others;
    a kernel op's arguments as its tests draw them."""
    drawn = _kernel_args(op) if isinstance(op.body, CustomKernel) else None
    values = [python.Code(v) for v in drawn] if drawn else [python.Code(_large(a, op)) for a in op.args]
    return layout.statement(f"{literal(op.name)}: lambda: {literal(tuple(values))},", 8)


_MAKE = '''
    def make() -> torch.Tensor:
        return torch.rand(numel // 1024, 1024, device=device) + 0.5
'''
_DRAWN = '''
    def drawn(*shape: int, dtype=torch.float32, low=None, high=None) -> torch.Tensor:
        return torch.testing.make_tensor(
            shape, dtype=dtype, device=device, low=low, high=high
        )

    def rows(width: int) -> int:
        """As many rows of `width` elements as `numel` makes, one at least."""
        return max(1, numel // width)
'''


def make_args_helpers(package: Package) -> str:
    """make_args's docstring and the helpers its entries call: `make` for kopgen's kinds, `drawn` and
    `rows` for kernel ops."""
    kernels = [isinstance(op.body, CustomKernel) for op in package.ops]
    ours = "with `numel` elements per Tensor (rows of 1024), in float32"
    theirs = "as its tests draw them, with about `numel` elements in its largest Tensor"
    if all(kernels):
        doc = f'    """Arguments of `op` {theirs}."""\n'
    elif any(kernels):
        doc = f'    """Arguments of `op` {ours}; a kernel\n    op\'s {theirs}."""\n'
    else:
        doc = f'    """Arguments of `op` {ours}."""\n'
    return (doc + (_MAKE if not all(kernels) else "") + (_DRAWN if any(kernels) else "")).rstrip("\n")


def _kernel_args(op: Op) -> list[str]:
    """A kernel op's arguments as its tests' first sample draws them (the spec's shapes, dtypes, bounds and
    shape relations: what the kernel accepts), with the lead's rows, and every size that follows them, as
    many as make `numel` elements in the largest Tensor. Where a size follows the rows other than as
    a * rows + b, the sample's shapes as they are."""
    first = op.shapes[0]
    lead = first[op.lead.name]

    def shapes(rows: int) -> dict[str, tuple[int, ...]]:
        def shape_of(a: Arg):
            shape = first[a.name]
            return ((rows, *shape[1:]) if lead and shape[:1] == lead[:1] else shape,)
        related = with_shape_relations(op, shape_of, tests.int_samples(op))
        return {a.name: tuple(related(a)[0]) for a in op.tensor_args}

    try:  # a relation may refuse rows it was not written for: the sample's own shapes then
        small, large = shapes(_ROWS[0]), shapes(_ROWS[1])
    except SampleShapeError:
        small = large = {}
    # the elements a row of the largest Tensor: `numel` makes rows of it
    width = max([(math.prod(small[n]) - math.prod(large[n])) // (_ROWS[0] - _ROWS[1]) for n in small] + [1])
    sizes = {name: [_size(a, b, width) for a, b in zip(small[name], large[name])] for name in small}
    if not lead or not sizes or any(None in dims for dims in sizes.values()):
        sizes = {name: [str(n) for n in shape] for name, shape in shapes(lead[0] if lead else 1).items()}
    values = []
    for arg in op.args:
        if arg.is_tensor:
            values.append(_drawn(op, arg, sizes[arg.name]))
        elif tests.is_tensor_list(arg):
            values.append(f"[{', '.join(tests.tensor_list(arg, _drawn(op, op.lead, sizes[op.lead.name]), 'None'))}]")
        else:
            values.append(tests.sample_value(arg, op))
    return values


def _size(small: int, large: int, width: int) -> str | None:
    """A size as the bench's source: a constant, or a * rows(width) + b where it follows the rows (None where
    it follows them otherwise, rows // 2)."""
    if small == large:
        return str(small)
    step, rest = divmod(large - small, _ROWS[1] - _ROWS[0])
    offset = small - step * _ROWS[0]
    if rest:
        return None
    rows = f"rows({width})"
    scaled = rows if step == 1 else f"{step} * {rows}"
    return scaled if offset == 0 else f"{scaled} {'+' if offset > 0 else '-'} {abs(offset)}"


def _drawn(op: Op, arg: Arg, sizes: list[str]) -> str:
    """`drawn(rows(6), 6, dtype=torch.int64, low=0, high=8)`: a Tensor as the spec's `tests: args:` draws it."""
    return f"drawn({', '.join(sizes + tests.drawn_keywords(op, arg))})"
