// The generated CUDA kernels on the host, for checking their indexing where no GPU is (CI): each
// CUDA thread of a block is a std::thread, the blocks run one after another, __syncthreads and a
// warp's shuffles wait at std::barriers. test_cuda_emulated.py includes this before pointwise.cuh,
// whose launches it rewrites `kernel<VEC, ...><<<grid, block, 0, stream>>>(args)` into
// `emu::launch("kernel<VEC>", grid, block, 0, stream, [&] { kernel<VEC, ...>(args); })`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <barrier>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

// Device code compiles as host code; a __shared__ array is static, which one block at a time makes
// the block's own.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __restrict__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__

namespace emu {

struct Warp {
  std::barrier<> arrived{32};
  uint64_t lanes[32];
};

inline thread_local std::barrier<>* block;
inline thread_local Warp* warp;
inline thread_local int lane;
inline std::map<std::string, int> launches;  // kernel<first template argument>: launches

}  // namespace emu

inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline dim3 gridDim;
inline dim3 blockDim;

inline void __syncthreads() { emu::block->arrive_and_wait(); }

// Every lane of the warp must call it, as on a GPU with a full mask.
template <typename T>
T __shfl_xor_sync(unsigned, T value, int offset) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  emu::warp->lanes[emu::lane] = bits;
  emu::warp->arrived.arrive_and_wait();
  bits = emu::warp->lanes[emu::lane ^ offset];
  emu::warp->arrived.arrive_and_wait();  // every lane has read before the next shuffle writes
  T result;
  std::memcpy(&result, &bits, sizeof(T));
  return result;
}

inline float __uint_as_float(unsigned int bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

extern "C" cudaError_t cudaGetLastError(void) { return cudaSuccess; }

namespace emu {

// Runs `body` (the kernel call) as every thread of every block of `grid`; aborts on a launch a GPU
// would refuse.
template <typename Body>
void launch(const std::string& name, dim3 grid, dim3 threads, int, cudaStream_t, Body&& body) {
  ++launches[name];
  const unsigned count = threads.x * threads.y * threads.z;
  if (grid.x == 0 || grid.y == 0 || grid.y > 65535 || count == 0 || count > 1024 || count % 32) {
    std::abort();
  }
  gridDim = grid;
  blockDim = threads;
  std::barrier<> arrived(count);
  std::vector<std::unique_ptr<Warp>> warps;
  for (unsigned w = 0; w < count / 32; ++w) {
    warps.push_back(std::make_unique<Warp>());
  }
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < count; ++t) {
    pool.emplace_back([&, t] {
      threadIdx = dim3(t % threads.x, t / threads.x, 0);
      emu::block = &arrived;
      emu::warp = warps[t / 32].get();
      emu::lane = t % 32;
      for (unsigned y = 0; y < grid.y; ++y) {
        for (unsigned x = 0; x < grid.x; ++x) {
          blockIdx = dim3(x, y, 0);
          body();
          arrived.arrive_and_wait();  // the next block starts when every thread left this one
        }
      }
    });
  }
  for (std::thread& thread : pool) {
    thread.join();
  }
}

}  // namespace emu
