// silu_and_mul's CPU kernel (torch_library): out = silu(input[..., :d]) * input[..., d:], where
// d = input.size(-1) / 2. kopgen's host function has checked the devices, made `input` dense
// and checked that `out` is; it returns early when `out` is empty.
#include "kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>

namespace kllm {

void silu_and_mul_cpu(at::Tensor& out, const at::Tensor& input) {
  const int64_t d = input.size(-1) / 2;
  TORCH_CHECK(out.sizes().back() == d && out.numel() * 2 == input.numel(),
              "silu_and_mul: out must be input's shape with the last dimension halved");
  TORCH_CHECK(out.scalar_type() == input.scalar_type(), "silu_and_mul: out and input dtypes differ");
  if (out.numel() == 0) {
    return;
  }
  const int64_t rows = out.numel() / d;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "silu_and_mul_cpu", [&] {
    const scalar_t* x = input.const_data_ptr<scalar_t>();
    scalar_t* y = out.mutable_data_ptr<scalar_t>();
    // Geometry: at::parallel_for splits the rows among the threads (at least 16 rows of work
    // per task); each row is one contiguous pass over its d columns. Offsets are int64_t.
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const scalar_t* gate = x + row * 2 * d;
        const scalar_t* up = gate + d;
        scalar_t* dst = y + row * d;
        for (int64_t col = 0; col < d; ++col) {
          // Float math for the half types (and float32); double stays double.
          using acc_t = at::opmath_type<scalar_t>;
          const acc_t g = static_cast<acc_t>(gate[col]);
          dst[col] = static_cast<scalar_t>(g / (acc_t(1) + std::exp(-g)) * static_cast<acc_t>(up[col]));
        }
      }
    });
  });
}

}  // namespace kllm
