"""This module translates the model into the generated test suite.

The checks are written once, in the generated tests/_contract.py. Each op gets tests/test_<op>.py:
one class whose bases are the checks that apply to the op (Differentiable, Mutating, OnCuda, ...)
and whose class attributes are its data (samples, dtypes, tolerances, ...). Everything that
differs between two ops is decided here, and written as Python source that `ruff format` leaves
as it is, so the templates only print.
"""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from ..backward_kernel import RowGradient, kernel_name
from ..expr import NOT_DIFFERENTIABLE_DTYPES, is_dynamic
from ..expr.syntax import python_number
from ..model import Arg, CustomKernel, Op, Package, PointwiseCompute, RowNormalization, RowReduction, SampleArg
from ..schema import python_default
from ..split import GatedSplit, SplitGradient
from . import autocast, eager, fusion, nans, norms, sharding, split, vmap
from . import sample_shapes as sample_shapes_module
from .layout import requote

LINE_LENGTH = 88  # ruff format's default
INDENT = "    "
# Functions whose real domain is x > 0: their ops are tested on positive inputs.
POSITIVE_DOMAIN = frozenset({"log", "log1p", "sqrt", "rsqrt", "pow"})
# Scalar values the generated tests pass; exactly representable in every float dtype.
SAMPLE_SCALARS = {"float": "1.25", "int": "3", "bool": "True"}


@dataclass(frozen=True)
class Sample:
    """One input set: a label and the Python source of each argument, built with the contract's `make`."""

    label: str
    args: tuple[str, ...]
    empty: bool = False  # no elements: gradcheck has nothing to check


# -- what the tests run on


def sample_value(arg: Arg, op: Op | None = None) -> str:
    """The value the tests (and the benchmark) pass for a scalar argument: the spec's `value`, if it sets one.
    A kernel op's argument with a default takes it (what `dim=-1` means is the user's kernel's to say);
    kopgen's own kinds draw one that is not a default, so that the kernel is seen to read it."""
    setting = sample_setting(op, arg) if op is not None else None
    if setting is not None and setting.value is not None:
        return _value_source(arg, setting.value)
    if op is not None and isinstance(op.body, CustomKernel) and arg.schema.default is not None:
        return requote(python_default(arg.schema))
    if arg.kind in SAMPLE_SCALARS:
        return SAMPLE_SCALARS[arg.kind]
    if str(arg.schema.type) == "Scalar":
        return SAMPLE_SCALARS["float"]
    # samples.py refused a required argument of any other type without a value: it has a default, or is optional
    default = python_default(arg.schema)
    return "None" if default is None else requote(default)


def _value_source(arg: Arg, value) -> str:
    """A `value` as Python: a dtype name as torch's dtype, a string in ruff's double quotes, a list as a tuple."""
    if "ScalarType" in str(arg.schema.type):
        return f"torch.{value}"
    return python_number(value) if isinstance(value, float) else requote(repr(value))


def sample_setting(op: Op, arg: Arg) -> SampleArg | None:
    """How the spec's `tests: args:` draws `arg`, if it says."""
    return next((s for s in op.sample_args if s.name == arg.name), None)


def own_dtype(op: Op, arg: Arg) -> bool:
    """A Tensor of its own dtype (an int64 target, a bool mask): not varied over `dtypes`, never requiring grad."""
    setting = sample_setting(op, arg)
    return setting is not None and setting.dtype is not None


# Make.drawn, in the contract of a package where some Tensor has its own dtype or bounds.
MAKE_DRAWN = '''
    def drawn(self, *shape: int, dtype=None, low=None, high=None, strided=False):
        """A tensor the spec's `tests: args:` sets: its own dtype (None: the op's) and
        values in [low, high) (None: make_tensor's bounds), non-contiguous if `strided`."""
        if self.grown:
            shape = tuple(n if n == 1 else n + 2 for n in shape)
        return torch.testing.make_tensor(
            shape,
            dtype=dtype or self.dtype,
            device=self.device,
            low=low,
            high=high,
            noncontiguous=strided,
        )'''


# TracedIntoTriton, in the contract of a package with triton_op ops: its imports, its OpData field
# and the class (after two blank lines).
TRACED_INTO_TRITON = {
    "imports": """from torch._higher_order_ops.triton_kernel_wrap import (
    kernel_side_table,
    triton_kernel_wrapper_functional,
)
from torch._subclasses.fake_tensor import FakeTensorMode""",
    "field": """    kernels_module: str = ""  # TracedIntoTriton: where its Triton kernels are written""",
    "class": '''

def source_module(kernel) -> str:
    """The module a Triton kernel is written in (an autotuned one: the kernel inside)."""
    while hasattr(kernel, "fn"):
        kernel = kernel.fn
    return kernel.__module__


class TracedIntoTriton(Contract):
    """A triton_op: torch.compile traces its body on CUDA into launches of its Triton kernels
    (wrap_triton), so that Inductor compiles them with the graph."""

    def test_compile_traces_into_its_triton_kernels(self):
        """AOTAutograd's functional trace of the op on fake CUDA tensors (no GPU needed) holds
        the package's kernels as Triton kernel nodes, and not the op itself."""
        with FakeTensorMode():
            args = self.copy_args(self.normal_args("cuda"))
        graph = functional_trace(self, args)
        calls = [node for node in graph.nodes if node.op == "call_function"]
        kernels = [
            kernel_side_table.get_kernel(node.kwargs["kernel_idx"])
            for node in calls
            if node.target is triton_kernel_wrapper_functional
        ]
        assert kernels, graph
        # Yours: in its kernels module or a module of the package that it imports.
        package = self.data.kernels_module.partition(".")[0]
        assert {source_module(k).partition(".")[0] for k in kernels} == {package}, graph
        assert self.data.op not in [node.target for node in calls]''',
}


def traced_into_triton(package: Package, part: str) -> tuple[str, ...]:
    """The lines of one part of TracedIntoTriton where the package has triton_op ops it applies to, else none."""
    return tuple(TRACED_INTO_TRITON[part].split("\n")) if any(map(_traced_into_triton, package.ops)) else ()


def _traced_into_triton(op: Op) -> bool:
    """A triton_op that torch.compile traces through its body (not as its reference: lang/fusion.py)."""
    return op.is_triton_op and not fusion.traced_as_reference(op)


# functional_trace, which TracedIntoTriton and TracedAsReference read (after two blank lines).
FUNCTIONAL_TRACE = '''

def functional_trace(test: Contract, args: list) -> torch.fx.Graph:
    """AOTAutograd's functional trace of the test's op on `args` (fake tensors: no kernel runs),
    the graph Inductor would compile."""
    where = [i for i, arg in enumerate(args) if isinstance(arg, torch.Tensor)]

    def forward(*tensors):
        inputs = list(args)
        for i, tensor in zip(where, tensors, strict=True):
            inputs[i] = tensor
        return test.call(test.data.op, inputs)

    traced = make_fx(dispatch_functionalize(forward), tracing_mode="fake")
    return traced(*(args[i] for i in where)).graph'''


def _traces_functionally(package: Package) -> bool:
    """Whether the contract has TracedIntoTriton or TracedAsReference."""
    return any(_traced_into_triton(op) or fusion.traced_as_reference(op) for op in package.ops)


def functional_trace_imports(package: Package) -> tuple[str, ...]:
    """What TracedIntoTriton and TracedAsReference trace the op with, where the package has either."""
    if not _traces_functionally(package):
        return ()
    return ("from torch._subclasses.functional_tensor import dispatch_functionalize",
            "from torch.fx.experimental.proxy_tensor import make_fx")


def functional_trace(package: Package) -> tuple[str, ...]:
    """The lines of functional_trace where the package has TracedIntoTriton or TracedAsReference."""
    return tuple(FUNCTIONAL_TRACE.split("\n")) if _traces_functionally(package) else ()


def make_drawn(package: Package) -> tuple[str, ...]:
    """The lines of Make.drawn (after a blank line) where the package's samples call it, else none."""
    drawn = any(s.dtype or s.low is not None or s.high is not None for op in package.ops for s in op.sample_args)
    return tuple(MAKE_DRAWN.split("\n")) if drawn else ()


def samples(op: Op) -> tuple[Sample, ...]:
    """normal, empty, non-contiguous and broadcast inputs (where the op has such; a custom kernel is tested
    on broadcast inputs only where the spec's `tests.shapes` give them)."""
    result = [_sample(op, _normal_label(op, i), lambda a, s=shapes: (s[a.name],)) for i, shapes in enumerate(op.shapes)]
    first = op.shapes[0]
    rank = max(len(shape) for shape in first.values())
    rows = first[op.lead.name][:1]
    # No rows: the leading dimension of the full-rank arguments is 0 (and, for custom kernels, of those
    # with the same rows: a target per row of the logits); the others broadcast. A custom kernel's Tensor
    # with other rows but the lead's row count in another dimension (the input of a transpose into `out`)
    # gets that dimension 0: its shape keeps its relation to the lead's.
    empties = _KINDS[type(op.body)].empties

    def empty(a: Arg) -> tuple:
        shape = first[a.name]
        if empties and rows and shape[:1] != rows and rows[0] in shape:
            return (tuple(0 if n == rows[0] else n for n in shape),)
        return ((0,) + shape[1:] if len(shape) == rank or (empties and rows and shape[:1] == rows) else shape,)

    result.append(_sample(op, "empty", empty, True))
    result += _KINDS[type(op.body)].samples(op)
    dense = _KINDS[type(op.body)].kept_dense(op)
    if any(a.name not in dense for a in op.tensor_args):
        result.append(_sample(op, "noncontiguous", lambda a: (first[a.name], a.name not in dense)))
    # Inputs after the first broadcast from their last dimension; written arguments always have the full shape
    # (the first input keeps it too, so that the reference, which reads only inputs, has the written shape).
    lead = next((a for a in op.tensor_args if not a.is_mutated and not a.is_optional), op.lead)
    others = any(a is not lead and not a.is_mutated for a in op.tensor_args)
    if _KINDS[type(op.body)].broadcasts and first[lead.name] and others:
        result.append(
            _sample(op, "broadcast", lambda a: (first[a.name] if a is lead or a.is_mutated else first[a.name][-1:],))
        )
    # Each optional Tensor left out (None), then all of them.
    absents = [[a] for a in op.optional_args] + ([list(op.optional_args)] if len(op.optional_args) > 1 else [])
    for absent in absents:
        label = "without_" + ("optionals" if len(absent) > 1 else absent[0].name)
        result.append(_sample(op, label, lambda a, absent=absent: None if a in absent else (first[a.name],)))
    return tuple(result)


def grown_sample(op: Op) -> Sample | None:
    """The normal sample with every size n > 1 grown to n + 2 (as Make grows them) before the spec's shape
    relations apply, where it has relations: growing a related shape itself would break it (3 is half of 6,
    5 is not half of 8)."""
    if not any(s.shape for s in op.sample_args):
        return None
    first = op.shapes[0]
    return _sample(op, "grown", lambda a: (tuple(n if n == 1 else n + 2 for n in first[a.name]),))


def normal_sample(op: Op) -> str:
    """The sample of the spec's first test shapes: what the checks of one sample run on."""
    return _normal_label(op, 0)


def gradient_args(op: Op) -> tuple[Arg, ...]:
    """Tensors the tests ask gradients of: those with a formula (all, for an op without backward)."""
    if op.is_mutating:
        return ()
    if op.backward is None:
        return tuple(a for a in op.tensor_args if not own_dtype(op, a))
    return tuple(g.arg for g in op.backward.gradients if g.formula)


def positive_inputs(op: Op) -> bool:
    """Whether tests draw inputs from (0.5, 1.5): the expressions use log, sqrt, ..."""
    return any(write.expr.calls & POSITIVE_DOMAIN for write in op.writes)


def saved_tensor_counts(op: Op) -> dict[tuple[int, ...], int]:
    """For each set of differentiable inputs that require grad: how many tensors backward saves."""
    indices = [a.index for a in gradient_args(op)]
    counts = {}
    for size in range(1, len(indices) + 1):
        for wanted in itertools.combinations(indices, size):
            counts[wanted] = sum(1 for s in op.backward.saved_tensors if set(s.needed_by) & set(wanted))
    return counts


def checks(op: Op) -> tuple[str, ...]:
    """The contract's classes an op's test class derives from: the checks that apply to it."""
    mixins = [
        ("Differentiable", op.has_gradients),
        ("BackwardKernel", kernel_name(op) is not None),
        ("NotDifferentiable", op.backward is None and not op.is_mutating and _KINDS[type(op.body)].differentiable(op)),
        ("Mutating", op.is_mutating),
        ("OnCuda", "cuda" in op.devices),
        ("Tagged", bool(op.tags)),
        ("TracedIntoTriton", _traced_into_triton(op)),
        ("TracedAsReference", fusion.traced_as_reference(op)),
        ("DirectInEager", eager.direct(op)),
        ("DirectInEagerWithGrad", eager.has_function(op) and op.has_gradients),
        ("BelowAutogradInEager", eager.below_autograd(op)),
        ("SplitInHalves", split.is_split(op)),
        ("Batched", vmap.batches(op)),
        ("Sharded", sharding.tested(op)),
        ("Autocasts", autocast.casts(op)),
        ("SavesStatistics", bool(norms.saved_stats(op))),
        ("NanRows", nans.checked(op)),
    ]
    return (*(name for name, applies in mixins if applies), "Contract")


def upstream_warnings(package: Package) -> tuple[tuple[tuple[str, ...], str], ...]:
    """(why as comment lines, pytest filter) of each upstream warning the generated suite cannot avoid."""
    warnings = [
        (
            (
                "torch.utils.mkldnn, which Inductor imports on its first compile, defines its modules with the "
                "deprecated torch.jit.script_method: a DeprecationWarning for each of their methods."
            ),
            r"ignore:`torch\.jit\.script_method` is deprecated:DeprecationWarning:torch\.jit\._script",
        ),
        (
            (
                "Inductor suggests TF32 matmuls when it compiles the nn.Linear of the CUDA-graph test on a GPU "
                "that has them; the test keeps float32's precision."
            ),
            r"ignore:TensorFloat32 tensor cores:UserWarning:torch\._inductor\.compile_fx",
        ),
    ]
    if package.needs_interpreter:
        why = (
            "Triton's interpreter computes masked-out lanes too, in numpy, which warns where they hold "
            "values outside a function's domain (log(0)); the lanes are never stored."
        )
        warnings.append((why, r"ignore::RuntimeWarning:triton\.runtime\.interpreter"))
    return tuple((tuple(textwrap.wrap(why, 96)), warning_filter) for why, warning_filter in warnings)


# -- tests/test_<op>.py as source text


def contract_imports(op: Op) -> str:
    """What the op's tests import from the contract: OpData, and the checks that apply (one per line
    where they do not fit on the line, as isort has it)."""
    names = sorted([*checks(op), "OpData"])
    one_line = ", ".join(names)
    if len(f"from _contract import {one_line}") <= LINE_LENGTH:
        return one_line
    return "(\n" + "".join(f"    {name},\n" for name in names) + ")"


def class_name(op: Op) -> str:
    """The op's test class: TestMuladd."""
    return "Test" + "".join(part[:1].upper() + part[1:] for part in op.name.split("_"))


def data_name(op: Op) -> str:
    """The module constant holding the op's OpData."""
    return op.name.upper()


def class_statement(op: Op) -> tuple[str, ...]:
    """`class TestMuladd(Differentiable, OnCuda, Tagged, Contract):`: the op's checks as bases."""
    statement = tuple(_call(f"class {class_name(op)}(", checks(op), "):", 0))
    return (*statement, *_KINDS[type(op.body)].class_body(op))


def op_data(op: Op, package: Package) -> tuple[str, ...]:
    """The keyword arguments of the op's OpData, one a line (inside `NAME = OpData(`, at column 4)."""
    arguments = [
        [f"op=torch.ops.{op.namespace}.{op.name}.default,"],
        [f"python_api={package.name}.{op.name},"],
        [f"reference={package.name}.reference.{op.name},"],
        _keyword("devices", "(", [_str(device) for device in op.devices], ")"),
        _keyword("dtypes", "(", [f"torch.{dtype}" for dtype in op.dtypes], ")"),
        ["samples={"],
        *([INDENT + line for line in _collection(f'"{s.label}": lambda make: (', s.args, "),", 8)] for s in samples(op)),
        ["},", f"normal_sample={_str(normal_sample(op))},"],
    ]
    if op.atol is not None or op.rtol is not None:  # only one given: the other is 0
        arguments += [[f"atol={python_number(op.atol or 0.0)},"], [f"rtol={python_number(op.rtol or 0.0)},"]]
    if op.keyword_only_names:
        arguments.append(_keyword("keyword_only", "(", [_str(name) for name in op.keyword_only_names], ")"))
    if positive_inputs(op):
        arguments.append(["positive_inputs=True,"])
    if gradient_args(op):
        arguments.append(_keyword("gradient_inputs", "(", [str(a.index) for a in gradient_args(op)], ")"))
    arguments += _KINDS[type(op.body)].data(op)
    if op.has_gradients:
        labels = [s.label for s in samples(op)]
        counts = [f"{wanted!r}: {count}" for wanted, count in saved_tensor_counts(op).items()]
        arguments += [
            _keyword("gradient_samples", "(", [_str(s.label) for s in samples(op) if not s.empty], ")"),
            [f"gradgradcheck={op.backward.differentiable_twice},"],
            [f"backward_sample={_str('broadcast' if 'broadcast' in labels else normal_sample(op))},"],
            _keyword("saved_tensors", "{", counts, "}"),
        ]
    if kernel := kernel_name(op):
        arguments.append([f"backward_kernel=torch.ops.{op.namespace}.{kernel}.default,"])
        if op.backward.stats:  # its kernel may read them (a normalisation's)
            arguments.append(_keyword("saved_stats", "(", [_str(name) for name in op.backward.stats], ")"))
    if op.is_mutating:
        arguments.append(_keyword("written", "(", [str(a.index) for a in op.mutated_args], ")"))
        arguments += [["returns=True,"]] if op.num_outputs else []
    if "cuda" in op.devices:
        arguments.append([f"lead_input={_graph_input(op).index},"])
    if op.tags:
        arguments.append(_keyword("tags", "(", [f"torch.Tag.{tag}" for tag in op.tags], ")"))
    if grown := grown_sample(op):
        arguments.append(_collection("grown_sample=lambda make: (", grown.args, "),", 4))
    arguments += autocast.data(op)
    if _traced_into_triton(op):
        arguments.append([f"kernels_module={_str(f'{package.name}.kernels.{op.name}')},"])
    return tuple(line for argument in arguments for line in argument)


def _graph_input(op: Op) -> Arg:
    """The Tensor the CUDA-graph test computes with an nn.Linear: the first required one in the op's dtype
    (not one `tests: args:` gives its own: rotary's int64 positions, an fp8 result), else the lead."""
    own = {s.name for s in op.sample_args if s.dtype}
    return next((a for a in op.tensor_args if not a.is_optional and a.name not in own), op.lead)


def _keyword(name: str, opening: str, items: list[str], closing: str) -> list[str]:
    """A keyword argument whose value is a tuple, list or dict, on the lines of an exploded call."""
    return _collection(f"{name}={opening}", items, closing + ",", 4)


def _normal_label(op: Op, index: int) -> str:
    return "normal" if len(op.shapes) == 1 else f"normal{index}"


def _sample(op: Op, label: str, shape_of, empty: bool = False) -> Sample:
    """`shape_of(a)`: a Tensor's (shape,) or (shape, strided), or None where the sample leaves it out."""
    shape_of = sample_shapes_module.with_shape_relations(op, shape_of, int_samples(op))
    args = []
    for a in op.args:
        shape = shape_of(a) if a.is_tensor else None
        if is_tensor_list(a):  # Tensors like the lead (non-contiguous where it is)
            made = _make(op, op.lead, *shape_of(op.lead))
            args.append(f"[{', '.join(tensor_list(a, made, 'None'))}]")
        else:
            args.append(sample_value(a, op) if not a.is_tensor else "None" if shape is None else _make(op, a, *shape))
    return Sample(label, tuple(args), empty)


def is_tensor_list(arg: Arg) -> bool:
    return arg.is_tensor_list


def tensor_list(arg: Arg, one, none):
    """A Tensor list argument as every sample draws it (the tests, the benchmark, kopgen check): two Tensors
    of the lead's shape, `one`; a `Tensor?[]` holds one and `none`."""
    return [one, one] if str(arg.schema.type) == "Tensor[]" else [one, none]


def int_samples(op: Op) -> dict[str, int]:
    """Each int argument's value in the samples, which shape relations may read."""
    return {a.name: int(sample_value(a, op)) for a in op.args if a.kind == "int"}


def sample_shapes(op: Op, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The Tensors' shapes of the sample of `shapes` (one of the spec's `tests.shapes`), the spec's shape
    relations applied, as the generated tests make them."""
    shape_of = sample_shapes_module.with_shape_relations(op, lambda a: (shapes[a.name],), int_samples(op))
    return {a.name: tuple(shape_of(a)[0]) for a in op.tensor_args}




def _make(op: Op, arg: Arg, shape: tuple[int, ...], strided: bool = False) -> str:
    """`make(8, 6)`, `make.strided(8, 6)`, or `make.drawn(8, dtype=torch.int64, low=0, high=10)` for a
    Tensor the spec's `tests: args:` sets."""
    sizes = [str(n) for n in shape]
    keywords = drawn_keywords(op, arg)
    if not keywords:
        return f"{'make.strided' if strided else 'make'}({', '.join(sizes)})"
    return f"make.drawn({', '.join(sizes + keywords + (['strided=True'] if strided else []))})"


def drawn_keywords(op: Op, arg: Arg) -> list[str]:
    """`dtype=torch.int64, low=0, high=8`: how the spec's `tests: args:` draws a Tensor (the tests' Make.drawn,
    the benchmark's drawn); none where it says nothing of it."""
    setting = sample_setting(op, arg)
    if setting is None:
        return []
    keywords = [f"dtype=torch.{setting.dtype}"] if setting.dtype else []
    return keywords + [f"{name}={value!r}" for name, value in (("low", setting.low), ("high", setting.high))
                       if value is not None]


# -- formatting: each statement as `ruff format` writes it, given the column it starts at


def _str(text: str) -> str:
    """A string literal of an identifier, in ruff's double quotes."""
    return f'"{text}"'


def _fits(line: str, column: int) -> bool:
    return column + len(line) <= LINE_LENGTH


def _collection(head: str, items, close: str, column: int) -> list[str]:
    """A tuple, list, set or dict literal that ends a line: on that line where it fits, else one item a
    line with a trailing comma (a tuple of one keeps its comma)."""
    items = list(items)
    one_tuple = "," if len(items) == 1 and head.endswith("(") else ""
    line = head + ", ".join(items) + one_tuple + close
    if _fits(line, column):
        return [line]
    return [head, *(f"{INDENT}{item}," for item in items), close]


def _call(head: str, items, close: str, column: int) -> list[str]:
    """Arguments or base classes: on the line where they fit, else on one line of their own, else (several)
    one a line with a trailing comma."""
    items = list(items)
    inline = ", ".join(items)
    if _fits(head + inline + close, column):
        return [head + inline + close]
    if len(items) == 1 or _fits(INDENT + inline, column):
        return [head, INDENT + inline, close]
    return [head, *(f"{INDENT}{item}," for item in items), close]


# -- what differs between op kinds: one row per kind, the one place this module chooses by kind


class _KindTests(NamedTuple):
    samples: Callable[[Op], list[Sample]]  # the kind's own samples, after `empty`
    data: Callable[[Op], list[list[str]]]  # the kind's own OpData arguments (lines of each)
    class_body: Callable[[Op], list[str]] = lambda op: []  # lines of the test class before `data =`
    differentiable: Callable[[Op], bool] = lambda op: True  # whether autograd could track an output at all
    empties: bool = False  # whether `empty` empties every Tensor with the lead's rows, not only the full-rank ones
    kept_dense: Callable[[Op], frozenset[str]] = lambda op: frozenset()  # Tensors the noncontiguous sample keeps dense
    # Whether its inputs broadcast, as kopgen's own kernels do; a user's kernel is held to the shapes the spec gives.
    broadcasts: bool = True


def _nothing(op: Op) -> list:
    return []


def _row_samples(op: Op) -> list[Sample]:
    """Rows of no elements, where the inputs have rows."""
    first = op.shapes[0]
    if len(first[op.lead.name]) < 2:
        return []
    return [_sample(op, "empty_rows", lambda a: (first[a.name][:-1] + (0,),), True)]


def _row_data(op: Op) -> list[list[str]]:
    """A mean's empty rows give nan, which opcheck does not compare as equal."""
    if not op.body.reduction.is_mean:
        return []
    labels = [_str(s.label) for s in samples(op) if s.label != "empty_rows"]
    return [
        ["# opcheck compares without equal_nan: not on empty rows, whose mean is nan."],
        _keyword("opcheck_samples", "(", labels, ")"),
        ["equal_nan=True,"],
    ]


def _custom_class_body(op: Op) -> list[str]:
    """Outputs that `fake` gives strides are not contiguous: opcheck compares their strides instead;
    a size that only the data decides is a new symbol, which meta tensors cannot hold."""
    lines = []
    if any(output.strides is not None for output in op.body.outputs):
        lines.append("    contiguous_outputs = False  # `fake` gives the strides, which opcheck compares")
    if any(is_dynamic(output.shape) for output in op.body.outputs):
        lines.append("    data_dependent_sizes = True  # `fake` sizes an output from the data: dynamic()")
    return lines


def _dense_written(op: Op) -> frozenset[str]:
    """The mutated arguments a custom kernel indexes flat (its `contiguous:`), which it refuses strided."""
    return frozenset(a.name for a in op.mutated_args if a.name in op.body.contiguous)


def _some_float_output(op: Op) -> bool:
    """Integer and bool outputs never require grad, nor do Tensors of their own dtype (`tests: args:`, an
    int64 index): an op of only those has no gradient to refuse."""
    floating = any(o.dtype.removeprefix("torch.") not in NOT_DIFFERENTIABLE_DTYPES for o in op.body.outputs)
    return floating and not all(own_dtype(op, a) for a in op.tensor_args)


_KINDS = {
    PointwiseCompute: _KindTests(_nothing, _nothing),
    RowReduction: _KindTests(_row_samples, _row_data),
    RowNormalization: _KindTests(_row_samples, _nothing),
    CustomKernel: _KindTests(_nothing, _nothing, _custom_class_body, _some_float_output, empties=True,
                             kept_dense=_dense_written, broadcasts=False),
    # Its other Tensors are drawn half as wide as the split one (split.half_width_samples), in every sample.
    GatedSplit: _KindTests(_nothing, _nothing, split.class_body, broadcasts=False),
    SplitGradient: _KindTests(_nothing, _nothing, broadcasts=False),  # a backward kernel: its op's suite tests it
    RowGradient: _KindTests(_nothing, _nothing, broadcasts=False),  # as SplitGradient
}
