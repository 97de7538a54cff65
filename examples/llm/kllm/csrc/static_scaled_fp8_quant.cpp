// static_scaled_fp8_quant's CPU kernel (torch_library): result = float8_e4m3fn(input / scale),
// saturated to the format's finite range [-448, 448] (float8_e4m3fn has no infinity: an
// unsaturated overflow would be NaN). NaN stays NaN. `scale` is one float32 value, computed
// beforehand (static quantization). kopgen has checked the devices and contiguity.
#include "kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <c10/util/Float8_e4m3fn.h>

#include <cstdint>

namespace kllm {

void static_scaled_fp8_quant_cpu(
    at::Tensor& result,
    const at::Tensor& input,
    const at::Tensor& scale) {
  TORCH_CHECK(result.scalar_type() == at::kFloat8_e4m3fn, "static_scaled_fp8_quant: result must be float8_e4m3fn");
  TORCH_CHECK(result.sizes() == input.sizes(), "static_scaled_fp8_quant: result and input shapes differ");
  TORCH_CHECK(scale.numel() == 1 && scale.scalar_type() == at::kFloat,
              "static_scaled_fp8_quant: scale must be one float32 value");
  const float s = *scale.const_data_ptr<float>();
  const int64_t n = input.numel();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "static_scaled_fp8_quant_cpu", [&] {
    const scalar_t* x = input.const_data_ptr<scalar_t>();
    c10::Float8_e4m3fn* y = result.mutable_data_ptr<c10::Float8_e4m3fn>();
    // Geometry: at::parallel_for splits the n elements into contiguous ranges of at least 2048,
    // one per task. Offsets are int64_t.
    at::parallel_for(0, n, 2048, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        // Division, not multiplication by 1 / scale: the same rounding as input / scale in torch.
        float v = static_cast<float>(x[i]) / s;
        v = v < -448.0f ? -448.0f : (v > 448.0f ? 448.0f : v);  // comparisons keep NaN
        y[i] = static_cast<c10::Float8_e4m3fn>(v);
      }
    });
  });
}

}  // namespace kllm
