"""Row reductions by max and min let a NaN win, as torch.amax and torch.amin do: a row holding one gives
NaN. The C++ and CUDA kernels do it in their Max and Min (csrc/pointwise.h, csrc/cuda/pointwise.cuh);
this module writes the Triton kernels' lines that do it (a row reduction's and a row normalisation's
max and min statistics), and the generated suite's check, NanRows.
"""

from __future__ import annotations

from ..model import Op, Package, RowReduction
from ..names import locals_for
from . import python


def combined(kind: str, total: str, values: str) -> str:
    """`total` with `values` added by a reduction of `kind`: tl.maximum and tl.minimum keep a NaN, as
    torch.amax and torch.amin do, only when asked (by default a NaN loses: maxnumf)."""
    if kind in ("max", "min"):
        return f"tl.{kind}imum({total}, {values}, propagate_nan=tl.PropagateNan.ALL)"
    return f"{total} + {values}"


def nan_wins(op: Op, kind: str, reduced: str, block: str, indent: int, keep_dims: bool = False) -> list[str]:
    """After `reduced` = tl.reduce(`block`, 1, ...) by max or min: NaN where the row of `block` holds one, as
    torch.amax and torch.amin give. tl.max's combine function drops a NaN (maxnumf compiled, NumPy's nanmax
    in the interpreter); a combine function of our own would make the interpreter reduce element by element
    in Python. Triton has no isnan of its own: a NaN is the value unequal to itself (ruff's PLR0124)."""
    if kind not in ("max", "min"):
        return []
    pad, nans = " " * indent, locals_for(op).nans
    nan_rows = f"{nans}{'[:, None]' * keep_dims} > 0"
    return [f"{pad}# tl.{kind}'s combine function drops a NaN; torch.a{kind} gives NaN for a row holding one.",
            f"{pad}{nans} = ({block} != {block}).to(tl.int32)  # noqa: PLR0124",
            pad + python.layout.assign(nans, f"tl.reduce({nans}, 1, tl.standard._sum_combine)", indent),
            pad + python.layout.assign(reduced, f'tl.where({nan_rows}, float("nan"), {reduced})', indent)]


# The contract's check of a row reduction by max or min (after two blank lines), in a package that has one.
NAN_ROWS = '''

class NanRows(Contract):
    """A row reduction by max or min: a row holding a NaN gives NaN, as torch.amax and torch.amin
    do (std::max(total, value) and tl.maximum's default drop one arriving as `value`)."""

    def test_a_nan_wins(self, device, dtype):
        """The normal sample's rows five times as long (a C++ loop's lanes get columns, not only
        its tail), a NaN in every other row of the largest input at a column that moves from
        row to row, the first beside -inf: the reference's NaNs."""
        args = tuple(map(widened, self.normal_args(device, dtype)))
        x = max((arg for arg in args if isinstance(arg, torch.Tensor)), key=torch.numel)
        rows = x.view(-1, x.shape[-1])
        cols = rows.shape[1]
        for row in range(0, rows.shape[0], 2):
            rows[row, row * 7 % cols] = float("nan")
        if cols > 1:  # torch.amax of [nan, -inf] is nan
            rows[0, -1] = -float("inf")
        expected = self.expected(args)
        assert any(want.isnan().any() for want in expected), "the NaNs reached no row"
        outputs = self.run(self.data.op, args)
        assert_all_close(outputs, expected, equal_nan=True, **self.data.tolerances)


def widened(arg):
    """A Tensor's rows five times as long; one broadcast along them (1 column) stays."""
    if isinstance(arg, torch.Tensor) and arg.dim() and arg.shape[-1] > 1:
        return torch.cat([arg] * 5, -1)
    return arg'''


def checked(op: Op) -> bool:
    """A row reduction by max or min, whose tests check NanRows."""
    return isinstance(op.body, RowReduction) and op.body.reduction.kind in ("max", "min")


def contract(package: Package) -> tuple[str, ...]:
    """The lines of NanRows where the package has a row reduction by max or min, else none."""
    return tuple(NAN_ROWS.split("\n")) if any(map(checked, package.ops)) else ()
