"""Kernels of kllm_triton::rms_norm: input / sqrt(mean(input^2, -1) + epsilon) * weight.

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
def rms_norm_kernel(
    out_ptr,
    input_ptr,
    weight_ptr,
    epsilon,
    hidden,
    BLOCK_COLS: tl.constexpr,
    COL_BLOCKS: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,
):
    # Geometry: one program per row (grid = rows), two passes over the row in COL_BLOCKS steps of
    # BLOCK_COLS columns: the sum of squares, then the scaled write; 64-bit offsets. The trip
    # count is a constexpr: Triton's interpreter cannot loop to a runtime bound.
    base = tl.program_id(0).to(tl.int64) * hidden
    squares = tl.full((BLOCK_COLS,), 0.0, dtype=COMPUTE_DTYPE)
    for block in range(COL_BLOCKS):
        cols = block * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
        x = tl.load(input_ptr + base + cols, mask=cols < hidden, other=0.0).to(COMPUTE_DTYPE)
        squares += x * x
    # tl.reduce with tl.sum's combine function, which the interpreter runs (tl.sum it cannot).
    mean = tl.reduce(squares, 0, tl.standard._sum_combine) / hidden
    # Cast: under torch.compile, Inductor passes float scalars as float64.
    inv_rms = (1.0 / tl.sqrt(mean + epsilon)).to(COMPUTE_DTYPE)
    for block in range(COL_BLOCKS):
        cols = block * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
        mask = cols < hidden
        x = tl.load(input_ptr + base + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
        w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
        tl.store(out_ptr + base + cols, (x * inv_rms * w).to(out_ptr.dtype.element_ty), mask=mask)


# CPU tensors run the same kernel in Triton's interpreter.
rms_norm_kernel_interpreted = InterpretedFunction(rms_norm_kernel.fn)


def _identity(kernel):
    return kernel


def rms_norm_triton(input: Tensor, weight: Tensor, epsilon: float, *, wrap=_identity) -> Tensor:
    """Returns rms_norm(input) * weight over the last dimension."""
    out = _support.rms_norm_output(input, weight, epsilon)
    if out.numel() == 0:
        return out
    input, weight = input.contiguous(), weight.contiguous()
    kernel = rms_norm_kernel if out.is_cuda else rms_norm_kernel_interpreted
    # float32 at least (gradcheck runs float64).
    compute_dtype = tl.float64 if out.dtype == torch.float64 else tl.float32
    hidden = input.shape[-1]
    block_cols = min(4096, triton.next_power_of_2(hidden))
    grid = (out.numel() // hidden,)
    wrap(kernel)[grid](
        out,
        input,
        weight,
        epsilon,
        hidden,
        BLOCK_COLS=block_cols,
        COL_BLOCKS=triton.cdiv(hidden, block_cols),
        COMPUTE_DTYPE=compute_dtype,
    )
    return out
