// The CUDA kernels of examples/norms.yaml alone, without torch or host code (benchmarks/norms_kernels.sh
// builds it against a generated kernels.cu): rows 4096 x hidden 1024, 4096 and 8192, float32 and
// bfloat16, each kernel's time (CUDA events, 50 launches) beside a device copy of one tensor; "% of copy"
// counts the tensors each kernel must move (a forward reads one and writes one; a backward reads two and
// writes one; fused_add_rms_norm reads two and writes two). Inputs are zeros: these kernels take as
// long on any values.
//   ./norms_kernels [partial rows a multiprocessor for the column sums; default: as many as the
//                   generated ops ask for (sum_blocks_per_multiprocessor)]
#include <cuda_runtime.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>

#include "kernel_timing.h"
#include "kernels.h"

using namespace knorms_torch_library::cuda;

// The partial rows a multiprocessor that generated ops ask for; weak, so that kernels generated
// before it existed (benchmarks/norms_kernels.sh DIR REV) link, and get 2, what they asked for.
namespace knorms_torch_library::cuda {
int sum_blocks_per_multiprocessor(Dtype dtype) __attribute__((weak));
}

int main(int argc, char** argv) {
  const int64_t rows = 4096, widest = 8192;
  const int asked = argc > 1 ? atoi(argv[1]) : 0;
  const auto per_multiprocessor = [&](Dtype dtype) {
    const bool generated = &sum_blocks_per_multiprocessor != nullptr;
    return asked > 0 ? asked : generated ? sum_blocks_per_multiprocessor(dtype) : 2;
  };
  int multiprocessors = 0;
  cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, 0);
  const int64_t most_partial_rows = int64_t{std::max(asked, 4)} * multiprocessors;
  void *x, *grad, *weight, *bias, *out0, *out1, *partials;
  const size_t big = rows * widest * 4;
  cudaMalloc(&x, big);
  cudaMalloc(&grad, big);
  cudaMalloc(&out0, big);
  cudaMalloc(&weight, widest * 4);
  cudaMalloc(&bias, widest * 4);
  cudaMalloc(&out1, widest * 4);
  cudaMalloc(&partials, most_partial_rows * 2 * widest * 4);  // at most 2 column sums, float32
  cudaMemset(x, 0, big);
  cudaMemset(grad, 0, big);
  cudaMemset(weight, 0, widest * 4);
  cudaMemset(bias, 0, widest * 4);
  printf("%d multiprocessors\n", multiprocessors);
  for (Dtype dtype : {Dtype::float32, Dtype::bfloat16}) {
    const int size = dtype == Dtype::float32 ? 4 : 2;
    for (int64_t hidden : {1024, 4096, 8192}) {
      const size_t bytes = rows * hidden * size;
      const float copy = time_of([&] { cudaMemcpyAsync(out0, x, bytes, cudaMemcpyDeviceToDevice, 0); });
      // Each input's stride between rows (0: one row read by all rows), the outputs' offsets.
      const int64_t forward_strides[3] = {hidden, 0, 0}, backward_strides[3] = {hidden, hidden, 0};
      const int64_t offsets[2] = {0, 0};
      const void* forward_inputs[] = {x, weight, bias};
      const void* backward_inputs[] = {grad, x, weight};
      void* outputs[] = {out0, out1};
      void* updated[] = {x, grad};  // fused_add_rms_norm writes x and residual in place
      const auto launch = [&](const void* const* inputs, void* const* outs, const int64_t* strides) {
        return Launch{dtype, rows, hidden, inputs, outs, nullptr, false, 0, nullptr, nullptr,
                      strides, offsets, hidden, nullptr, 0};
      };
      const Launch forward = launch(forward_inputs, outputs, forward_strides);
      const Launch in_place = launch(backward_inputs, updated, backward_strides);
      const Launch backward = launch(backward_inputs, outputs, backward_strides);
      Launch summing = backward;  // weight's gradient summed over the rows
      summing.partials = partials;
      summing.partial_rows = int64_t{per_multiprocessor(dtype)} * multiprocessors;
      printf("%s hidden %ld: copy %.1f us\n", size == 4 ? "float32" : "bfloat16", hidden, copy);
      const auto report = [&](const char* op, float us, float tensors_moved) {
        printf("  %-22s %7.1f us  %4.0f%% of copy\n", op, us, 100 * tensors_moved * copy / us);
      };
      report("rms_norm", time_of([&] { kernels::rms_norm(forward, 1e-6); }), 1);
      report("layer_norm", time_of([&] { kernels::layer_norm(forward, 1e-5, true); }), 1);
      report("softmax", time_of([&] { kernels::softmax(forward); }), 1);
      report("log_softmax", time_of([&] { kernels::log_softmax(forward); }), 1);
      report("fused_add_rms_norm", time_of([&] { kernels::fused_add_rms_norm(in_place, 1e-6); }), 2);
      report("softmax_backward", time_of([&] { kernels::softmax_backward(backward); }), 1.5);
      report("log_softmax_backward", time_of([&] { kernels::log_softmax_backward(backward); }), 1.5);
      report("rms_norm_backward", time_of([&] { kernels::rms_norm_backward(summing, 1e-6); }), 1.5);
      report("layer_norm_backward", time_of([&] { kernels::layer_norm_backward(summing, 1e-5); }), 1.5);
      const cudaError_t error = cudaGetLastError();
      if (error != cudaSuccess) {
        printf("  CUDA error: %s\n", cudaGetErrorString(error));
        return 1;
      }
    }
  }
  return 0;
}
