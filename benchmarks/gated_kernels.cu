// The CUDA forward kernels of benchmarks/gated.py's torch_library ops (silu_and_mul, gelu_tanh_and_mul) alone,
// without torch or host code (benchmarks/gated_kernels.sh builds it against a generated kernels.cu): x of 4096
// rows x 2 * hidden, read as its halves in place (gate = x[..., :hidden], up = x[..., hidden:], as the op's host
// passes them), float32 and bfloat16, values in [-4, 4], each kernel's time (CUDA events, 50 launches) beside a device copy of x;
// "% of copy" counts the bytes the kernel must move (x read once, the output written: 1.5 x's bytes) against
// the copy's (x read and written).
//   ./gated_kernels
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "kernel_timing.h"
#include "kernels.h"

using namespace kgated_torch_library::cuda;

// x filled with values spread over [-4, 4] (no zeros: a division whose numerator is 0 takes the slow path
// of the IEEE division, and the ops' inputs are rarely all zero).
template <typename T>
__global__ void fill(T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = static_cast<T>(4.0f * __sinf(0.37f * static_cast<float>(i % 100003)) + 0.001f);
  }
}

int main() {
  const int64_t rows = 4096;
  const size_t big = size_t{4096} * 2 * 16384 * 4;  // bytes: the largest x, float32 at hidden 16384
  void *x, *copy_out, *out;
  cudaMalloc(&x, big);
  cudaMalloc(&copy_out, big);
  cudaMalloc(&out, big / 2);
  for (Dtype dtype : {Dtype::float32, Dtype::bfloat16}) {
    const int size = dtype == Dtype::float32 ? 4 : 2;
    for (const int64_t hidden : {1024, 4096, 8192, 16384}) {
      const size_t bytes = rows * 2 * hidden * size;
      if (dtype == Dtype::float32) {
        fill<<<1024, 256>>>(static_cast<float*>(x), rows * 2 * hidden);
      } else {
        fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(x), rows * 2 * hidden);
      }
      const float copy = time_of([&] { cudaMemcpyAsync(copy_out, x, bytes, cudaMemcpyDeviceToDevice, 0); });
      // The halves as the host lays them out: 2 dimensions, the innermost first; a row of x apart.
      const void* inputs[] = {x, static_cast<const char*>(x) + hidden * size};
      void* outputs[] = {out};
      const int64_t sizes[] = {hidden, rows};
      const int64_t half_strides[] = {1, 2 * hidden};
      const int64_t* strides[] = {half_strides, half_strides};
      const Launch launch{dtype, rows * hidden, 1, inputs, outputs, nullptr, false, 2, sizes, strides,
                          nullptr, nullptr, 0, nullptr, 0};
      const float silu = time_of([&] { kernels::silu_and_mul(launch); });
      const float gelu = time_of([&] { kernels::gelu_tanh_and_mul(launch); });
      // The copy moves 2 * bytes; each op 1.5 * bytes.
      printf("%s hidden %ld: copy %.1f us | silu_and_mul %.1f us %.0f%% | gelu_tanh_and_mul %.1f us %.0f%%\n",
             size == 4 ? "float32" : "bfloat16", hidden, copy, silu, 100 * copy * 0.75 / silu, gelu,
             100 * copy * 0.75 / gelu);
      const cudaError_t error = cudaGetLastError();
      if (error != cudaSuccess) {
        printf("  CUDA error: %s\n", cudaGetErrorString(error));
        return 1;
      }
    }
  }
  return 0;
}
