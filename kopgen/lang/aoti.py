"""This module writes the AOTInductor test of a package (issue 17): the ops that torch.export keeps as
they are, called on their normal samples from one program, which AOTInductor compiles ahead of time into
a package (.pt2) of native code that calls each op's kernel through its C shim's proxy executor. The
generated tests/test_aoti.py loads that package and compares what it gives with eager calls.

One program holds every such op: an AOTInductor compile costs tens of seconds (a C++ build), so a suite
makes one per device, not one per op or sample.

An op that writes its arguments is in the program too: export records it functionally and AOTInductor
writes the program's inputs in place, as the eager call does. Left out: custom kernels whose output size
only the data decides (a new symbol that the program's static shapes cannot hold), backward kernels
(no test class of their own: BackwardKernel checks them with their op), and ops taking a MemoryFormat, which
torch's AOTInductor (2.13) serializes as an int and then refuses ("Expected extern kernel ... to have
serialized argument type as_memory_format for argument 1 but got as_int"; torch.library alone does it too) or
a ScalarType with a default (refused the same way where the call passes the default's value), and ops the tests
pass an empty int list, which it passes the kernel as None.
"""

from __future__ import annotations

from ..model import Arg, Op, Package
from ..schema import ListType, OptionalType
from . import python, tests


def compiles(op: Op) -> bool:
    """Whether the op is in the package's AOTInductor program."""
    memory_format = any(str(a.schema.type).startswith("MemoryFormat") for a in op.args)
    scalar_type_default = any(str(a.schema.type) == "ScalarType" and a.schema.default is not None for a in op.args)
    empty_list = any(_passed_an_empty_list(op, a) for a in op.args)
    left_out = memory_format or scalar_type_default or empty_list
    return not python.sized_by_data(op) and not op.backward_of and not left_out


def _passed_an_empty_list(op: Op, arg: Arg) -> bool:
    """Whether the tests pass `arg` an empty int list (`int[] dims=[]`, `value: []`), which torch's AOTInductor
    (2.13) passes the op's kernel as None ("Expected a value of type 'List[int]' ... found type 'NoneType'"); an
    empty float or bool list it passes as it is."""
    given = arg.schema.type.elem if isinstance(arg.schema.type, OptionalType) else arg.schema.type
    if not isinstance(given, ListType) or str(given.elem) not in ("int", "SymInt"):
        return False
    setting = tests.sample_setting(op, arg)
    if setting is not None and setting.value is not None:
        return not setting.value
    return arg.schema.default is not None and arg.schema.default.replace(" ", "") == "[]"


def any_compiled(package: Package) -> bool:
    """Whether the package has tests/test_aoti.py."""
    return any(compiles(op) for op in package.ops)


def imports(package: Package) -> tuple[str, ...]:
    """The test modules of the ops in the program, which hold their data and test classes."""
    return tuple(f"import test_{op.name}" for op in sorted(package.ops, key=lambda op: op.name) if compiles(op))


def program(package: Package) -> tuple[str, ...]:
    """`PROGRAM = (test_muladd.TestMuladd, ...)`: the test classes of the ops in the program, as ruff
    formats the tuple."""
    classes = [f"test_{op.name}.{tests.class_name(op)}" for op in package.ops if compiles(op)]
    return tuple(tests._collection("PROGRAM = (", classes, ")", 0))
