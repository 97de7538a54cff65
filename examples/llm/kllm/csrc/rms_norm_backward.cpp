// rms_norm_backward's CPU kernel (torch_library), the gradients of rms_norm:
//   r = 1 / sqrt(mean(x^2) + epsilon), xhat = x * r (per row of the last dimension)
//   grad_input = r * (grad * weight - xhat * mean(grad * weight * xhat))
//   grad_weight = sum over rows of grad * xhat
// kopgen allocates grad_input (input's shape) and grad_weight (weight's shape) as `fake` says.
#include "kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace kllm {

void rms_norm_backward_cpu(
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight,
    double epsilon,
    at::Tensor& grad_input,
    at::Tensor& grad_weight) {
  const int64_t hidden = input.size(-1);
  TORCH_CHECK(grad.sizes() == input.sizes(), "rms_norm_backward: grad and input shapes differ");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == hidden,
              "rms_norm_backward: weight must be 1-D with input's last dimension");
  if (hidden == 0) {
    return;
  }
  const int64_t rows = input.numel() / hidden;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "rms_norm_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* g = grad.const_data_ptr<scalar_t>();
    const scalar_t* x = input.const_data_ptr<scalar_t>();
    const scalar_t* w = weight.const_data_ptr<scalar_t>();
    scalar_t* gx = grad_input.mutable_data_ptr<scalar_t>();
    std::vector<acc_t> inv_rms(rows);
    // Geometry, pass 1: at::parallel_for over the rows; each row's r, then its grad_input.
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t base = row * hidden;
        acc_t squares = 0;
        acc_t dot = 0;  // sum of grad * weight * x
        for (int64_t col = 0; col < hidden; ++col) {
          const acc_t v = static_cast<acc_t>(x[base + col]);
          squares += v * v;
          dot += static_cast<acc_t>(g[base + col]) * static_cast<acc_t>(w[col]) * v;
        }
        const acc_t n = static_cast<acc_t>(hidden);
        const acc_t r = acc_t(1) / std::sqrt(squares / n + static_cast<acc_t>(epsilon));
        inv_rms[row] = r;
        // mean(grad * weight * xhat) = r * dot / n
        const acc_t mean_gwx = r * dot / n;
        for (int64_t col = 0; col < hidden; ++col) {
          const acc_t gw = static_cast<acc_t>(g[base + col]) * static_cast<acc_t>(w[col]);
          const acc_t xhat = static_cast<acc_t>(x[base + col]) * r;
          gx[base + col] = static_cast<scalar_t>(r * (gw - xhat * mean_gwx));
        }
      }
    });
    // Pass 2: at::parallel_for over the columns; each sums its column over every row, in
    // acc_t and in row order (deterministic).
    scalar_t* gw = grad_weight.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, hidden, 64, [&](int64_t begin, int64_t end) {
      for (int64_t col = begin; col < end; ++col) {
        acc_t total = 0;
        for (int64_t row = 0; row < rows; ++row) {
          const int64_t at = row * hidden + col;
          total += static_cast<acc_t>(g[at]) * static_cast<acc_t>(x[at]) * inv_rms[row];
        }
        gw[col] = static_cast<scalar_t>(total);
      }
    });
  });
}

}  // namespace kllm
