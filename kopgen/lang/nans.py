"""Row reductions by max and min let a NaN win, as torch.amax and torch.amin do: a row holding one gives
NaN. The C++ and CUDA kernels do it in their Max and Min (csrc/pointwise.h, csrc/cuda/pointwise.cuh);
this module writes the Triton kernels' lines that do it (a row reduction's and a row normalisation's
max and min statistics), and the generated suite's check, NanRows.
"""

from __future__ import annotations

from ..model import Op, Package, RowReduction
from ..names import locals_for
from . import python
from .layout import wrap


def combined(kind: str, total: str, values: str) -> str:
    """`total` with `values` added by a reduction of `kind`: tl.maximum and tl.minimum keep a NaN, as
    torch.amax and torch.amin do, only when asked (by default a NaN loses: maxnumf)."""
    if kind in ("max", "min"):
        return f"tl.{kind}imum({total}, {values}, propagate_nan=tl.PropagateNan.ALL)"
    return f"{total} + {values}"


def reduced(op: Op, kind: str, target: str, block: str, combine: str, indent: int, keep_dims: bool = False) -> list[str]:
    """`target` = `block` reduced over its rows' columns by `combine` (tl.reduce with tl.<f>'s own combine
    function, which Triton's interpreter runs in-process: it cannot call the @triton.jit tl.<f>). By max or
    min, NaN where the row holds one, as torch.amax and torch.amin give: tl.max's combine function drops a
    NaN (maxnumf compiled, NumPy's nanmax in the interpreter). The compiled kernel (CONST_COLS is None)
    reduces with a combine function of its own that keeps one (helpers); the interpreter would call that
    element by element in Python (64 rows of 8192: 14.5 s, not 25 ms), so there the NaNs are counted in a
    second reduction. (On an H200 that second reduction took bfloat16 softmax at hidden 8192 from 34.9 to
    40.2 us, docs/performance.md.) Triton has no isnan of its own: a NaN is the value unequal to itself."""
    pad, local = " " * indent, locals_for(op)
    columns = "[:, None]" * keep_dims
    if kind not in ("max", "min"):
        return [pad + wrap(f"{target} = tl.reduce(", [block, "1", combine], f"){columns}", indent)]
    nans = local.nans
    nan_rows = f"{nans}{columns} > 0"
    return [f"{pad}if {local.CONST_COLS} is None:  # compiled: a combine function that keeps a NaN",
            f"{pad}    " + wrap(f"{target} = tl.reduce(", [block, "1", _KEEPING_NAN[kind]], f"){columns}", indent + 4),
            f"{pad}else:  # interpreted: tl.{kind}'s combine function, then the NaNs counted",
            f"{pad}    " + wrap(f"{target} = tl.reduce(", [block, "1", combine], f"){columns}", indent + 4),
            f"{pad}    {nans} = ({block} != {block}).to(tl.int32)  # noqa: PLR0124",
            f"{pad}    " + python.layout.assign(nans, f"tl.reduce({nans}, 1, tl.standard._sum_combine)", indent + 4),
            f"{pad}    " + python.layout.assign(target, f'tl.where({nan_rows}, float("nan"), {target})', indent + 4)]


# A compiled kernel's combine function by max or min that keeps a NaN, as torch.amax and torch.amin.
_KEEPING_NAN = {"max": "_max_keeping_nan", "min": "_min_keeping_nan"}


def helpers(op: Op) -> list[str]:
    """The module's combine functions that keep a NaN (`reduced`), for the reductions by max and min its kernel
    has; each line after two blank lines, none where it has none."""
    kinds = _reduction_kinds(op)
    lines = []
    for kind in ("max", "min"):
        if kind in kinds:
            lines += ["", "", "@triton.jit", f"def {_KEEPING_NAN[kind]}(total, values):",
                      f"    # The compiled kernels' combine function: a NaN wins, as in torch.a{kind}.",
                      f"    return tl.{kind}imum(total, values, propagate_nan=tl.PropagateNan.ALL)"]
    return lines


# The contract's check of a row reduction by max or min (after two blank lines), in a package that has one.
NAN_ROWS = '''

class NanRows(Contract):
    """A row reduction by max or min (or a normalisation reading one): a row holding a NaN gives NaN, as
    torch.amax and torch.amin do (std::max(total, value) and tl.maximum's default drop one arriving as
    `value`)."""

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


def _reduction_kinds(op: Op) -> set[str]:
    """The kinds of reduction an op's kernel makes: a row reduction's, a normalisation's statistics'."""
    if isinstance(op.body, RowReduction):
        return {op.body.reduction.kind}
    return {s.reduction.kind for s in getattr(op.body, "stats", ())}


def checked(op: Op) -> bool:
    """A row reduction by max or min, or a normalisation with a statistic by max or min: its tests check
    NanRows."""
    return bool(_reduction_kinds(op) & {"max", "min"})


def contract(package: Package) -> tuple[str, ...]:
    """The lines of NanRows where the package has a row reduction by max or min, else none."""
    return tuple(NAN_ROWS.split("\n")) if any(map(checked, package.ops)) else ()
