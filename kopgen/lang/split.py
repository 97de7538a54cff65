"""This module translates the gated-split kind (kopgen/split.py) where it differs from a pointwise op:
the line that binds a `split` argument's halves (`gate, up = ...`) before a launcher, a fake kernel,
a reference or a backward reads them, in Python and in C++.
"""

from __future__ import annotations

import ast

from ..backward_kernel import RowGradient
from ..model import Op, Package, Route
from ..split import GatedSplit, SplitGradient
from .layout import wrap


def is_split(op: Op) -> bool:
    return isinstance(op.body, GatedSplit)


def bind(op: Op, indent: int = 4, module: str = "_support.") -> list[str]:
    """`gate, up = _support.split_halves("ns::op", x)`: the halves as views (none for other kinds; a row
    reduction's backward kernel's `grad = grad.unsqueeze(-1)`, each row's value as a column);
    `indent` 0 for a template that indents the line itself."""
    if isinstance(op.body, RowGradient):  # a row reduction's backward kernel: grad (and result) as columns
        columns = op.body.per_row
        return [" " * indent + f"{', '.join(columns)} = {', '.join(f'{n}.unsqueeze(-1)' for n in columns)}"]
    if not is_split(op):
        return []
    body = op.body
    target = ", ".join(h.name for h in body.halves)
    call = wrap(f"{target} = {module}split_halves(", [f'"{op.qualname}"', body.source.name], ")", max(indent, 4))
    return [" " * indent + call]


def bind_for_eager(op: Op) -> list[str]:
    """The halves bound for the formulas as written, which a differentiated backward runs in place of the
    backward kernel (that reads the argument itself)."""
    formulas = [g.eager.python for g in op.backward.gradients if g.eager]
    return bind(op, 8) if is_split(op) and _reads_halves(op, formulas) else []


def _reads_halves(op: Op, formulas: list[str]) -> bool:
    read = {n.id for text in formulas for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}
    return bool({h.name for h in op.body.halves} & read)


def bind_output(op: Op, indent: int = 4) -> list[str]:
    """A split op's backward kernel: the halves of its output, which its kernel writes in place."""
    if not isinstance(op.body, SplitGradient):
        return []
    target = ", ".join(w.name for w in op.body.writes)
    call = wrap(f"{target} = _support.split_halves(", [f'"{op.qualname}"', op.body.joined], ")", max(indent, 4))
    return [" " * indent + call]


def bind_in_backward(op: Op) -> list[str]:
    """The halves bound in backward, where a formula reads them (from the saved argument)."""
    if not is_split(op):
        return []
    formulas = [g.formula.python for g in op.backward.gradients if g.formula]
    return bind(op) if _reads_halves(op, formulas) else []


def cpp_bind(op: Op) -> list[str]:
    """The host function's first statements: the halves as views of the argument (narrow), its last
    dimension checked even (none for other kinds)."""
    if not is_split(op):
        return []
    x = op.body.source.name
    gate, up = (h.name for h in op.body.halves)
    width = f"{x}.size(-1)"
    return [f"// {x}'s last dimension in halves, read in place: {gate} = {x}[..., :d], {up} = {x}[..., d:]",
            f"KOPGEN_CHECK({x}.dim() > 0 && {width} % 2 == 0,",
            f'             "{op.qualname}: the last dimension (", {width},',
            '             ") is split in halves, so its size must be even");',
            *_cpp_halves(op, "Tensor")]


def cpp_bind_for_eager(op: Op) -> list[str]:
    """C++ autograd's bind_for_eager: the halves as views of the saved argument, for the formulas as
    written, which a differentiated backward runs."""
    formulas = [g.eager.python for g in op.backward.gradients if g.eager]
    return _cpp_halves(op, "const Tensor") if is_split(op) and _reads_halves(op, formulas) else []


def _cpp_halves(op: Op, declared: str) -> list[str]:
    """`declared gate = x.narrow(...)`, and up's."""
    x = op.body.source.name
    gate, up = (h.name for h in op.body.halves)
    width = f"{x}.size(-1)"
    stable = op.registration == "stable_abi"

    def narrow(start: str) -> str:  # the stable ABI has narrow as a function, which takes its Tensor by reference
        return f"torch::stable::narrow({x}, -1, {start}, {width} / 2)" if stable else f"{x}.narrow(-1, {start}, {width} / 2)"

    return [f"{declared} {gate} = {narrow('0')};", f"{declared} {up} = {narrow(f'{width} / 2')};"]


def any_split(package: Package) -> bool:
    """Whether the contract has SplitInHalves: some op splits an argument."""
    return any(is_split(op) for op in package.ops)


def class_body(op: Op) -> list[str]:
    """The test class's line that names the argument SplitInHalves narrows to an odd width."""
    lines = [f"    split_input = {op.body.source.index}  # {op.body.source.name}: its last dimension is split in halves"]
    if op.registration in (Route.STABLE_ABI, Route.TORCH_LIBRARY):  # docs/field-notes.md: the H200's torch 2.11
        lines.append("    # torch 2.11 crashes on the odd-width error raised in a compiled kernel")
        lines.append('    kernel_errors_raise = torch.__version__ >= "2.13"')
    return lines


# The contract's check of split ops (tests/_contract.py), and the two blank lines before the next class.
CONTRACT_CLASS = '''\
class SplitInHalves(Contract):
    """An op that splits an argument's last dimension in halves: an odd width is refused with a
    clear error, by its kernels and by its fake kernel (on meta tensors, as torch.compile traces)."""

    split_input: int  # the argument split
    # False where an error raised in the op's kernel crashes the process
    kernel_errors_raise = True

    def odd_args(self, device) -> tuple:
        args = list(self.normal_args(device))
        split = self.split_input
        args[split] = args[split][..., 1:]  # one element fewer: odd
        return tuple(args)

    def test_odd_last_dimension_is_refused_by_the_kernel(self, device):
        if not self.kernel_errors_raise:
            pytest.skip(
                f"torch {torch.__version__}: the odd-width error raised in a compiled kernel "
                "crashes the process (kopgen's docs/field-notes.md)"
            )
        with pytest.raises(RuntimeError, match="its size must be even"):
            self.call(self.data.op, self.odd_args(device))

    def test_odd_last_dimension_is_refused_by_the_fake_kernel(self, device):
        args = self.odd_args(device)
        meta = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
        with pytest.raises(RuntimeError, match="its size must be even"):
            self.call(self.data.op, meta)


'''


def contract_class(package: Package) -> list[str]:
    """SplitInHalves, where some op of the package splits an argument."""
    return CONTRACT_CLASS.split("\n")[:-1] if any_split(package) else []
