// The CUDA elementwise kernels of benchmarks/cuda_kernels.py's package (muladd: a * b + c) alone, without torch
// or host code (benchmarks/muladd_kernels.sh builds it against a generated kernels.cu): x[4096, 4096] times a
// contiguous y (elementwise_kernel), a broadcast w[4096] (strided_kernel) and with x transposed, x.t() * y
// (tiled_kernel), float32 and bfloat16, each kernel's time (CUDA events, 50 launches) beside a device copy of x.
// GB/s counts each input read once and the output written once (a broadcast w once); "x contiguous" is the ratio
// to the contiguous case's GB/s, "x copy" to the copy's.
//   ./muladd_kernels
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "kernel_timing.h"
#include "kernels.h"

using namespace kcuda::cuda;

template <typename T>
__global__ void fill(T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = static_cast<T>(__sinf(0.37f * static_cast<float>(i % 100003)));
  }
}

int main() {
  const int64_t n = 4096;
  const size_t big = size_t{n} * n * 4;
  void *x, *y, *w, *out;
  cudaMalloc(&x, big);
  cudaMalloc(&y, big);
  cudaMalloc(&w, n * 4);
  cudaMalloc(&out, big);
  for (Dtype dtype : {Dtype::float32, Dtype::bfloat16}) {
    const int size = dtype == Dtype::float32 ? 4 : 2;
    const size_t bytes = size_t{n} * n * size;
    for (void* p : {x, y, w}) {
      const int64_t count = p == w ? n : n * n;
      if (dtype == Dtype::float32) {
        fill<<<1024, 256>>>(static_cast<float*>(p), count);
      } else {
        fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), count);
      }
    }
    const float copy = time_of([&] { cudaMemcpyAsync(out, x, bytes, cudaMemcpyDeviceToDevice, 0); });
    void* outputs[] = {out};
    const int64_t sizes[] = {n, n};  // the innermost first
    const void* dense_inputs[] = {x, y};
    const Launch contiguous{dtype, n * n, 1, dense_inputs, outputs, nullptr, true, 0, nullptr, nullptr,
                            nullptr, nullptr, 0, nullptr, 0};
    const int64_t along[] = {1, n}, across[] = {n, 1}, repeated[] = {1, 0};
    const int64_t* broadcast_strides[] = {along, repeated};
    const void* broadcast_inputs[] = {x, w};
    const Launch broadcast{dtype, n * n, 1, broadcast_inputs, outputs, nullptr, false, 2, sizes,
                           broadcast_strides, nullptr, nullptr, 0, nullptr, 0};
    const int64_t* transposed_strides[] = {across, along};
    const Launch transposed{dtype, n * n, 1, dense_inputs, outputs, nullptr, false, 2, sizes,
                            transposed_strides, nullptr, nullptr, 0, nullptr, 0};
    const float t_contiguous = time_of([&] { kernels::muladd(contiguous, 0.5); });
    const float t_broadcast = time_of([&] { kernels::muladd(broadcast, 0.5); });
    const float t_transposed = time_of([&] { kernels::muladd(transposed, 0.5); });
    const double gbs_copy = 2e-3 * bytes / copy, gbs_contiguous = 3e-3 * bytes / t_contiguous;
    const double gbs_broadcast = 2e-3 * bytes / t_broadcast, gbs_transposed = 3e-3 * bytes / t_transposed;
    printf("%s: copy %.0f GB/s | contiguous %.0f GB/s %.3f copy | broadcast %.0f GB/s %.3f contiguous %.3f copy | "
           "transposed %.0f GB/s %.3f contiguous %.3f copy\n",
           size == 4 ? "float32" : "bfloat16", gbs_copy, gbs_contiguous, gbs_contiguous / gbs_copy, gbs_broadcast,
           gbs_broadcast / gbs_contiguous, gbs_broadcast / gbs_copy, gbs_transposed, gbs_transposed / gbs_contiguous,
           gbs_transposed / gbs_copy);
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) {
      printf("  CUDA error: %s\n", cudaGetErrorString(error));
      return 1;
    }
  }
  return 0;
}
