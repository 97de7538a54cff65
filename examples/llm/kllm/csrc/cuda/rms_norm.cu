// rms_norm's CUDA kernel (torch_library): out = input / sqrt(mean(input^2, -1) + epsilon) * weight.
// `out` is allocated by kopgen as `fake` says; kopgen has checked the devices, made the inputs
// dense, set the device guard and passes PyTorch's current stream.
#include "../kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kllm {
namespace {

constexpr int kRmsNormThreads = 256;  // a multiple of the warp size

// The sum of `value` over the block's threads, returned to every thread.
template <typename acc_t>
__device__ acc_t rms_norm_block_sum(acc_t value) {
  __shared__ acc_t warp_sums[kRmsNormThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    warp_sums[warp] = value;
  }
  __syncthreads();
  acc_t total = 0;
  for (int i = 0; i < kRmsNormThreads / 32; ++i) {
    total += warp_sums[i];
  }
  return total;
}

template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
__global__ void rms_norm_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input,
                                const scalar_t* __restrict__ weight, acc_t epsilon, int64_t hidden) {
  // Geometry: one block of kRmsNormThreads threads per row (gridDim.x = rows); the threads stride over
  // the row's `hidden` columns twice: the sum of squares, then the scaled write. int64_t offsets.
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  acc_t squares = 0;
  for (int64_t col = threadIdx.x; col < hidden; col += blockDim.x) {
    const acc_t v = static_cast<acc_t>(input[base + col]);
    squares += v * v;
  }
  // In float (double for double inputs: gradcheck perturbs them by 1e-6).
  const acc_t mean_square = rms_norm_block_sum(squares) / static_cast<acc_t>(hidden);
  const acc_t inv_rms = acc_t(1) / sqrt(mean_square + epsilon);
  for (int64_t col = threadIdx.x; col < hidden; col += blockDim.x) {
    const acc_t v = static_cast<acc_t>(input[base + col]);
    out[base + col] = static_cast<scalar_t>(v * inv_rms * static_cast<acc_t>(weight[col]));
  }
}

}  // namespace

void rms_norm_cuda(
    const at::Tensor& input,
    const at::Tensor& weight,
    double epsilon,
    at::Tensor& out,
    cudaStream_t stream) {
  const int64_t hidden = input.size(-1);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == hidden,
              "rms_norm: weight must be 1-D with input's last dimension");
  TORCH_CHECK(weight.scalar_type() == input.scalar_type(), "rms_norm: weight and input dtypes differ");
  if (input.numel() == 0) {
    return;
  }
  const int64_t rows = input.numel() / hidden;
  TORCH_CHECK(rows < (int64_t{1} << 31), "rms_norm: more rows than a CUDA grid holds");
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "rms_norm_cuda", [&] {
    rms_norm_kernel<scalar_t><<<static_cast<unsigned int>(rows), kRmsNormThreads, 0, stream>>>(
        out.mutable_data_ptr<scalar_t>(), input.const_data_ptr<scalar_t>(),
        weight.const_data_ptr<scalar_t>(), static_cast<at::opmath_type<scalar_t>>(epsilon), hidden);
  });
  const cudaError_t error = cudaGetLastError();
  TORCH_CHECK(error == cudaSuccess, "rms_norm_cuda: ", cudaGetErrorString(error));
}

}  // namespace kllm
