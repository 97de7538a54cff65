#!/bin/bash
# Builds benchmarks/rows_kernels.cu: the CUDA row reductions of benchmarks/perf.py (its torch_library rows
# package) timed alone, without torch, beside a device copy. Needs kopgen's dependencies and nvcc (CUDA 12 or
# later), no GPU: the binary runs on any sm_90 machine.
#   benchmarks/rows_kernels.sh DIR [REV]    -> DIR/rows_kernels (REV: kopgen at that git revision)
set -euo pipefail
dir=$(realpath -m "$1"); rev=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
kopgen=$root
if [ -n "$rev" ]; then  # kopgen as it was at REV
  kopgen=$dir/kopgen_$rev
  [ -d "$kopgen" ] || { mkdir -p "$kopgen" && git -C "$root" archive "$rev" | tar -x -C "$kopgen"; }
fi
(cd "$root/benchmarks" && python3 -c "import perf; print(perf.rows_specs()['rows_torch_library'])") > "$dir/rows.yaml"
rm -rf "$dir/repo"
(cd "$kopgen" && PYTHONPATH="$kopgen" python3 -m kopgen new "$dir/rows.yaml" -o "$dir/repo" --no-git > /dev/null)
cuda=$dir/repo/krows_torch_library/csrc/cuda
nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I"$cuda" -o "$dir/rows_kernels" "$root/benchmarks/rows_kernels.cu" "$cuda/kernels.cu"
echo "$dir/rows_kernels"
