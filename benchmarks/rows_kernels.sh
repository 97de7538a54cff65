#!/bin/bash
# Builds benchmarks/rows_kernels.cu: the CUDA row reductions of benchmarks/perf.py (its torch_library rows
# package) timed alone, without torch, beside a device copy; as norms_kernels.sh builds the norms kernels.
#   benchmarks/rows_kernels.sh DIR [REV]    -> DIR/rows_kernels (REV: kopgen at that git revision)
KERNELS=rows exec "$(dirname "$0")/norms_kernels.sh" "$@"
