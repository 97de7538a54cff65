// mymuladd on the CPU: out = a * b + c, elementwise, for float32 and float64.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

namespace extension_cpp {

at::Tensor mymuladd_cpu(const at::Tensor& a, const at::Tensor& b, double c) {
  TORCH_CHECK(a.sizes() == b.sizes(), "mymuladd: a and b must have one shape, got ", a.sizes(),
              " and ", b.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "mymuladd: a and b must have one dtype");
  // The loop below walks memory in order: give it dense inputs, and a dense output.
  const at::Tensor a_dense = a.contiguous();
  const at::Tensor b_dense = b.contiguous();
  at::Tensor out = at::empty(a_dense.sizes(), a_dense.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "mymuladd_cpu", [&] {
    const scalar_t* x = a_dense.const_data_ptr<scalar_t>();
    const scalar_t* y = b_dense.const_data_ptr<scalar_t>();
    scalar_t* result = out.mutable_data_ptr<scalar_t>();
    const scalar_t addend = static_cast<scalar_t>(c);
    at::parallel_for(0, out.numel(), 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        result[i] = x[i] * y[i] + addend;
      }
    });
  });
  return out;
}

}  // namespace extension_cpp
