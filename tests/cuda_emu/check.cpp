// Runs the kernels of test_cuda_emulated.py's package (kernels.cu, its launches emulated by emu.h)
// on odd shapes and layouts, and compares each output element with the same computed here in
// double. Prints a line per wrong case, the launches of each kernel, then `N failures`.
#include "kernels.cu"

#include <cmath>
#include <cstdio>
#include <random>
#include <utility>

using namespace kemu::cuda;

namespace {

int failures = 0;
std::mt19937 random_bits(1);

template <typename T>
std::vector<T> random_values(int64_t n) {
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<T> values(n);
  for (T& value : values) {
    value = from_compute<T>(static_cast<compute_t<T>>(uniform(random_bits)));
  }
  return values;
}

template <typename T>
double as_double(T x) {
  return static_cast<double>(to_compute(x));
}

template <typename T>
struct Type;
template <>
struct Type<float> {
  static constexpr Dtype dtype = Dtype::float32;
  static constexpr double tolerance = 1e-5;
};
template <>
struct Type<double> {
  static constexpr Dtype dtype = Dtype::float64;
  static constexpr double tolerance = 1e-12;
};
template <>
struct Type<__nv_bfloat16> {
  static constexpr Dtype dtype = Dtype::bfloat16;
  static constexpr double tolerance = 1e-2;
};

const double kSentinel = 123;  // written after each output: a kernel must leave it

void fail(const char* what, int64_t a, int64_t b, int offset, int64_t at, double got, double want) {
  ++failures;
  std::printf("wrong: %s %ldx%ld offset %d: element %ld is %g, not %g\n", what,
              static_cast<long>(a), static_cast<long>(b), offset, static_cast<long>(at), got, want);
}

// op 0: rowsum, 1: rowmax, 2: rowdot(a, w) (the mean of a * w, or of a where w is absent), over
// rows x cols elements `offset` elements past an aligned start. rowmax's rows 1, 4, 7, ... hold a
// NaN, at a column that moves from row to row: their max is NaN, as torch.amax's.
template <typename T>
void rows_case(int op, int64_t rows, int64_t cols, int offset, bool with_w) {
  std::vector<T> a = random_values<T>(rows * cols + offset);
  for (int64_t r = 1; op == 1 && cols > 0 && r < rows; r += 3) {
    a[offset + r * cols + r * 7 % cols] = from_compute<T>(static_cast<compute_t<T>>(NAN));
  }
  const std::vector<T> w = random_values<T>(rows * cols + offset);
  std::vector<T> out(rows + 1, from_compute<T>(kSentinel));
  const void* inputs[2] = {a.data() + offset, with_w ? w.data() + offset : nullptr};
  void* outputs[1] = {out.data()};
  const Launch launch{Type<T>::dtype, rows, cols, inputs, outputs,
                      nullptr, true, 1, nullptr, nullptr};
  const char* what = "rowdot(a, null)";
  if (op == 0) {
    kernels::rowsum(launch);
    what = "rowsum";
  } else if (op == 1) {
    kernels::rowmax(launch);
    what = "rowmax";
  } else {
    kernels::rowdot(launch, with_w);
    what = with_w ? "rowdot" : what;
  }
  for (int64_t r = 0; r <= rows; ++r) {
    double want = r == rows ? kSentinel : op == 1 ? -INFINITY : 0;
    for (int64_t c = 0; c < cols && r < rows; ++c) {
      const int64_t i = offset + r * cols + c;
      const double value = as_double(a[i]) * (op == 2 && with_w ? as_double(w[i]) : 1.0);
      want = op != 1 ? want + value : std::isnan(value) ? value : std::max(want, value);
    }
    if (op == 2 && r < rows) {
      want /= static_cast<double>(cols);
    }
    const double got = as_double(out[r]);
    const double error = Type<T>::tolerance * (1 + std::sqrt(static_cast<double>(cols)));
    if (!(got == want || (std::isnan(got) && std::isnan(want)) || std::abs(got - want) <= error)) {
      return fail(what, rows, cols, offset, r, got, want);
    }
  }
}

// a * b + 0.5 over `sizes` (the innermost first), a and b read through their strides, each
// `offset` elements past an aligned start; the output dense.
template <typename T>
void muladd_case(const char* what, std::vector<int64_t> sizes, std::vector<int64_t> a_strides,
                 std::vector<int64_t> b_strides, int offset) {
  int64_t n = 1;
  int64_t a_span = 1;
  int64_t b_span = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    n *= sizes[d];
    a_span += (sizes[d] - 1) * a_strides[d];
    b_span += (sizes[d] - 1) * b_strides[d];
  }
  const std::vector<T> a = random_values<T>(a_span + offset);
  const std::vector<T> b = random_values<T>(b_span + offset);
  std::vector<T> out(n + 1, from_compute<T>(kSentinel));
  const void* inputs[2] = {a.data() + offset, b.data() + offset};
  void* outputs[1] = {out.data()};
  const int64_t* strides[2] = {a_strides.data(), b_strides.data()};
  const Launch launch{Type<T>::dtype, n, 1, inputs, outputs, nullptr, false,
                      static_cast<int>(sizes.size()), sizes.data(), strides};
  kernels::muladd(launch, 0.5);
  for (int64_t i = 0; i <= n; ++i) {
    int64_t rest = i;
    int64_t at_a = offset;
    int64_t at_b = offset;
    for (size_t d = 0; d < sizes.size(); ++d) {
      at_a += rest % sizes[d] * a_strides[d];
      at_b += rest % sizes[d] * b_strides[d];
      rest /= sizes[d];
    }
    const auto value = to_compute(a[at_a]) * to_compute(b[at_b]) + compute_t<T>(0.5);
    const double want = i == n ? kSentinel : as_double(from_compute<T>(value));
    if (std::abs(as_double(out[i]) - want) > Type<T>::tolerance) {
      return fail(what, sizes[0], n / sizes[0], offset, i, as_double(out[i]), want);
    }
  }
}

// Row normalisations: op 0: layer_norm(x, w, b) (b absent where !with_b), 1: softmax(x), over rows x cols elements `offset` elements past an aligned start; w (and b) one
// row read by every row (row stride 0) or a row each (`per_row`).
template <typename T>
void norms_case(int op, int64_t rows, int64_t cols, int offset, bool per_row, bool with_b) {
  const int64_t w_rows = per_row ? rows : 1;
  const std::vector<T> x = random_values<T>(rows * cols + offset);
  const std::vector<T> w = random_values<T>(w_rows * cols + offset);
  const std::vector<T> b = random_values<T>(cols + offset);
  std::vector<T> out(rows * cols + 1, from_compute<T>(kSentinel));
  const void* inputs[3] = {x.data() + offset, w.data() + offset, with_b ? b.data() + offset : nullptr};
  void* outputs[1] = {out.data()};
  const int64_t row_strides[3] = {cols, per_row ? cols : 0, 0};
  const int64_t output_offsets[1] = {0};
  const Launch launch{Type<T>::dtype, rows, cols, inputs, outputs, nullptr, true, 1, nullptr,
                      nullptr, row_strides, output_offsets, cols};
  const char* what = op == 1 ? "softmax" : with_b ? "layer_norm" : "layer_norm(b=None)";
  if (op == 0) {
    kernels::layer_norm(launch, 1e-5, with_b);
  } else {
    kernels::softmax(launch);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const auto at = [&](const std::vector<T>& v, int64_t stride, int64_t c) {
      return as_double(v[offset + r * stride + c]);
    };
    double mean = 0, top = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) {
      mean += at(x, cols, c) / cols;
      top = std::max(top, at(x, cols, c));
    }
    double variance = 0, sum_exp = 0;
    for (int64_t c = 0; c < cols; ++c) {
      variance += (at(x, cols, c) - mean) * (at(x, cols, c) - mean) / cols;
      sum_exp += std::exp(at(x, cols, c) - top);
    }
    for (int64_t c = 0; c < cols; ++c) {
      const double weight = at(w, per_row ? cols : 0, c);
      double want = std::exp(at(x, cols, c) - top) / sum_exp;
      if (op == 0) {
        want = (at(x, cols, c) - mean) / std::sqrt(variance + 1e-5) * weight +
               (with_b ? at(b, 0, c) : 0.0);
      }
      const double got = as_double(out[r * cols + c]);
      if (!(std::abs(got - want) <= 4 * Type<T>::tolerance * (1 + std::abs(want)))) {
        return fail(what, rows, cols, offset, r * cols + c, got, want);
      }
    }
  }
  if (as_double(out[rows * cols]) != kSentinel) {
    fail(what, rows, cols, offset, rows * cols, as_double(out[rows * cols]), kSentinel);
  }
}

// Every lane of a row normalises with the same statistics, bit for bit (a merge of lanes' partial results
// that depended on which lane of a shuffle computes it would break this): a row whose second half mirrors
// its first, with w all ones, gives the same output at mirrored columns, which other lanes (and warps)
// compute.
template <typename T>
void layer_norm_lanes_agree(int64_t rows, int64_t cols) {
  std::vector<T> x = random_values<T>(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols / 2; ++c) {
      x[r * cols + cols - 1 - c] = x[r * cols + c];
    }
  }
  const std::vector<T> w(cols, from_compute<T>(compute_t<T>(1)));
  std::vector<T> out(rows * cols);
  const void* inputs[3] = {x.data(), w.data(), nullptr};
  void* outputs[1] = {out.data()};
  const int64_t row_strides[3] = {cols, 0, 0};
  const int64_t output_offsets[1] = {0};
  const Launch launch{Type<T>::dtype, rows, cols, inputs, outputs, nullptr, true, 1, nullptr,
                      nullptr, row_strides, output_offsets, cols};
  kernels::layer_norm(launch, 1e-5, false);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols / 2; ++c) {
      const double got = as_double(out[r * cols + cols - 1 - c]);
      const double want = as_double(out[r * cols + c]);
      if (got != want) {
        return fail("layer_norm, mirrored row", rows, cols, 0, r * cols + cols - 1 - c, got, want);
      }
    }
  }
}

// rms_norm's backward kernel: the gradient of x (rows x cols, `offset` elements past an aligned
// start) and of w and b (each one row read by all rows), summed over the rows by the kernel into
// `partial_rows` partial rows at most (blocks), or, where partial_rows is 0, written at every element.
template <typename T>
void rms_norm_backward_case(int64_t rows, int64_t cols, int offset, int64_t partial_rows) {
  const double eps = 1e-6;
  const bool summed = partial_rows > 0;
  const std::vector<T> grad = random_values<T>(rows * cols + offset);
  const std::vector<T> x = random_values<T>(rows * cols + offset);
  const std::vector<T> w = random_values<T>(cols + offset);
  const std::vector<T> b = random_values<T>(cols + offset);
  std::vector<T> out(rows * cols + 1, from_compute<T>(kSentinel));
  const int64_t size = summed ? cols : rows * cols;  // of each of w's and b's gradients
  std::vector<T> w_grad(size + 1, from_compute<T>(kSentinel));
  std::vector<T> b_grad(size + 1, from_compute<T>(kSentinel));
  // Garbage first: the kernel must write (or zero) every partial value it reads.
  std::vector<compute_t<T>> partials(std::max<int64_t>(partial_rows, 1) * 2 * cols, compute_t<T>(kSentinel));
  const void* inputs[4] = {grad.data() + offset, x.data() + offset, w.data() + offset, b.data() + offset};
  void* outputs[3] = {out.data(), w_grad.data(), b_grad.data()};
  const int64_t row_strides[4] = {cols, cols, 0, 0};
  const int64_t output_offsets[3] = {0, 0, 0};
  const Launch launch{Type<T>::dtype, rows, cols, inputs, outputs, nullptr, true, 1, nullptr,
                      nullptr, row_strides, output_offsets, cols,
                      summed ? partials.data() : nullptr, partial_rows};
  kernels::rms_norm_backward(launch, eps);
  const char* what = summed ? "rms_norm_backward" : "rms_norm_backward(w, b at every element)";
  const auto close = [](double got, double want, double scale) {
    return std::abs(got - want) <= 4 * Type<T>::tolerance * (1 + std::abs(want)) * scale;
  };
  std::vector<double> w_want(cols, 0.0), b_want(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const auto at = [&](const std::vector<T>& v, int64_t c) { return as_double(v[offset + r * cols + c]); };
    double mean_square = 0, mean_gwx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      mean_square += at(x, c) * at(x, c) / cols;
      mean_gwx += at(grad, c) * as_double(w[offset + c]) * at(x, c) / cols;
    }
    const double rstd = 1 / std::sqrt(mean_square + eps);
    for (int64_t c = 0; c < cols; ++c) {
      const double weight = as_double(w[offset + c]);
      const double want = rstd * (at(grad, c) * weight - at(x, c) * mean_gwx / (mean_square + eps));
      const int64_t i = r * cols + c;
      if (!close(as_double(out[i]), want, 1)) {
        return fail(what, rows, cols, offset, i, as_double(out[i]), want);
      }
      w_want[c] += at(grad, c) * at(x, c) * rstd;
      b_want[c] += at(grad, c);
      if (!summed && !close(as_double(w_grad[i]), at(grad, c) * at(x, c) * rstd, 1)) {
        return fail(what, rows, cols, offset, i, as_double(w_grad[i]), at(grad, c) * at(x, c) * rstd);
      }
      if (!summed && !close(as_double(b_grad[i]), at(grad, c), 1)) {
        return fail(what, rows, cols, offset, i, as_double(b_grad[i]), at(grad, c));
      }
    }
  }
  const double scale = 1 + std::sqrt(static_cast<double>(rows));  // a sum of `rows` rounded terms
  for (int64_t c = 0; c < cols && summed; ++c) {
    if (!close(as_double(w_grad[c]), w_want[c], scale)) {
      return fail("rms_norm_backward: w's gradient", rows, cols, offset, c, as_double(w_grad[c]), w_want[c]);
    }
    if (!close(as_double(b_grad[c]), b_want[c], scale)) {
      return fail("rms_norm_backward: b's gradient", rows, cols, offset, c, as_double(b_grad[c]), b_want[c]);
    }
  }
  if (as_double(out[rows * cols]) != kSentinel || as_double(w_grad[size]) != kSentinel ||
      as_double(b_grad[size]) != kSentinel) {
    fail(what, rows, cols, offset, size, as_double(w_grad[size]), kSentinel);
  }
}

// fatrelu_and_mul's backward kernel: x of rows x 2 cols (its halves gate and up read in place,
// rows 2 cols apart), grad of rows x cols (or one row read by all: `grad_row`), `offset`
// elements past an aligned start; the output as wide as x, both halves written by one launch.
template <typename T>
void split_gradient_case(int64_t rows, int64_t cols, int offset, bool grad_row) {
  const double threshold = 0.1;
  const std::vector<T> x = random_values<T>(rows * 2 * cols + offset);
  const std::vector<T> grad = random_values<T>((grad_row ? 1 : rows) * cols + offset);
  std::vector<T> out(rows * 2 * cols + offset + 1, from_compute<T>(kSentinel));
  const void* inputs[3] = {grad.data() + offset, x.data() + offset, x.data() + offset + cols};
  void* outputs[2] = {out.data() + offset, out.data() + offset};
  const int64_t row_strides[3] = {grad_row ? 0 : cols, 2 * cols, 2 * cols};
  const int64_t output_offsets[2] = {0, cols};
  const Launch launch{Type<T>::dtype, rows, cols, inputs, outputs, nullptr, true, 1, nullptr,
                      nullptr, row_strides, output_offsets, 2 * cols};
  kernels::fatrelu_and_mul_backward(launch, threshold);
  const char* what = grad_row ? "fatrelu_and_mul_backward(grad[1, d])" : "fatrelu_and_mul_backward";
  for (int64_t i = 0; i <= rows * 2 * cols + offset; ++i) {
    const int64_t r = (i - offset) / (2 * cols + (cols == 0));
    const int64_t c = (i - offset) % (2 * cols + (cols == 0));
    double want = kSentinel;  // before the output's start, and after its end
    if (i >= offset && i < rows * 2 * cols + offset) {
      const double gate = as_double(x[offset + r * 2 * cols + c % cols]);
      const double up = as_double(x[offset + r * 2 * cols + cols + c % cols]);
      const double g = as_double(grad[offset + (grad_row ? 0 : r * cols) + c % cols]);
      want = gate > threshold ? g * (c < cols ? up : gate) : 0.0;
    }
    const double got = as_double(out[i]);
    if (!(std::abs(got - want) <= 2 * Type<T>::tolerance * (1 + std::abs(want)))) {
      return fail(what, rows, cols, offset, i, got, want);
    }
  }
}

template <typename T>
void check_all() {
  // Short rows (a warp each) and long ones (a block each: over 8 KiB), whole vectors or not; float32
  // lanes of more than 4 vectors read 8 at a time (1024, 1000 and 2000 columns, 200 unaligned).
  const std::pair<int64_t, int64_t> row_shapes[] = {
      {5, 7}, {9, 64}, {17, 1024}, {3, 4096}, {3, 5000}, {2, 8192}, {2, 8200}, {2, 4099},
      {4, 0}, {1, 1}, {33, 3}, {1, 20000}, {40, 1000}, {6, 200}, {5, 2000}};
  for (int op = 0; op < 3; ++op) {
    for (const auto& [rows, cols] : row_shapes) {
      for (const int offset : {0, 1}) {
        rows_case<T>(op, rows, cols, offset, op == 2);
      }
    }
  }
  rows_case<T>(2, 9, 64, 0, false);
  // Normalisations: a warp a row, or 2, 4 or 8 warps (several rows a block: 3000 and 2048 columns),
  // as the row's held vectors need; looped beyond the block; whole vectors or not.
  const std::pair<int64_t, int64_t> norm_shapes[] = {
      {5, 7}, {9, 64}, {9, 1024}, {3, 1100}, {5, 3000}, {7, 2048}, {2, 8200}, {1, 1}, {33, 3}};
  for (int op = 0; op < 2; ++op) {
    for (const auto& [rows, cols] : norm_shapes) {
      for (const int offset : {0, 1}) {
        norms_case<T>(op, rows, cols, offset, false, op == 0);
      }
    }
  }
  norms_case<T>(0, 9, 64, 0, true, false);
  norms_case<T>(0, 3, 5000, 0, false, false);
  norms_case<T>(0, 9, 1024, 0, true, false);
  for (const auto& [rows, cols] : norm_shapes) {
    layer_norm_lanes_agree<T>(rows, cols);
  }
  rows_case<T>(2, 3, 5000, 0, false);
  // rms_norm's backward kernel with w's gradient summed over the rows: a warp a row (several rows a
  // block), several warps a row, looped beyond the block (9000 columns); fewer blocks than the rows
  // need (each block several steps, its row groups combined), as many as they need, or one.
  for (const auto& [rows, cols] : norm_shapes) {
    for (const int offset : {0, 1}) {
      rms_norm_backward_case<T>(rows, cols, offset, 2);
    }
    rms_norm_backward_case<T>(rows, cols, 0, 1000);
    rms_norm_backward_case<T>(rows, cols, 0, 0);  // w written at every element
  }
  rms_norm_backward_case<T>(70, 64, 0, 3);
  rms_norm_backward_case<T>(19, 3000, 0, 2);
  rms_norm_backward_case<T>(5, 9000, 0, 2);
  rms_norm_backward_case<T>(3, 9000, 1, 1);
  rms_norm_backward_case<T>(300, 24, 1, 4);
  // A split op's gradient: the norms kernel with no statistics, two outputs in one Tensor.
  for (const auto& [rows, cols] : norm_shapes) {
    for (const int offset : {0, 1}) {
      split_gradient_case<T>(rows, cols, offset, false);
    }
  }
  split_gradient_case<T>(9, 64, 0, true);
  split_gradient_case<T>(3, 4096, 0, false);
  split_gradient_case<T>(4, 0, 0, false);
  // The output's rows x columns with a transposed input (x[cols, rows].t(): strides {rows, 1}).
  const std::pair<int64_t, int64_t> tile_shapes[] = {
      {96, 64}, {70, 33}, {100, 40}, {32, 32}, {8, 8}, {5, 3}, {16, 128}, {128, 16}};
  for (const auto& [rows, cols] : tile_shapes) {
    for (const int offset : {0, 1}) {
      muladd_case<T>("x.t() * y", {cols, rows}, {rows, 1}, {1, cols}, offset);
      muladd_case<T>("y * x.t()", {cols, rows}, {1, cols}, {rows, 1}, offset);
      muladd_case<T>("x.t() * x.t()", {cols, rows}, {rows, 1}, {rows, 1}, offset);
      muladd_case<T>("x.t() * w[rows, 1]", {cols, rows}, {rows, 1}, {0, 1}, offset);
      muladd_case<T>("x.t() * w[cols]", {cols, rows}, {rows, 1}, {1, 0}, offset);
      muladd_case<T>("x[:, ::2] * y", {cols, rows}, {2, 2 * cols}, {1, cols}, offset);
      muladd_case<T>("padded rows * y", {cols, rows}, {1, cols + 8}, {1, cols}, offset);
    }
  }
  // Three dimensions, read across: the middle one in whole vectors or not, or not dense.
  muladd_case<T>("3-d across", {8, 4, 6}, {4, 1, 32}, {1, 8, 32}, 0);
  muladd_case<T>("3-d across, 5 rows a block", {8, 5, 6}, {5, 1, 40}, {1, 8, 40}, 0);
  muladd_case<T>("3-d across, 6 rows a block", {8, 6, 4}, {8, 1, 64}, {1, 8, 48}, 0);
  muladd_case<T>("3-d across, every other row", {8, 6, 4}, {16, 2, 128}, {1, 8, 48}, 0);
  muladd_case<T>("3-d across, broadcast", {16, 8, 3}, {8, 1, 128}, {0, 0, 1}, 0);
}

}  // namespace

int main() {
  check_all<float>();
  check_all<__nv_bfloat16>();
  check_all<double>();
  for (const auto& [kernel, count] : emu::launches) {
    std::printf("launched %s %d times\n", kernel.c_str(), count);
  }
  std::printf("%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
