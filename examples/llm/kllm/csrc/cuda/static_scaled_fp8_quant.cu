// static_scaled_fp8_quant's CUDA kernel (torch_library): result = float8_e4m3fn(input / scale),
// saturated to the format's finite range [-448, 448] by the hardware conversion
// (__NV_SATFINITE); NaN stays NaN. `scale` is one float32 value on the device, read by every
// thread (no copy to the host). kopgen has checked the devices and contiguity, set the device
// guard and passes PyTorch's current stream.
#include "../kernels.h"

#include <ATen/Dispatch.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace kllm {
namespace {

template <typename scalar_t>
__global__ void static_scaled_fp8_quant_kernel(__nv_fp8_storage_t* __restrict__ result,
                                               const scalar_t* __restrict__ input,
                                               const float* __restrict__ scale, int64_t n) {
  // Geometry: a grid-stride loop, 256 threads per block and at most 65536 blocks; each thread
  // converts every (gridDim.x * 256)-th element from its own. int64_t offsets.
  const float s = *scale;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    // Division, not multiplication by 1 / scale: the same rounding as input / scale in torch.
    const float v = static_cast<float>(input[i]) / s;
    result[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  }
}

}  // namespace

void static_scaled_fp8_quant_cuda(
    at::Tensor& result,
    const at::Tensor& input,
    const at::Tensor& scale,
    cudaStream_t stream) {
  TORCH_CHECK(result.scalar_type() == at::kFloat8_e4m3fn, "static_scaled_fp8_quant: result must be float8_e4m3fn");
  TORCH_CHECK(result.sizes() == input.sizes(), "static_scaled_fp8_quant: result and input shapes differ");
  TORCH_CHECK(scale.numel() == 1 && scale.scalar_type() == at::kFloat,
              "static_scaled_fp8_quant: scale must be one float32 value");
  const int64_t n = input.numel();
  if (n == 0) {
    return;
  }
  const int threads = 256;
  const unsigned int blocks = static_cast<unsigned int>(std::min<int64_t>((n + threads - 1) / threads, 65536));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "static_scaled_fp8_quant_cuda", [&] {
    static_scaled_fp8_quant_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
        static_cast<__nv_fp8_storage_t*>(result.mutable_data_ptr()), input.const_data_ptr<scalar_t>(),
        scale.const_data_ptr<float>(), n);
  });
  const cudaError_t error = cudaGetLastError();
  TORCH_CHECK(error == cudaSuccess, "static_scaled_fp8_quant_cuda: ", cudaGetErrorString(error));
}

}  // namespace kllm
