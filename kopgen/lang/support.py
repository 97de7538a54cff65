"""This module translates the model into the generated _support.py: the helpers that launchers,
fake kernels, references and autograd share, and those of each op kind its ops need (a row
reduction's output and row references, each custom op's output allocator).
"""

from __future__ import annotations

from ..model import CustomKernel, Op, Package
from ..split import GatedSplit, SplitGradient
from . import fusion, layout, norm_sums, python, sharding
from .layout import wrap


def support_templates(package: Package) -> list[str]:
    """The helpers of the package's op kinds: each kind's "rows" and "support" templates, where it has them
    (once each: a row normalisation shares the row reduction's; a gated split is a pointwise kind of its own)."""
    split_kinds = (GatedSplit, SplitGradient)  # a split op's backward kernel adds joined_output
    kinds = package.kinds + tuple(k for k in split_kinds if any(isinstance(op.body, k) for op in package.ops))
    templates = [kind.templates[role] for kind in kinds for role in ("rows", "support") if role in kind.templates]
    return list(dict.fromkeys(templates))


def launches_compiled_triton(package: Package) -> bool:
    """Whether some op's generated launcher runs a compiled Triton kernel (through _support.launch);
    custom kernels' launchers are the user's."""
    return any(op.uses_compiled_triton and not isinstance(op.body, CustomKernel) for op in package.ops)


def needs_device_guard(package: Package) -> bool:
    """Whether some custom kernel's launcher launches compiled Triton through Triton (under device_guard)."""
    return any(op.uses_compiled_triton and isinstance(op.body, CustomKernel) for op in package.ops)


def support_imports(package: Package) -> list[str]:
    """The standard modules _support.py imports (a blank line after them where there are some)."""
    modules, interprets = [], interprets_users_kernels(package)
    if needs_device_guard(package) or interprets:
        modules.append("contextlib")
    if interprets:
        modules.append("inspect")
    modules.append("functools")  # the caches of broadcast shapes and layouts
    if package.needs_tensor_metadata or {"max", "min"} & set(package.reductions):
        modules.append("math")
    if launches_compiled_triton(package):
        modules.append("operator")
    modules += sharding.support_imports(package)  # after_import's
    modules.sort()
    abc = ["Callable", *["Iterator"] * interprets]  # _cached's, always; _nested_interpreted's
    abc += ["Sequence"] if python.typing_imports(custom_ops(package)) else []
    lines = [f"import {module}" for module in modules] + ([f"from collections.abc import {', '.join(abc)}"] if abc else [])
    return lines + ([""] if lines else [])


def third_party_imports(package: Package) -> list[str]:
    """torch, Triton where _support launches compiled kernels or has a kernel of its own (the column sums'),
    FunctionalTensorMode for trace_as_reference."""
    triton = launches_compiled_triton(package)
    kernel = norm_sums.any_launched_column_sums(package)
    traced, interprets = fusion.traces_references(package), interprets_users_kernels(package)
    return ["import torch", *["import triton"] * (triton or kernel), *["import triton.language as tl"] * kernel,
            "from torch import Tensor",
            *["from torch._subclasses.functional_tensor import FunctionalTensorMode"] * traced,
            *["from triton.runtime.autotuner import Autotuner, Heuristics"] * interprets,
            *["from triton.runtime.interpreter import InterpretedFunction"] * (kernel or interprets),
            *["from triton.runtime.jit import JITFunction"] * (triton or kernel or interprets)]


def interprets_users_kernels(package: Package) -> bool:
    """Whether some custom kernel's skeleton runs on CPU tensors in Triton's interpreter, through
    _support.interpreted (the user's kernels may be autotuned and call @triton.jit helpers)."""
    return any(op.uses_interpreter and isinstance(op.body, CustomKernel) for op in package.ops)


def traces_references(package: Package) -> bool:
    """Whether _support.py has trace_as_reference (kopgen/lang/fusion.py)."""
    return fusion.traces_references(package)


def tensors_parameter(package: Package) -> str:
    """The `*tensors` of the shared helpers, which skip Nones where some op takes a `Tensor?`."""
    return "*tensors: Tensor | None" if package.has_optional_inputs else "*tensors: Tensor"


def first_tensor(package: Package) -> str:
    return "given(tensors)[0]" if package.has_optional_inputs else "tensors[0]"


def row_helper_template(kind: str) -> str:
    """The _support helper that reduces rows the way `kind` does (empty rows as the SPEC says)."""
    return "package/_support/row_mean_sum.py.j2" if kind in ("sum", "mean") else "package/_support/row_max_min.py.j2"


def row_helper_doc(kind: str) -> str:
    return {
        "sum": "Sums over the last dimension; an empty row sums to 0.",
        "mean": "Means over the last dimension; an empty row has mean nan, as in torch.mean.",
        "max": "The maximum over the last dimension; an empty row gives -inf, the identity.",
        "min": "The minimum over the last dimension; an empty row gives inf, the identity.",
    }[kind]


def row_identity(kind: str) -> str:
    """What row_max and row_min give for an empty row."""
    return "-math.inf" if kind == "max" else "math.inf"


def custom_ops(package: Package) -> list[Op]:
    """The custom ops that return Tensors, each allocated by its own helper (a mutating op may return none,
    and one whose output size is `dynamic()` allocates it in its launcher)."""
    return [op for op in package.ops if isinstance(op.body, CustomKernel) and op.num_outputs
            and not python.sized_by_data(op)]  # whose launcher allocates what only the data sizes


def checks_contiguity(package: Package) -> bool:
    """Whether a skeleton launcher checks that a mutated argument in its `contiguous:` is dense."""
    ops = [op for op in package.ops if isinstance(op.body, CustomKernel) and op.uses_triton]
    return any(a.name in op.body.contiguous for op in ops for a in op.mutated_args)


def custom_output(op: Op) -> list[str]:
    """The body of a custom op's `<op>_output`: each output allocated as its spec's `fake` describes."""
    device = f"{op.lead.name}.device"
    outputs = [python.empty_output(output, output.shape, device) for output in op.body.outputs]
    noun = "outputs" if len(outputs) > 1 else "output"
    pronoun = "them" if len(outputs) > 1 else "it"
    lines = [f'    """The {noun} of {op.qualname}, as its spec\'s `fake` describes {pronoun} (its kernel is the user\'s)."""']
    if python.returns_list(op):  # `-> Tensor[]`: a list, as the op returns them
        return lines + ["    " + wrap("return [", outputs, "]", 4, explode=True)]
    if len(outputs) == 1:
        return lines + ["    " + layout.assign("return", outputs[0], 4)]
    return lines + ["    " + wrap("return (", outputs, ")", 4, explode=True)]
