"""This module decides which ops torch.compile traces as their PyTorch reference, so that Inductor fuses
them with the operations around them, and writes the lines of _registration.py and _support.py that
say so (docs/performance.md, "Fusion under torch.compile", has the measurements and torch's sources).

An op is a wall no fusion crosses: Inductor calls it and runs an epilogue such as `.relu() * 2` as a
kernel of its own. Where the op's `compute` or `reduce` is kopgen's own, its reference (reference.py)
is the same function in PyTorch, and Inductor compiles that into one kernel with its neighbours.
"""

from __future__ import annotations

from ..model import Op, Package
from .layout import literal, wrap


def traced_as_reference(op: Op) -> bool:
    """Whether torch.compile traces the op as its reference: kopgen's own kernel (a `kernel: custom`
    op's kernel is the user's, which its reference need not match in every bit or stride), and an op
    that writes no argument (functionalization turns those into `auto_functionalized`, which keeps
    the kernel)."""
    return not op.body.user_writes_kernel and not op.is_mutating


def traces_references(package: Package) -> bool:
    """Whether _support.py has the helper and _registration.py imports reference.py."""
    return any(traced_as_reference(op) for op in package.ops)


# The contract's check of an op traced as its reference (after two blank lines), in a package that has one.
CONTRACT = '''

class TracedAsReference(Contract):
    """An op whose kernel is kopgen's own: torch.compile traces it as its PyTorch reference, which
    Inductor fuses with the operations around it (torch.export keeps the op: test_export_round_trip)."""

    def test_compile_traces_the_reference(self):
        """AOTAutograd's functional trace, which Inductor compiles, holds the reference's torch
        operations instead of the op (a call no fusion crosses)."""
        graph = functional_trace(self, self.normal_args())
        calls = [node.target for node in graph.nodes if node.op == "call_function"]
        assert calls and self.data.op not in calls, graph'''


def contract(package: Package) -> tuple[str, ...]:
    """The lines of TracedAsReference where the package has an op traced as its reference, else none."""
    return tuple(CONTRACT.split("\n")) if traces_references(package) else ()


def registration(op: Op) -> list[str]:
    """The lines of _registration.py after the op's autograd: torch.compile traces it as its reference."""
    if not traced_as_reference(op):
        return []
    return [
        "",
        "",
        f"# torch.compile traces {op.qualname} as its PyTorch reference, which Inductor fuses with the",
        "# operations around it; eager calls run the kernel, and torch.export keeps the op.",
        wrap("_support.trace_as_reference(", [literal(op.qualname), f"reference.{op.name}"]),
    ]


def triton_op_body_comment(op: Op) -> str:
    """What a triton_op's body is for: the fake kernel, and what torch.compile traces unless it traces the
    op as its reference."""
    if traced_as_reference(op):
        lines = ["The body is the fake kernel: torch.compile traces the op as its PyTorch reference (below),",
                 "which Inductor fuses with the operations around it, not this launch through wrap_triton."]
    else:
        lines = ["The body is also the fake kernel, and torch.compile traces through it: on CUDA it",
                 "launches the Triton kernel through wrap_triton, which Inductor compiles with the graph."]
    return "\n".join(f"    # {line}" for line in lines)[4:]
