#!/bin/bash
# Builds benchmarks/norms_kernels.cu: the CUDA norms kernels of examples/norms.yaml (as norms_routes.py's
# torch_library route generates it) timed alone, without torch, beside a device copy. Needs kopgen's
# dependencies and nvcc (CUDA 12 or later), no GPU: the binary runs on any sm_90 machine.
#   benchmarks/norms_kernels.sh DIR [REV]    -> DIR/norms_kernels (REV: kopgen at that git revision)
#   DIR/norms_kernels [partial rows a multiprocessor]
set -euo pipefail
dir=$(realpath -m "$1"); rev=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
kopgen=$root
if [ -n "$rev" ]; then  # kopgen as it was at REV
  kopgen=$dir/kopgen_$rev
  [ -d "$kopgen" ] || { mkdir -p "$kopgen" && git -C "$root" archive "$rev" | tar -x -C "$kopgen"; }
fi
(cd "$root/benchmarks" && python3 -c "import norms_routes; print(norms_routes.spec('torch_library'))") > "$dir/norms.yaml"
rm -rf "$dir/repo"
(cd "$kopgen" && PYTHONPATH="$kopgen" python3 -m kopgen new "$dir/norms.yaml" -o "$dir/repo" --no-git > /dev/null)
cuda=$dir/repo/knorms_torch_library/csrc/cuda
nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I"$cuda" -o "$dir/norms_kernels" "$root/benchmarks/norms_kernels.cu" "$cuda/kernels.cu"
echo "$dir/norms_kernels"
