// rms_norm_backward's CUDA kernels (torch_library), the gradients of rms_norm:
//   r = 1 / sqrt(mean(x^2) + epsilon), xhat = x * r (per row of the last dimension)
//   grad_input = r * (grad * weight - xhat * mean(grad * weight * xhat))
//   grad_weight = sum over rows of grad * xhat
// kopgen allocates grad_input and grad_weight as `fake` says, checks devices, makes the inputs
// dense, sets the device guard and passes PyTorch's current stream.
#include "../kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kllm {
namespace {

constexpr int kBackwardThreads = 256;  // a multiple of the warp size

// The sum of `value` over the block's threads, returned to every thread. Callable more than
// once per kernel: the barrier at the end keeps the next call from overwriting `warp_sums`
// before every thread has read it.
template <typename acc_t>
__device__ acc_t rms_norm_backward_block_sum(acc_t value) {
  __shared__ acc_t warp_sums[kBackwardThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  if (threadIdx.x % 32 == 0) {
    warp_sums[threadIdx.x / 32] = value;
  }
  __syncthreads();
  acc_t total = 0;
  for (int i = 0; i < kBackwardThreads / 32; ++i) {
    total += warp_sums[i];
  }
  __syncthreads();
  return total;
}

template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
__global__ void rms_norm_grad_input_kernel(scalar_t* __restrict__ grad_input, acc_t* __restrict__ inv_rms,
                                           const scalar_t* __restrict__ grad,
                                           const scalar_t* __restrict__ input,
                                           const scalar_t* __restrict__ weight, acc_t epsilon,
                                           int64_t hidden) {
  // Geometry: one block of kBackwardThreads threads per row (gridDim.x = rows), striding over the row's
  // columns: one pass for the two sums, one for the write. Also stores the row's r. int64_t offsets.
  const int64_t row = blockIdx.x;
  const int64_t base = row * hidden;
  acc_t squares = 0;
  acc_t dot = 0;  // sum of grad * weight * x
  for (int64_t col = threadIdx.x; col < hidden; col += blockDim.x) {
    const acc_t v = static_cast<acc_t>(input[base + col]);
    squares += v * v;
    dot += static_cast<acc_t>(grad[base + col]) * static_cast<acc_t>(weight[col]) * v;
  }
  const acc_t n = static_cast<acc_t>(hidden);
  const acc_t r = acc_t(1) / sqrt(rms_norm_backward_block_sum(squares) / n + epsilon);
  const acc_t mean_gwx = r * rms_norm_backward_block_sum(dot) / n;
  if (threadIdx.x == 0) {
    inv_rms[row] = r;
  }
  for (int64_t col = threadIdx.x; col < hidden; col += blockDim.x) {
    const acc_t gw = static_cast<acc_t>(grad[base + col]) * static_cast<acc_t>(weight[col]);
    const acc_t xhat = static_cast<acc_t>(input[base + col]) * r;
    grad_input[base + col] = static_cast<scalar_t>(r * (gw - xhat * mean_gwx));
  }
}

template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
__global__ void rms_norm_grad_weight_kernel(scalar_t* __restrict__ grad_weight,
                                            const scalar_t* __restrict__ grad,
                                            const scalar_t* __restrict__ input,
                                            const acc_t* __restrict__ inv_rms, int64_t rows,
                                            int64_t hidden) {
  // Geometry: blocks of 32 x 8 threads, one block per 32 columns (gridDim.x = ceil(hidden / 32));
  // threadIdx.x picks the column (a warp reads 32 neighbours), threadIdx.y every 8th row. The 8
  // partial sums meet in shared memory, in a fixed order (deterministic). int64_t offsets.
  __shared__ acc_t partial[8][33];  // 33: no bank conflicts on the column-wise reads
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  acc_t total = 0;
  if (col < hidden) {
    for (int64_t row = threadIdx.y; row < rows; row += 8) {
      const int64_t at = row * hidden + col;
      total += static_cast<acc_t>(grad[at]) * static_cast<acc_t>(input[at]) * inv_rms[row];
    }
  }
  partial[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y == 0 && col < hidden) {
    for (int i = 1; i < 8; ++i) {
      total += partial[i][threadIdx.x];
    }
    grad_weight[col] = static_cast<scalar_t>(total);
  }
}

}  // namespace

void rms_norm_backward_cuda(
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight,
    double epsilon,
    at::Tensor& grad_input,
    at::Tensor& grad_weight,
    cudaStream_t stream) {
  const int64_t hidden = input.size(-1);
  TORCH_CHECK(grad.sizes() == input.sizes(), "rms_norm_backward: grad and input shapes differ");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == hidden,
              "rms_norm_backward: weight must be 1-D with input's last dimension");
  if (hidden == 0) {
    return;
  }
  const int64_t rows = input.numel() / hidden;
  TORCH_CHECK(rows < (int64_t{1} << 31), "rms_norm_backward: more rows than a CUDA grid holds");
  // Each row's r, computed by the first kernel and read by the second (on the same stream), in
  // float (double for double inputs, which gradcheck perturbs by 1e-6).
  const at::ScalarType acc_type = at::toOpMathType(input.scalar_type());
  const at::Tensor inv_rms = at::empty({rows}, input.options().dtype(acc_type));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "rms_norm_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (rows > 0) {
      rms_norm_grad_input_kernel<scalar_t><<<static_cast<unsigned int>(rows), kBackwardThreads, 0, stream>>>(
          grad_input.mutable_data_ptr<scalar_t>(), inv_rms.mutable_data_ptr<acc_t>(),
          grad.const_data_ptr<scalar_t>(), input.const_data_ptr<scalar_t>(),
          weight.const_data_ptr<scalar_t>(), static_cast<acc_t>(epsilon), hidden);
    }
    const dim3 block(32, 8);
    const dim3 grid(static_cast<unsigned int>((hidden + 31) / 32));
    rms_norm_grad_weight_kernel<scalar_t><<<grid, block, 0, stream>>>(
        grad_weight.mutable_data_ptr<scalar_t>(), grad.const_data_ptr<scalar_t>(),
        input.const_data_ptr<scalar_t>(), inv_rms.const_data_ptr<acc_t>(), rows, hidden);
  });
  const cudaError_t error = cudaGetLastError();
  TORCH_CHECK(error == cudaSuccess, "rms_norm_backward_cuda: ", cudaGetErrorString(error));
}

}  // namespace kllm
