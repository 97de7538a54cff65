"""The Triton route's row reductions under every block shape: the generated rowsum and rowmax kernels.

    python benchmarks/triton_row_blocks.py [sum] [max]        (CUDA only; default: sum)

The kernels are tests/golden/rows's, as kopgen writes them (masked loads, the row length at run time),
launched with each block (BLOCK_ROWS x BLOCK_COLS) and warp count that gives 16-64 bytes a thread, on
perf.py's shapes and two row lengths that are not powers of 2, float32 and bfloat16. CUDA-graph timing
(triton.testing.do_bench_cudagraph), beside torch.sum and a device copy timed the same way. Prints the
eight best blocks of each shape and the one `_support.row_blocks` picks (what the generated launcher runs).
"""

from __future__ import annotations

import functools
import itertools
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.testing import do_bench_cudagraph

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/golden/rows"))
from krows import _support
from krows.kernels.rowmax import rowmax_kernel
from krows.kernels.rowsum import rowsum_kernel

SHAPES = ((4096, 4096), (16384, 1024), (1024, 65536), (16384, 768), (4096, 3000))
KERNELS = {"sum": (rowsum_kernel, lambda x: x.float().sum(-1)), "max": (rowmax_kernel, lambda x: x.float().amax(-1))}


def blocks(x: torch.Tensor):
    """(block_rows, block_cols, warps) of 16-64 bytes a thread, up to 64 KiB a program."""
    cols = x.shape[-1]
    for block_cols, block_rows, warps in itertools.product(
        (512, 1024, 2048, 4096, 8192), (1, 2, 4, 8, 16), (2, 4, 8, 16)
    ):
        block_bytes = block_rows * block_cols * x.element_size()
        if block_cols <= 2 * cols and block_bytes <= 65536 and 16 <= block_bytes / (warps * 32) <= 64:
            yield block_rows, block_cols, warps


def launch(kernel, x: torch.Tensor, out: torch.Tensor, block_rows: int, block_cols: int, warps: int) -> None:
    rows, cols = x.shape
    kernel[(triton.cdiv(rows, block_rows),)](
        x,
        out,
        rows,
        cols,
        x.stride(0),
        x.stride(1),
        BLOCK_ROWS=block_rows,
        BLOCK_COLS=block_cols,
        CONST_COLS=None,
        COMPUTE_DTYPE=tl.float32,
        num_warps=warps,
    )


def main(names: list[str]) -> None:
    torch.manual_seed(0)
    for dtype, (rows, cols) in itertools.product((torch.float32, torch.bfloat16), SHAPES):
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        out = torch.empty(rows, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        nbytes = x.numel() * x.element_size()
        copy = do_bench_cudagraph(functools.partial(y.copy_, x))
        ref = do_bench_cudagraph(functools.partial(torch.sum, x, -1, out=out))
        print(
            f"{str(dtype)[6:]} {rows}x{cols}: copy {2 * nbytes / copy / 1e6:.0f} GB/s, "
            f"torch.sum {nbytes / ref / 1e6:.0f} GB/s",
            flush=True,
        )
        rule = _support.row_blocks(rows, cols, x.element_size())
        for name in names:
            kernel, expect = KERNELS[name]
            want, results = expect(x), []
            for block_rows, block_cols, warps in blocks(x):
                run = functools.partial(launch, kernel, x, out, block_rows, block_cols, warps)
                run()
                if not torch.allclose(out.float(), want, rtol=2e-2, atol=4.0):
                    print("  WRONG", name, block_rows, block_cols, warps)
                    continue
                results.append((nbytes / do_bench_cudagraph(run) / 1e6, block_rows, block_cols, warps))
            results.sort(reverse=True)
            for gbs, br, bc, w in results[:8]:
                print(f"  {name} {gbs:5.0f} GB/s  block {br}x{bc} warps {w}", flush=True)
            for gbs, br, bc, w in results:
                if (br, bc, w) == rule:
                    print(f"  {name} rule's block: {gbs:5.0f} GB/s  block {br}x{bc} warps {w}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["sum"])
