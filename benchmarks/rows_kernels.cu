// The CUDA row reductions of benchmarks/perf.py (rowsum, rowmax) alone, without torch or host code
// (benchmarks/rows_kernels.sh builds it against a generated kernels.cu): perf.py's shapes and three more, float32 and
// bfloat16, each kernel's time (CUDA events, 50 launches) beside a device copy of the input; "% of copy"
// counts the bytes the kernel must move (the input read once) against the copy's (read and written).
//   ./rows_kernels
#include <cuda_runtime.h>

#include <cstdio>

#include "kernel_timing.h"
#include "kernels.h"

using namespace krows_torch_library::cuda;

int main() {
  // perf.py's shapes, then rows of 2 and 8 KiB in float32 (4 and 16 KiB in bfloat16) and 1024 columns
  // with twice perf.py's rows.
  const int64_t shapes[6][2] = {{4096, 4096}, {16384, 1024}, {1024, 65536}, {16384, 512}, {8192, 2048},
                                {32768, 1024}};
  const size_t big = size_t{1} << 28;  // bytes: the largest input in float32, 2^26 elements
  void *x, *copy_out, *out;
  cudaMalloc(&x, big);
  cudaMalloc(&copy_out, big);
  cudaMalloc(&out, 65536 * 4);
  cudaMemset(x, 0, big);
  for (Dtype dtype : {Dtype::float32, Dtype::bfloat16}) {
    const int size = dtype == Dtype::float32 ? 4 : 2;
    for (const auto& shape : shapes) {
      const int64_t rows = shape[0], cols = shape[1];
      const size_t bytes = rows * cols * size;
      const float copy = time_of([&] { cudaMemcpyAsync(copy_out, x, bytes, cudaMemcpyDeviceToDevice, 0); });
      const void* inputs[] = {x};
      void* outputs[] = {out};
      const Launch launch{dtype, rows, cols, inputs, outputs, nullptr, true, 0, nullptr, nullptr,
                          nullptr, nullptr, 0, nullptr, 0};
      const float sum = time_of([&] { kernels::rowsum(launch); });
      const float max = time_of([&] { kernels::rowmax(launch); });
      // The copy moves 2 * bytes; a reduction reads bytes.
      printf("%s %ldx%ld: copy %.1f us | rowsum %.1f us %.0f%% | rowmax %.1f us %.0f%%\n",
             size == 4 ? "float32" : "bfloat16", rows, cols, copy, sum, 100 * copy / 2 / sum, max,
             100 * copy / 2 / max);
      const cudaError_t error = cudaGetLastError();
      if (error != cudaSuccess) {
        printf("  CUDA error: %s\n", cudaGetErrorString(error));
        return 1;
      }
    }
  }
  return 0;
}
