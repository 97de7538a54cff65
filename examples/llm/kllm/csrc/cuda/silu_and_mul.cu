// silu_and_mul's CUDA kernel (torch_library): out = silu(input[..., :d]) * input[..., d:], where
// d = input.size(-1) / 2. kopgen's host function has checked the devices and contiguity, set the
// device guard and returns early when `out` is empty; `stream` is PyTorch's current stream.
#include "../kernels.h"

#include <ATen/Dispatch.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace kllm {
namespace {

template <typename scalar_t>
__global__ void silu_and_mul_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input,
                                    int64_t d) {
  // Geometry: one block per row (gridDim.x = rows); the block's threads stride over the row's
  // d columns, so that neighbouring threads read neighbouring elements. Offsets are int64_t.
  const int64_t row = blockIdx.x;
  const scalar_t* gate = input + row * 2 * d;
  const scalar_t* up = gate + d;
  for (int64_t col = threadIdx.x; col < d; col += blockDim.x) {
    const float g = static_cast<float>(gate[col]);
    out[row * d + col] = static_cast<scalar_t>(g / (1.0f + __expf(-g)) * static_cast<float>(up[col]));
  }
}

}  // namespace

void silu_and_mul_cuda(at::Tensor& out, const at::Tensor& input, cudaStream_t stream) {
  const int64_t d = input.size(-1) / 2;
  TORCH_CHECK(out.sizes().back() == d && out.numel() * 2 == input.numel(),
              "silu_and_mul: out must be input's shape with the last dimension halved");
  TORCH_CHECK(out.scalar_type() == input.scalar_type(), "silu_and_mul: out and input dtypes differ");
  if (out.numel() == 0) {
    return;
  }
  const int64_t rows = out.numel() / d;
  TORCH_CHECK(rows < (int64_t{1} << 31), "silu_and_mul: more rows than a CUDA grid holds");
  const dim3 grid(static_cast<unsigned int>(rows));
  const dim3 block(static_cast<unsigned int>(std::min<int64_t>(1024, (d + 31) / 32 * 32)));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "silu_and_mul_cuda", [&] {
    silu_and_mul_kernel<scalar_t><<<grid, block, 0, stream>>>(
        out.mutable_data_ptr<scalar_t>(), input.const_data_ptr<scalar_t>(), d);
  });
  const cudaError_t error = cudaGetLastError();
  TORCH_CHECK(error == cudaSuccess, "silu_and_mul_cuda: ", cudaGetErrorString(error));
}

}  // namespace kllm
