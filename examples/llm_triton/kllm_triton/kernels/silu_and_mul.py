"""Kernels of kllm_triton::silu_and_mul: out = silu(input[..., :d]) * input[..., d:], d = input.shape[-1] // 2.

The launcher takes the launch wrapper as a keyword: the generated triton_op body passes
torch.library.wrap_triton (torch.compile traces into the kernel); eager calls leave it as it is.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.runtime.interpreter import InterpretedFunction

from .. import _support


@triton.jit
def silu_and_mul_kernel(
    out_ptr, input_ptr, n_rows, d, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr, COMPUTE_DTYPE: tl.constexpr
):
    # Geometry: a 2-D grid, axis 0 over blocks of BLOCK_ROWS rows, axis 1 over blocks of
    # BLOCK_COLS of the d output columns; 64-bit offsets.
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.program_id(1).to(tl.int64) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    mask = (rows < n_rows)[:, None] & (cols < d)[None, :]
    gate_offsets = rows[:, None] * (2 * d) + cols[None, :]
    gate = tl.load(input_ptr + gate_offsets, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    up = tl.load(input_ptr + gate_offsets + d, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    # silu(g) = g * sigmoid(g), written with tl.exp: the interpreter cannot call tl.sigmoid.
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + rows[:, None] * d + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)


# CPU tensors run the same kernel in Triton's interpreter.
silu_and_mul_kernel_interpreted = InterpretedFunction(silu_and_mul_kernel.fn)


def _identity(kernel):
    return kernel


def silu_and_mul_triton(out: Tensor, input: Tensor, *, wrap=_identity) -> None:
    """Writes silu(input[..., :d]) * input[..., d:] into out."""
    d = input.shape[-1] // 2
    if out.shape != input.shape[:-1] + (d,):
        raise RuntimeError(
            f"kllm_triton::silu_and_mul: out has shape {list(out.shape)}, "
            f"input {list(input.shape)}: out must be input.shape[:-1] + (input.shape[-1] // 2,)"
        )
    if out.numel() == 0:
        return
    _support.check_contiguous("kllm_triton::silu_and_mul", out=out)
    input = input.contiguous()
    kernel = silu_and_mul_kernel if out.is_cuda else silu_and_mul_kernel_interpreted
    compute_dtype = tl.float64 if out.dtype == torch.float64 else tl.float32  # float32 at least
    n_rows = out.numel() // d
    # Up to 1024 columns per program, and as many rows as make 4096 elements.
    block_cols = min(1024, triton.next_power_of_2(d))
    block_rows = min(4096 // block_cols, triton.next_power_of_2(n_rows))
    grid = (triton.cdiv(n_rows, block_rows), triton.cdiv(d, block_cols))
    wrap(kernel)[grid](out, input, n_rows, d, BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols, COMPUTE_DTYPE=compute_dtype)
