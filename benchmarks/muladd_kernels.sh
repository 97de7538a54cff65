#!/bin/bash
# Builds benchmarks/muladd_kernels.cu: the CUDA elementwise kernels of benchmarks/cuda_kernels.py's package
# (contiguous, broadcast and transposed inputs) timed alone, without torch, beside a device copy; as
# norms_kernels.sh builds the norms kernels.
#   benchmarks/muladd_kernels.sh DIR [REV]    -> DIR/muladd_kernels (REV: kopgen at that git revision)
KERNELS=muladd exec "$(dirname "$0")/norms_kernels.sh" "$@"
