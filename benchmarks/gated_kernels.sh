#!/bin/bash
# Builds benchmarks/gated_kernels.cu: the CUDA forward kernels of benchmarks/gated.py (its torch_library package)
# timed alone, without torch, beside a device copy; as norms_kernels.sh builds the norms kernels.
#   benchmarks/gated_kernels.sh DIR [REV]    -> DIR/gated_kernels (REV: kopgen at that git revision)
KERNELS=gated exec "$(dirname "$0")/norms_kernels.sh" "$@"
