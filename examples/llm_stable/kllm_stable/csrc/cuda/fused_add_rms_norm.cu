// fused_add_rms_norm's CUDA kernel (stable_abi), in place, per row of the last dimension:
//   residual = input + residual          (rounded to the tensors' dtype, as stored)
//   input = residual / sqrt(mean(residual^2) + epsilon) * weight
// Only the stable ABI (torch::stable, torch/headeronly): one build serves torch 2.10 and later.
// kopgen has checked the devices and contiguity, set the device guard and passes the stream.
#include "../kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>

namespace kllm_stable {
namespace {

constexpr int kThreads = 256;  // a multiple of the warp size

// CUDA's own 16-bit types, converted through float.
__device__ float to_float(float v) { return v; }
__device__ float to_float(__half v) { return __half2float(v); }
__device__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename scalar_t>
__device__ scalar_t from_float(float v);
template <>
__device__ float from_float<float>(float v) { return v; }
template <>
__device__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// The sum of `value` over the block's threads, returned to every thread.
__device__ float block_sum(float value) {
  __shared__ float warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  if (threadIdx.x % 32 == 0) {
    warp_sums[threadIdx.x / 32] = value;
  }
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kThreads / 32; ++i) {
    total += warp_sums[i];
  }
  return total;
}

template <typename scalar_t>
__global__ void fused_add_rms_norm_kernel(scalar_t* __restrict__ input, scalar_t* __restrict__ residual,
                                          const scalar_t* __restrict__ weight, float epsilon,
                                          int64_t hidden) {
  // Geometry: one block of kThreads threads per row (gridDim.x = rows); the threads stride over
  // the row's columns twice: add and sum of squares, then the scaled write. Each thread reads
  // back only the residual elements it wrote itself, so no barrier is needed between the passes
  // beyond block_sum's. int64_t offsets.
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  float squares = 0.0f;
  for (int64_t col = threadIdx.x; col < hidden; col += blockDim.x) {
    const scalar_t sum = from_float<scalar_t>(to_float(input[base + col]) + to_float(residual[base + col]));
    residual[base + col] = sum;
    const float v = to_float(sum);  // the stored value, as the reference reads it
    squares += v * v;
  }
  const float inv_rms = rsqrtf(block_sum(squares) / static_cast<float>(hidden) + epsilon);
  for (int64_t col = threadIdx.x; col < hidden; col += blockDim.x) {
    const float v = to_float(residual[base + col]);
    input[base + col] = from_float<scalar_t>(v * inv_rms * to_float(weight[col]));
  }
}

template <typename scalar_t>
void launch(torch::stable::Tensor& input, torch::stable::Tensor& residual, const torch::stable::Tensor& weight,
            double epsilon, int64_t rows, int64_t hidden, cudaStream_t stream) {
  fused_add_rms_norm_kernel<scalar_t><<<static_cast<unsigned int>(rows), kThreads, 0, stream>>>(
      static_cast<scalar_t*>(input.mutable_data_ptr()), static_cast<scalar_t*>(residual.mutable_data_ptr()),
      static_cast<const scalar_t*>(weight.const_data_ptr()), static_cast<float>(epsilon), hidden);
}

}  // namespace

void fused_add_rms_norm_cuda(
    torch::stable::Tensor& input,
    torch::stable::Tensor& residual,
    const torch::stable::Tensor& weight,
    double epsilon,
    cudaStream_t stream) {
  using torch::headeronly::ScalarType;
  const int64_t hidden = input.size(input.dim() - 1);
  STD_TORCH_CHECK(residual.numel() == input.numel() && residual.dim() == input.dim(),
                  "fused_add_rms_norm: input and residual shapes differ");
  STD_TORCH_CHECK(weight.dim() == 1 && weight.size(0) == hidden,
                  "fused_add_rms_norm: weight must be 1-D with input's last dimension");
  const ScalarType dtype = input.scalar_type();
  STD_TORCH_CHECK(residual.scalar_type() == dtype && weight.scalar_type() == dtype,
                  "fused_add_rms_norm: input, residual and weight must share one dtype");
  if (input.numel() == 0) {
    return;
  }
  const int64_t rows = input.numel() / hidden;
  STD_TORCH_CHECK(rows < (int64_t{1} << 31), "fused_add_rms_norm: more rows than a CUDA grid holds");
  switch (dtype) {
    case ScalarType::Float:
      launch<float>(input, residual, weight, epsilon, rows, hidden, stream);
      break;
    case ScalarType::Half:
      launch<__half>(input, residual, weight, epsilon, rows, hidden, stream);
      break;
    case ScalarType::BFloat16:
      launch<__nv_bfloat16>(input, residual, weight, epsilon, rows, hidden, stream);
      break;
    default:
      STD_TORCH_CHECK(false, "fused_add_rms_norm: float32, float16 or bfloat16 expected");
  }
  const cudaError_t error = cudaGetLastError();
  STD_TORCH_CHECK(error == cudaSuccess, "fused_add_rms_norm_cuda: ", cudaGetErrorString(error));
}

}  // namespace kllm_stable
