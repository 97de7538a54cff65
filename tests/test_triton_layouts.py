"""The Triton kernels of `compute:` and `reduce:` read broadcast and non-contiguous inputs through their
strides: the golden launchers run in Triton's interpreter on every layout of the tables below, agree with
eager PyTorch, and copy inputs dense only where the layout keeps more than two dimensions. Row reductions
pick their block shape by row length: a few classes, not one compile per column count."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest
import torch

GOLDEN = Path(__file__).parent / "golden"


def load(monkeypatch, example: str, package: str, module: str) -> types.ModuleType:
    """`package.module` of a golden tree, imported without the package's __init__ (which registers ops)."""
    root = types.ModuleType(package)
    root.__path__ = [str(GOLDEN / example / package)]
    monkeypatch.setitem(sys.modules, package, root)
    for name in [name for name in sys.modules if name.startswith(f"{package}.")]:
        monkeypatch.delitem(sys.modules, name)
    return importlib.import_module(f"{package}.{module}")


def no_dense_copies(monkeypatch, support: types.ModuleType) -> list[int]:
    """Counts the launchers' dense copies (calls of _support.broadcast_contiguous)."""
    copies = []
    copy = support.broadcast_contiguous

    def counted(*args):
        copies.append(1)
        return copy(*args)

    monkeypatch.setattr(support, "broadcast_contiguous", counted)
    return copies


r = torch.randn
# name: (a, b, whether the launcher may copy them dense)
POINTWISE = {
    "dense": (lambda: (r(8, 6), r(8, 6)), False),
    "broadcast row": (lambda: (r(8, 6), r(6)), False),
    "broadcast column": (lambda: (r(8, 6), r(8, 1)), False),
    "expanded": (lambda: (r(8, 1).expand(8, 6), r(8, 6)), False),
    "transposed": (lambda: (r(6, 8).t(), r(8, 6)), False),
    "both transposed": (lambda: (r(6, 8).t(), r(6, 8).t()), False),
    "every other column": (lambda: (r(8, 12)[:, ::2], r(8, 6)), False),
    "sliced rows and columns": (lambda: (r(10, 20)[::3, 2:9], r(7)), False),
    "3-d merging into 2": (lambda: (r(2, 3, 4), r(4)), False),
    "3-d permuted": (lambda: (r(4, 2, 3).permute(1, 2, 0), r(2, 3, 4)), False),
    "size-1 dimensions": (lambda: (r(1, 5, 1, 7), r(7)), False),
    "0-d and 2-d": (lambda: (r(()), r(5, 7)), False),
    "long rows": (lambda: (r(3, 2000), r(2000)), False),
    "3-d left over": (lambda: (r(2, 3, 4), r(2, 1, 4)), True),
}


@pytest.mark.parametrize("layout", POINTWISE)
def test_pointwise_kernel_reads_every_layout_through_its_strides(monkeypatch, layout):
    kernels = load(monkeypatch, "muladd", "kbook", "kernels.muladd")
    copies = no_dense_copies(monkeypatch, sys.modules["kbook._support"])
    make, copied = POINTWISE[layout]
    a, b = make()
    torch.testing.assert_close(kernels.muladd_triton(a, b, 0.5), a * b + 0.5)
    assert bool(copies) == copied


def test_tiles_choose_wide_blocks_for_rows_and_square_ones_for_transposed_inputs(monkeypatch):
    support = load(monkeypatch, "muladd", "kbook", "_support")
    x, out = r(64, 4096), torch.empty(64, 4096)
    assert support.tiles(out.shape, 1024, x, x, out) == (1, 64 * 4096, (0, 1) * 3, 1, 1024)
    assert support.tiles(out.shape, 1024, x, r(4096), out) == (64, 4096, (4096, 1, 0, 1, 4096, 1), 1, 1024)
    transposed = r(4096, 64).t()
    assert support.tiles(out.shape, 1024, transposed, x, out) == (64, 4096, (1, 64, 4096, 1, 4096, 1), 64, 64)
    assert support.tiles(torch.Size([2, 3, 4]), 1024, r(2, 3, 4), r(2, 1, 4)) is None


def test_layouts_are_computed_once_per_shape_and_strides(monkeypatch):
    """The strided layouts are cached by each tensor's shape and strides (new tensors of the same
    geometry hit the cache, other strides of the same shapes do not); dense tensors skip the cache."""
    support = load(monkeypatch, "muladd", "kbook", "_support")
    out, weight = torch.empty(64, 256), r(256)
    broadcast = support.tiles(out.shape, 1024, r(64, 256), weight, out)
    assert support.tiles(out.shape, 1024, r(64, 256), r(256), torch.empty(64, 256)) == broadcast
    assert support._strided_tiles.cache_info().hits == 1
    transposed = support.tiles(out.shape, 1024, r(256, 64).t(), weight, out)
    assert transposed == (64, 256, (1, 64, 0, 1, 256, 1), 64, 64)
    assert support._strided_tiles.cache_info().misses == 2
    # Dense, with the output's elements: leading dimensions of one element do not matter.
    assert support.tiles(torch.Size([1, 256]), 1024, weight, r(1, 256)) == (1, 256, (0, 1) * 2, 1, 1024)
    assert support._strided_tiles.cache_info().misses == 2
    rows = load(monkeypatch, "rows", "krows", "_support")
    x = r(8, 6)
    assert rows.row_layout(x.shape, x) == (8, 6, (6, 1))
    assert rows.row_layout(x.shape, r(6, 8).t()) == rows.row_layout(x.shape, r(6, 8).t()) == (8, 6, (1, 8))
    assert rows._strided_rows.cache_info().hits == 1


def test_broadcast_shapes_are_cached_and_symbolic_ones_computed(monkeypatch):
    """pointwise_shape caches torch.broadcast_shapes (tens of us a call), and computes it for the
    symbolic sizes of torch.compile's dynamic shapes, which do not hash, as do the other caches;
    shapes that do not broadcast still raise."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    support = load(monkeypatch, "muladd", "kbook", "_support")
    assert support.pointwise_shape("op", r(3, 5), r(5)) == support.pointwise_shape("op", r(3, 5), r(5)) == (3, 5)
    assert support._broadcast_shapes.cache_info().hits == 1
    with pytest.raises(RuntimeError):
        support.pointwise_shape("op", r(3, 5), r(4))
    env = ShapeEnv()
    rows = env.create_symintnode(env.create_symbol(3, ConstantSource("rows")), hint=3)
    shape = support._broadcast_shapes(torch.Size([rows, 5]), torch.Size([1, 5]))
    assert not isinstance(shape[0], int) and shape[1] == 5
    # The other caches too (a triton_op's launcher is traced on such sizes).
    reductions = load(monkeypatch, "rows", "krows", "_support")
    assert reductions.row_blocks(rows, 1024, 4) == reductions.row_blocks(3, 1024, 4)

ROWS = {
    "dense": (lambda: r(8, 6), False),
    "transposed": (lambda: r(6, 8).t(), False),
    "3-d": (lambda: r(2, 3, 5), False),
    "every third column": (lambda: r(9, 20)[::2, 1::3], False),
    "expanded rows": (lambda: r(1, 5).expand(4, 5), False),
    "empty rows": (lambda: r(8, 0), False),
    "long rows": (lambda: r(3, 3000), False),
    "3-d permuted, rows left over": (lambda: r(3, 5, 2).permute(2, 0, 1), True),
}


@pytest.mark.parametrize("layout", ROWS)
def test_row_reductions_read_every_layout_through_its_strides(monkeypatch, layout):
    rowsum = load(monkeypatch, "rows", "krows", "kernels.rowsum")
    rowmax = importlib.import_module("krows.kernels.rowmax")
    weighted = importlib.import_module("krows.kernels.weighted_rowsum")
    copies = no_dense_copies(monkeypatch, sys.modules["krows._support"])
    make, copied = ROWS[layout]
    torch.manual_seed(0)
    x = make()
    weight = r(x.shape[-1])  # broadcast over the rows
    # Against float64 sums: two float32 sums of 3000 elements in different orders differ by more than
    # assert_close's float32 tolerance on some draws (1.5e-5 of about 50); a misread element differs by ~1.
    exact = {"rtol": 1e-5, "atol": 1e-4}
    torch.testing.assert_close(rowsum.rowsum_triton(x), x.double().sum(-1).float(), **exact)
    torch.testing.assert_close(weighted.weighted_rowsum_triton(x, weight),
                               (x.double() * weight.double()).sum(-1).float(), **exact)
    want_max = x.amax(-1) if x.shape[-1] else torch.full(x.shape[:-1], -torch.inf)
    torch.testing.assert_close(rowmax.rowmax_triton(x), want_max)
    assert bool(copies) == copied


def test_row_blocks_are_a_few_classes_not_one_per_column_count(monkeypatch):
    support = load(monkeypatch, "rows", "krows", "_support")
    for size in (2, 4, 8):
        blocks = {support.row_blocks(4096, n_cols, size) for n_cols in range(1, 70_000, 7)}
        assert len(blocks) <= 8, (size, blocks)
        long_rows = {support.row_blocks(4096, n_cols, size) for n_cols in range(65536 // size, 200_000, 999)}
        assert long_rows == {(1, 8192 // size, 16)}
    # The compiled kernel takes the row length at run time: no constexpr derived from it but the block.
    launcher = (GOLDEN / "rows/krows/kernels/rowsum.py").read_text()
    assert "CONST_COLS=None if out.is_cuda else n_cols," in launcher
    assert "for start in range(0, n_cols if CONST_COLS is None else CONST_COLS, BLOCK_COLS):" in launcher
