"""This module translates the model into the generated benchmark (benchmarks/bench_ops.py): the
Python kernels it times against the operators, and the arguments it calls them with.
"""

from __future__ import annotations

from ..model import Arg, Op, Package
from . import layout, python, split, tests
from .layout import literal


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
    """An op's entry of make_args: a large tensor for each Tensor argument, a sample value for the others."""
    values = [python.Code(_large(a, op)) for a in op.args]
    return layout.statement(f"{literal(op.name)}: lambda: {literal(tuple(values))},", 8)
