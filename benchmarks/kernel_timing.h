// Timing for the benchmarks of kernels alone (norms_kernels.cu, rows_kernels.cu): CUDA events, no torch.
#pragma once

#include <cuda_runtime.h>

// Microseconds a launch of f takes, averaged over 50 after 5 that warm up.
template <typename Launches>
static float time_of(const Launches& f) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 5; ++i) f();
  cudaEventRecord(start);
  const int n = 50;
  for (int i = 0; i < n; ++i) f();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  return ms * 1000 / n;
}
