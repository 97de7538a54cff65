"""Kernels of kllm_triton::cross_entropy_forward: per row, the float32 loss
logsumexp(logits[row]) - logits[row, target[row]], and 0 where target[row] == ignore_index.

On CUDA tensors the compiled kernel runs; on CPU tensors the same kernel runs in Triton's
interpreter, which cannot call Triton's own @triton.jit helpers (tl.max, tl.sum, ...): the
reductions are tl.reduce with their combine functions.
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor
from triton.runtime.interpreter import InterpretedFunction

from .. import _support

# A finite start for the running maximum: exp(-inf - (-inf)) would be NaN.
_LOWEST = -3.0e38


@triton.jit
def cross_entropy_forward_kernel(
    logits_ptr,
    target_ptr,
    loss_ptr,
    n_classes,
    ignore_index,
    BLOCK: tl.constexpr,
    BLOCKS: tl.constexpr,
    LOWEST: tl.constexpr,
):
    # Geometry: one program per row (grid = rows), one pass over the row's classes in BLOCKS
    # steps of BLOCK: an online logsumexp, each lane keeping its running max and sum of
    # exponentials, combined at the end; 64-bit offsets.
    row = tl.program_id(0).to(tl.int64)
    base = row * n_classes
    maxima = tl.full((BLOCK,), LOWEST, dtype=tl.float32)
    sums = tl.full((BLOCK,), 0.0, dtype=tl.float32)
    for block in range(BLOCKS):
        cols = block * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(logits_ptr + base + cols, mask=cols < n_classes, other=float("-inf")).to(tl.float32)
        new_maxima = tl.maximum(maxima, x)
        sums = sums * tl.exp(maxima - new_maxima) + tl.exp(x - new_maxima)
        maxima = new_maxima
    top = tl.reduce(maxima, 0, tl.standard._elementwise_max)
    total = tl.reduce(sums * tl.exp(maxima - top), 0, tl.standard._sum_combine)
    target = tl.load(target_ptr + row)
    valid = (target != ignore_index) & (target >= 0) & (target < n_classes)
    # A target out of [0, n_classes) other than ignore_index reads class 0 and gives NaN.
    picked = tl.load(logits_ptr + base + tl.where(valid, target, 0)).to(tl.float32)
    loss = tl.log(total) + top - picked
    loss = tl.where(target == ignore_index, 0.0, tl.where(valid, loss, float("nan")))
    tl.store(loss_ptr + row, loss)


cross_entropy_forward_kernel_interpreted = InterpretedFunction(cross_entropy_forward_kernel.fn)


def cross_entropy_forward_triton(logits: Tensor, target: Tensor, ignore_index: int) -> Tensor:
    """The per-row loss of logits [rows, classes] against int64 target [rows], in float32."""
    loss = _support.cross_entropy_forward_output(logits, target, ignore_index)
    n_classes = logits.shape[-1]
    if loss.numel() == 0 or n_classes == 0:
        return loss.zero_()
    logits, target = logits.contiguous(), target.contiguous()
    kernel = cross_entropy_forward_kernel if loss.is_cuda else cross_entropy_forward_kernel_interpreted
    block = min(4096, triton.next_power_of_2(n_classes))
    # On the tensors' GPU, which need not be the current one.
    with _support.device_guard(loss):
        kernel[(loss.numel(),)](
            logits,
            target,
            loss,
            n_classes,
            ignore_index,
            BLOCK=block,
            BLOCKS=triton.cdiv(n_classes, block),
            LOWEST=_LOWEST,
        )
    return loss
