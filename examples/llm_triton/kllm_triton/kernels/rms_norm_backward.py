"""Kernels of kllm_triton::rms_norm_backward: the gradients of rms_norm:

    r = 1 / sqrt(mean(x^2) + epsilon), xhat = x * r      (per row of the last dimension)
    grad_input = r * (grad * weight - xhat * mean(grad * weight * xhat))
    grad_weight = sum over rows of grad * xhat

The launcher takes the launch wrapper as a keyword: the generated triton_op body passes
torch.library.wrap_triton (torch.compile traces into the kernels); eager calls leave it as it is.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.runtime.interpreter import InterpretedFunction

from .. import _support


@triton.jit
def rms_norm_grad_input_kernel(
    grad_input_ptr,
    inv_rms_ptr,
    grad_ptr,
    input_ptr,
    weight_ptr,
    epsilon,
    hidden,
    BLOCK_COLS: tl.constexpr,
    COL_BLOCKS: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,
):
    # Geometry: one program per row (grid = rows), two passes over the row in COL_BLOCKS steps of
    # BLOCK_COLS columns: the two sums, then the write; stores the row's r too. 64-bit offsets.
    row = tl.program_id(0).to(tl.int64)
    base = row * hidden
    squares = tl.full((BLOCK_COLS,), 0.0, dtype=COMPUTE_DTYPE)
    dots = tl.full((BLOCK_COLS,), 0.0, dtype=COMPUTE_DTYPE)  # grad * weight * x
    for block in range(COL_BLOCKS):
        cols = block * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
        mask = cols < hidden
        x = tl.load(input_ptr + base + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
        g = tl.load(grad_ptr + base + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
        w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
        squares += x * x
        dots += g * w * x
    # tl.reduce with tl.sum's combine function, which the interpreter runs (tl.sum it cannot).
    mean = tl.reduce(squares, 0, tl.standard._sum_combine) / hidden
    # Cast: under torch.compile, Inductor passes float scalars as float64.
    r = (1.0 / tl.sqrt(mean + epsilon)).to(COMPUTE_DTYPE)
    mean_gwx = r * tl.reduce(dots, 0, tl.standard._sum_combine) / hidden
    tl.store(inv_rms_ptr + row, r)
    for block in range(COL_BLOCKS):
        cols = block * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
        mask = cols < hidden
        x = tl.load(input_ptr + base + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
        g = tl.load(grad_ptr + base + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
        w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
        out = r * (g * w - x * r * mean_gwx)
        tl.store(grad_input_ptr + base + cols, out.to(grad_input_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rms_norm_grad_weight_kernel(
    partial_ptr,
    grad_ptr,
    input_ptr,
    inv_rms_ptr,
    rows,
    hidden,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,
):
    # Geometry: a 2-D grid, axis 0 over blocks of BLOCK_ROWS rows, axis 1 over blocks of
    # BLOCK_COLS columns; each program writes its block's column sums, in COMPUTE_DTYPE, to row
    # program_id(0) of `partial`, which the launcher sums (deterministic). 64-bit offsets.
    row_block = tl.program_id(0).to(tl.int64)
    rws = row_block * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.program_id(1).to(tl.int64) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_mask = cols < hidden
    mask = (rws < rows)[:, None] & col_mask[None, :]
    offsets = rws[:, None] * hidden + cols[None, :]
    g = tl.load(grad_ptr + offsets, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    x = tl.load(input_ptr + offsets, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    r = tl.load(inv_rms_ptr + rws, mask=rws < rows, other=0.0)
    sums = tl.reduce(g * x * r[:, None], 0, tl.standard._sum_combine)
    tl.store(partial_ptr + row_block * hidden + cols, sums, mask=col_mask)


# CPU tensors run the same kernels in Triton's interpreter.
rms_norm_grad_input_kernel_interpreted = InterpretedFunction(rms_norm_grad_input_kernel.fn)
rms_norm_grad_weight_kernel_interpreted = InterpretedFunction(rms_norm_grad_weight_kernel.fn)


def _identity(kernel):
    return kernel


def rms_norm_backward_triton(
    grad: Tensor, input: Tensor, weight: Tensor, epsilon: float, *, wrap=_identity
) -> tuple[Tensor, Tensor]:
    """Returns (grad_input, grad_weight) of rms_norm."""
    grad_input, grad_weight = _support.rms_norm_backward_output(grad, input, weight, epsilon)
    hidden = input.shape[-1]
    rows = input.numel() // hidden if hidden else 0
    if rows == 0:
        return grad_input, grad_weight.zero_()
    grad, input, weight = grad.contiguous(), input.contiguous(), weight.contiguous()
    if input.is_cuda:
        input_kernel, weight_kernel = rms_norm_grad_input_kernel, rms_norm_grad_weight_kernel
    else:
        input_kernel = rms_norm_grad_input_kernel_interpreted
        weight_kernel = rms_norm_grad_weight_kernel_interpreted
    # float32 at least (gradcheck runs float64).
    compute_dtype, buffer_dtype = (
        (tl.float64, torch.float64) if input.dtype == torch.float64 else (tl.float32, torch.float32)
    )
    inv_rms = torch.empty(rows, dtype=buffer_dtype, device=input.device)
    block_cols = min(4096, triton.next_power_of_2(hidden))
    wrap(input_kernel)[(rows,)](
        grad_input,
        inv_rms,
        grad,
        input,
        weight,
        epsilon,
        hidden,
        BLOCK_COLS=block_cols,
        COL_BLOCKS=triton.cdiv(hidden, block_cols),
        COMPUTE_DTYPE=compute_dtype,
    )
    # 64 rows x 64 columns per program; the partial sums of the row blocks are summed here.
    block_rows, block_cols = 64, min(64, triton.next_power_of_2(hidden))
    partial = torch.empty(triton.cdiv(rows, block_rows), hidden, dtype=buffer_dtype, device=input.device)
    grid = (triton.cdiv(rows, block_rows), triton.cdiv(hidden, block_cols))
    wrap(weight_kernel)[grid](
        partial,
        grad,
        input,
        inv_rms,
        rows,
        hidden,
        BLOCK_ROWS=block_rows,
        BLOCK_COLS=block_cols,
        COMPUTE_DTYPE=compute_dtype,
    )
    # Summed into grad_weight (in its dtype) by torch: a copy_ would not trace on fake CUDA tensors.
    return grad_input, torch.sum(partial, 0, out=grad_weight)
