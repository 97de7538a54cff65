#!/bin/bash
# Builds benchmarks/norms_kernels.cu: the CUDA norms kernels of examples/norms.yaml (as norms_routes.py's
# torch_library route generates it) timed alone, without torch, beside a device copy. Needs kopgen's
# dependencies and nvcc (CUDA 12 or later), no GPU: the binary runs on any sm_90 machine.
#   benchmarks/norms_kernels.sh DIR [REV]    -> DIR/norms_kernels (REV: kopgen at that git revision)
#   DIR/norms_kernels [partial rows a multiprocessor]
# With KERNELS=rows (benchmarks/rows_kernels.sh), the row reductions of perf.py instead: DIR/rows_kernels;
# with KERNELS=gated (benchmarks/gated_kernels.sh), gated.py's forward kernels: DIR/gated_kernels; with
# KERNELS=muladd (benchmarks/muladd_kernels.sh), cuda_kernels.py's elementwise muladd: DIR/muladd_kernels.
set -euo pipefail
dir=$(realpath -m "$1"); rev=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
kopgen=$root
if [ -n "$rev" ]; then  # kopgen as it was at REV
  kopgen=$dir/kopgen_$rev
  [ -d "$kopgen" ] || { mkdir -p "$kopgen" && git -C "$root" archive "$rev" | tar -x -C "$kopgen"; }
fi
kind=${KERNELS:-norms}
case $kind in
  norms) spec="import norms_routes; print(norms_routes.spec('torch_library'))"; package=knorms_torch_library;;
  rows) spec="import perf; print(perf.rows_specs()['rows_torch_library'])"; package=krows_torch_library;;
  gated) spec="import gated; print(gated.spec('torch_library'))"; package=kgated_torch_library;;
  muladd) spec="import cuda_kernels; print(cuda_kernels.SPEC.format(package='kcuda'))"; package=kcuda;;
  *) echo "KERNELS: norms, rows, gated or muladd, not $kind" >&2; exit 2;;
esac
(cd "$root/benchmarks" && python3 -c "$spec") > "$dir/$kind.yaml"
rm -rf "$dir/repo"
(cd "$kopgen" && PYTHONPATH="$kopgen" python3 -m kopgen new "$dir/$kind.yaml" -o "$dir/repo" --no-git > /dev/null)
cuda=$dir/repo/$package/csrc/cuda
nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I"$cuda" -I"$root/benchmarks" -o "$dir/${kind}_kernels" \
  "$root/benchmarks/${kind}_kernels.cu" "$cuda/kernels.cu"
echo "$dir/${kind}_kernels"
