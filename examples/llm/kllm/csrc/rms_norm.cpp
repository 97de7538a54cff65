// rms_norm's CPU kernel (torch_library): out = input / sqrt(mean(input^2, -1) + epsilon) * weight,
// over the last dimension. `out` is allocated by kopgen as `fake` says (input's shape and dtype);
// kopgen has checked the devices and made the inputs dense.
#include "kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>

namespace kllm {

void rms_norm_cpu(
    const at::Tensor& input,
    const at::Tensor& weight,
    double epsilon,
    at::Tensor& out) {
  const int64_t hidden = input.size(-1);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == hidden,
              "rms_norm: weight must be 1-D with input's last dimension");
  TORCH_CHECK(weight.scalar_type() == input.scalar_type(), "rms_norm: weight and input dtypes differ");
  if (input.numel() == 0) {
    return;
  }
  const int64_t rows = input.numel() / hidden;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "rms_norm_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;  // float for the half types
    const scalar_t* x = input.const_data_ptr<scalar_t>();
    const scalar_t* w = weight.const_data_ptr<scalar_t>();
    scalar_t* y = out.mutable_data_ptr<scalar_t>();
    // Geometry: at::parallel_for splits the rows among the threads; each row is two passes over
    // its `hidden` columns (the sum of squares, then the scaled write). Offsets are int64_t.
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const scalar_t* src = x + row * hidden;
        acc_t squares = 0;
        for (int64_t col = 0; col < hidden; ++col) {
          const acc_t v = static_cast<acc_t>(src[col]);
          squares += v * v;
        }
        const acc_t inv_rms =
            acc_t(1) / std::sqrt(squares / static_cast<acc_t>(hidden) + static_cast<acc_t>(epsilon));
        for (int64_t col = 0; col < hidden; ++col) {
          y[row * hidden + col] =
              static_cast<scalar_t>(static_cast<acc_t>(src[col]) * inv_rms * static_cast<acc_t>(w[col]));
        }
      }
    });
  });
}

}  // namespace kllm
