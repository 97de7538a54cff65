// The generated CUDA kernels on the host, for checking their indexing where no GPU is (CI): each
// CUDA thread of a block is a fiber (ucontext) of one host thread, the blocks run one after
// another, __syncthreads and a warp's shuffles are barriers at which a fiber yields to the others
// until the last arrives. (A std::thread a CUDA thread, at std::barriers, took the test 209 s in a
// fresh clone's CI on 2 busy cores, each barrier a trip through the operating system's scheduler;
// fibers, 40 s.) test_cuda_emulated.py includes this before
// pointwise.cuh, whose launches it rewrites `kernel<VEC, ...><<<grid, block, 0, stream>>>(args)`
// into `emu::launch("kernel<VEC>", grid, block, 0, stream, [&] { kernel<VEC, ...>(args); })`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <ucontext.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
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

void yield();
inline unsigned long progress;  // arrivals and finished threads: a round without any is a deadlock

// `expected` fibers meet: each arriving one yields to the others until the last one arrives.
struct Barrier {
  unsigned expected;
  unsigned arrived = 0;
  unsigned generation = 0;

  void arrive_and_wait() {
    ++progress;
    const unsigned waited = generation;
    if (++arrived == expected) {
      arrived = 0;
      ++generation;
      return;
    }
    while (generation == waited) {
      yield();
    }
  }
};

struct Warp {
  Barrier arrived{32};
  uint64_t lanes[32];
};

// A CUDA thread: its fiber, and what the kernel reads as its own while it runs.
struct Thread {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  dim3 index;
  dim3 block_index;
  Warp* warp;
  bool done = false;
};

inline ucontext_t scheduler;
inline Thread* running;
inline Barrier* block;
inline Warp* warp;
inline int lane;
inline std::map<std::string, int> launches;  // kernel<first template argument>: launches

}  // namespace emu

inline dim3 threadIdx;
inline dim3 blockIdx;
inline dim3 gridDim;
inline dim3 blockDim;

namespace emu {

// Back to the scheduler, which runs the other threads before this one again.
inline void yield() {
  Thread* self = running;
  self->block_index = blockIdx;
  swapcontext(&self->context, &scheduler);
}

}  // namespace emu

inline void __syncthreads() { emu::block->arrive_and_wait(); }

// Every lane of the warp must call it, as on a GPU with a full mask.
template <typename T>
T __shfl_xor_sync(unsigned, T value, int offset) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  emu::Warp* warp = emu::warp;
  const int lane = emu::lane;
  warp->lanes[lane] = bits;
  warp->arrived.arrive_and_wait();
  bits = warp->lanes[lane ^ offset];
  warp->arrived.arrive_and_wait();  // every lane has read before the next shuffle writes
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

inline std::function<void()> kernel;  // the launch's kernel call

// A thread's life: the kernel on every block of the grid, in order; the next block starts when
// every thread left this one.
inline void run_thread() {
  for (unsigned y = 0; y < gridDim.y; ++y) {
    for (unsigned x = 0; x < gridDim.x; ++x) {
      blockIdx = dim3(x, y, 0);
      kernel();
      block->arrive_and_wait();
    }
  }
  running->done = true;
  ++progress;
}  // returns to the scheduler (uc_link)

// Runs `body` (the kernel call) as every thread of every block of `grid`; aborts on a launch a GPU
// would refuse, and on a deadlock (a barrier some thread never reaches).
template <typename Body>
void launch(const std::string& name, dim3 grid, dim3 threads, int, cudaStream_t, Body&& body) {
  ++launches[name];
  const unsigned count = threads.x * threads.y * threads.z;
  if (grid.x == 0 || grid.y == 0 || grid.y > 65535 || count == 0 || count > 1024 || count % 32) {
    std::abort();
  }
  constexpr size_t kStack = 256 * 1024;
  gridDim = grid;
  blockDim = threads;
  kernel = body;
  Barrier arrived{count};
  block = &arrived;
  std::vector<std::unique_ptr<Warp>> warps;
  for (unsigned w = 0; w < count / 32; ++w) {
    warps.push_back(std::make_unique<Warp>());
  }
  std::vector<Thread> pool(count);
  for (unsigned t = 0; t < count; ++t) {
    Thread& thread = pool[t];
    thread.index = dim3(t % threads.x, t / threads.x, 0);
    thread.warp = warps[t / 32].get();
    thread.stack.reset(new char[kStack]);  // not zeroed: a fiber writes its stack before reading it
    getcontext(&thread.context);
    thread.context.uc_stack.ss_sp = thread.stack.get();
    thread.context.uc_stack.ss_size = kStack;
    thread.context.uc_link = &scheduler;
    makecontext(&thread.context, run_thread, 0);
  }
  for (unsigned left = count; left > 0;) {
    const unsigned long before = progress;
    for (unsigned t = 0; t < count; ++t) {
      Thread& thread = pool[t];
      if (thread.done) {
        continue;
      }
      running = &thread;
      threadIdx = thread.index;
      blockIdx = thread.block_index;
      warp = thread.warp;
      lane = static_cast<int>(t % 32);
      swapcontext(&scheduler, &thread.context);
      left -= thread.done ? 1 : 0;
    }
    if (left > 0 && progress == before) {
      std::abort();  // every thread waits at a barrier the others never reach
    }
  }
}

}  // namespace emu
