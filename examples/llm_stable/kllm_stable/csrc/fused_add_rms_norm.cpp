// fused_add_rms_norm's CPU kernel (stable_abi), in place, per row of the last dimension:
//   residual = input + residual          (rounded to the tensors' dtype, as stored)
//   input = residual / sqrt(mean(residual^2) + epsilon) * weight
// Only the stable ABI (torch::stable, torch/headeronly): one build serves torch 2.10 and later.
// kopgen has checked the devices and that input and residual are contiguous.
#include "kernels.h"

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Exception.h>
#include <torch/headeronly/util/Half.h>

#include <cmath>
#include <cstdint>

namespace kllm_stable {
namespace {

template <typename scalar_t>
void fused_add_rms_norm_rows(scalar_t* input, scalar_t* residual, const scalar_t* weight, float epsilon,
                             int64_t rows, int64_t hidden) {
  // Geometry: torch::stable::parallel_for splits the rows among the threads; each row is two
  // passes over its `hidden` columns (add and sum of squares, then the scaled write). int64_t offsets.
  torch::stable::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      scalar_t* x = input + row * hidden;
      scalar_t* r = residual + row * hidden;
      float squares = 0.0f;
      for (int64_t col = 0; col < hidden; ++col) {
        const scalar_t sum = static_cast<scalar_t>(static_cast<float>(x[col]) + static_cast<float>(r[col]));
        r[col] = sum;
        const float v = static_cast<float>(sum);  // the stored value, as the reference reads it
        squares += v * v;
      }
      const float inv_rms = 1.0f / std::sqrt(squares / static_cast<float>(hidden) + epsilon);
      for (int64_t col = 0; col < hidden; ++col) {
        x[col] = static_cast<scalar_t>(static_cast<float>(r[col]) * inv_rms * static_cast<float>(weight[col]));
      }
    }
  });
}

template <typename scalar_t>
void fused_add_rms_norm_typed(torch::stable::Tensor& input, torch::stable::Tensor& residual,
                              const torch::stable::Tensor& weight, double epsilon, int64_t rows,
                              int64_t hidden) {
  fused_add_rms_norm_rows(static_cast<scalar_t*>(input.mutable_data_ptr()),
                          static_cast<scalar_t*>(residual.mutable_data_ptr()),
                          static_cast<const scalar_t*>(weight.const_data_ptr()), static_cast<float>(epsilon),
                          rows, hidden);
}

}  // namespace

void fused_add_rms_norm_cpu(
    torch::stable::Tensor& input,
    torch::stable::Tensor& residual,
    const torch::stable::Tensor& weight,
    double epsilon) {
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
  switch (dtype) {
    case ScalarType::Float:
      return fused_add_rms_norm_typed<float>(input, residual, weight, epsilon, rows, hidden);
    case ScalarType::Half:
      return fused_add_rms_norm_typed<torch::headeronly::Half>(input, residual, weight, epsilon, rows, hidden);
    case ScalarType::BFloat16:
      return fused_add_rms_norm_typed<torch::headeronly::BFloat16>(input, residual, weight, epsilon, rows,
                                                                   hidden);
    default:
      STD_TORCH_CHECK(false, "fused_add_rms_norm: float32, float16 or bfloat16 expected");
  }
}

}  // namespace kllm_stable
