"""The plan `kopgen check` prints: per op its route, kernels per device and what backward saves."""

from __future__ import annotations

from .backward_kernel import why_eager
from .lang import autocast
from .lang.cpp_autograd import python_reason
from .lang.eager import below_autograd, has_function
from .model import Op, Package, RowNormalization, RowReduction
from .split import GatedSplit, SplitGradient


def describe_plan(package: Package, source: str) -> str:
    count = f"{len(package.ops)} op{'s' if len(package.ops) != 1 else ''}"
    lines = [f"{package.name} {package.version}: namespace {package.namespace}, {count} from {source}"]
    for op in package.ops:
        lines += [""] + _describe_op(op) + _backward_kernel(op, package) + _autograd(op, package)
    return "\n".join(lines) + "\n"


def _describe_op(op: Op) -> list[str]:
    kernels = ", ".join(
        f"{k.device}: {k.language}" + (" (interpreter)" if k.device == "cpu" and k.language == "triton" else "")
        + (f" (bound: {b.path}:{b.function})" if (b := op.bound_kernel(k.device)) else "")
        for k in op.kernels
    )
    lines = [
        f"{op.namespace}::{op.schema_text}",
        f"  route:    {op.registration}",
        f"  kernels:  {kernels}",
        f"  dtypes:   {', '.join(op.dtypes)}",
        f"  tags:     {', '.join(op.tags) or '(none)'}",
        f"  autocast: {autocast.describe(op)}",
    ]
    for i, stat in enumerate(getattr(op.body, "stats", ())):  # a row normalisation's, in order
        saved = f", saved for backward by _{op.name}_forward" if op.backward and stat.name in op.backward.stats else ""
        lines.append(f"  {'stats:   ' if i == 0 else '         '} {stat.name} = {stat.text.strip()} "
                     f"(per row, float32; float64 for float64 inputs{saved})")
    if isinstance(op.body, GatedSplit):
        x, (gate, up) = op.body.source.name, (h.name for h in op.body.halves)
        lines.append(f"  split:    {x} in halves, read in place: {gate} = {x}[..., :d], {up} = {x}[..., d:]")
    if op.is_mutating:
        written = ", ".join(a.name for a in op.mutated_args)
        lines.append(f"  writes:   {written} (in place; a mutating op is not differentiable)")
        return lines
    if op.backward_of:
        lines.append(f"  computes: the gradients of {op.namespace}::{op.backward_of} (its backward kernel)")
        return lines
    if op.backward is None:
        lines.append("  backward: none (not differentiable; backward raises)")
        return lines
    for i, gradient in enumerate(op.backward.gradients):
        formula = (gradient.eager or gradient.formula).text if gradient.formula else "non_differentiable"
        lines.append(f"  {'backward:' if i == 0 else '         '} {gradient.arg.name}: {formula}")
    saves = [f"{s.name} (tensor) if {_who(op, s.needed_by)} needs grad" for s in op.backward.saved_tensors]
    saves += [f"{s.name} (metadata only: shape, dtype, device)" for s in op.backward.saved_metadata]
    saves += [f"{name} (scalar)" for name in op.backward.scalars]
    shapes = [g.arg.name for g in op.backward.gradients if g.formula]
    if shapes:
        saves.append(f"shape of {', '.join(shapes)} (to sum broadcast gradients back)")
    for i, text in enumerate(saves or ["nothing"]):
        lines.append(f"  {'saves:   ' if i == 0 else '         '} {text}")
    return lines


def _backward_kernel(op: Op, package: Package) -> list[str]:
    """Whether backward runs the op's backward kernel (backward_kernel.py) or its formulas as torch ops, and why."""
    if not op.has_gradients:
        return []
    kernel = next((o for o in package.ops if o.backward_of == op.name), None)
    if isinstance(getattr(kernel, "body", None), SplitGradient):
        x = kernel.body.source.name
        return [f"  backward kernel: {kernel.qualname}, one launch writing both halves of {x}'s gradient (no cat)"]
    if isinstance(getattr(kernel, "body", None), RowNormalization):
        others = [g.arg.name for g in op.backward.gradients if g.formula and not g.eager]
        rest = f"; {', '.join(others)}: the formulas, as torch ops" if others else ""
        summed = [c.like for c in kernel.body.column_sums]
        also = f" and {', '.join(summed)}'s (summed over the rows in the kernel)" if summed else ""
        line = (f"  backward kernel: {kernel.qualname}, one launch for {op.lead.name}'s gradient (its row reductions, "
                f"then the formula){also}{rest}")
        return [line]
    if kernel is not None:
        return [f"  backward kernel: {kernel.qualname}, one launch for every gradient (then summed to broadcast shapes)"]
    why = why_eager(op) or "a formula is outside the pointwise language, or reads a Tensor? argument"
    if isinstance(op.body, RowReduction) and not why_eager(op):
        why = ("a formula is not pointwise over the inputs with grad and result read as columns "
               "(grad.unsqueeze(-1)), or it reads no input (grad broadcast: a view, which no kernel beats)")
    if isinstance(op.body, RowNormalization) and not why_eager(op):
        why = (f"{op.lead.name}'s formula is not pointwise with row reductions (E).mean(-1, keepdim=True) or "
               "(E).sum(-1, keepdim=True) of pointwise E, reads a Tensor? argument, or has no row reduction")
    if isinstance(op.body, GatedSplit) and not why_eager(op):
        why = (f"only {op.body.source.name}'s gradient, as torch.cat([A, B], -1) of two pointwise expressions "
               "over grad and the halves, gets one")
    return [f"  backward kernel: none, the formulas run as torch ops: {why}"]


def _autograd(op: Op, package: Package) -> list[str]:
    """Where the op's backward runs: C++ (lang/cpp_autograd.py) or Python, and why Python."""
    if not op.has_gradients:
        return []
    if op.cpp_autograd:
        return ["  autograd: C++ (a torch::autograd::Function in csrc/ops.cpp; calls with grad stay in C++)"]
    line = f"  autograd: Python (torch.library.register_autograd): {python_reason(op, package.ops)}"
    if below_autograd(op):  # lang/eager.py
        how = "with grad through an autograd.Function of its formulas" if has_function(op) else "without grad only"
        return [line, f"  typed API: plain eager calls go below the Python autograd kernel ({how})"]
    return [line]


def _who(op: Op, indices: tuple[int, ...]) -> str:
    return " or ".join(op.args[i].name for i in indices)
