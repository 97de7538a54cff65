// rotary_embedding's CUDA kernel (torch_library): rotates, in place, the first rot_dim features of
// every head of query (and of key, where given) by the angle of the token's position.
// cos_sin_cache is [max_position, rot_dim]: cos in the first rot_dim / 2 columns, sin in the rest.
// Pairs: (i, i + rot_dim / 2) when is_neox (GPT-NeoX), else (2i, 2i + 1) (GPT-J), each rotated as
//   x1' = x1 * cos[i] - x2 * sin[i],  x2' = x2 * cos[i] + x1 * sin[i].
// kopgen has checked the devices and contiguity, set the device guard and passes the stream.
#include "../kernels.h"

#include <ATen/Dispatch.h>
#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <optional>

namespace kllm {
namespace {

template <typename scalar_t>
__device__ void rotate_pair(scalar_t* head, int64_t i, int64_t half, float c, float s, bool is_neox) {
  const int64_t first = is_neox ? i : 2 * i;
  const int64_t second = is_neox ? i + half : 2 * i + 1;
  const float x1 = static_cast<float>(head[first]);
  const float x2 = static_cast<float>(head[second]);
  head[first] = static_cast<scalar_t>(x1 * c - x2 * s);
  head[second] = static_cast<scalar_t>(x2 * c + x1 * s);
}

template <typename scalar_t>
__global__ void rotary_embedding_kernel(const int64_t* __restrict__ positions, scalar_t* __restrict__ query,
                                        scalar_t* __restrict__ key, const scalar_t* __restrict__ cache,
                                        int64_t query_heads, int64_t key_heads, int64_t head_size,
                                        int64_t rot_dim, int64_t max_position, bool is_neox) {
  // Geometry: one block per token (gridDim.x = tokens); the block's threads stride over the
  // token's (head, pair) items, query's heads first, then key's (key_heads = 0 without key).
  // Each item is one pair of one head: no two threads touch the same element. int64_t offsets.
  const int64_t token = blockIdx.x;
  const int64_t p = positions[token];
  CUDA_KERNEL_ASSERT(p >= 0 && p < max_position);
  const int64_t half = rot_dim / 2;
  const scalar_t* cos = cache + p * rot_dim;
  const scalar_t* sin = cos + half;
  const int64_t query_items = query_heads * half;
  const int64_t items = (query_heads + key_heads) * half;
  for (int64_t item = threadIdx.x; item < items; item += blockDim.x) {
    const bool is_query = item < query_items;
    const int64_t local = is_query ? item : item - query_items;
    const int64_t head = local / half;
    const int64_t i = local % half;
    scalar_t* base = is_query ? query + (token * query_heads + head) * head_size
                              : key + (token * key_heads + head) * head_size;
    rotate_pair(base, i, half, static_cast<float>(cos[i]), static_cast<float>(sin[i]), is_neox);
  }
}

}  // namespace

void rotary_embedding_cuda(
    const at::Tensor& positions,
    at::Tensor& query,
    const std::optional<at::Tensor>& key,
    int64_t head_size,
    const at::Tensor& cos_sin_cache,
    bool is_neox,
    cudaStream_t stream) {
  const int64_t tokens = positions.numel();
  if (tokens == 0) {
    return;
  }
  const int64_t rot_dim = cos_sin_cache.size(1);
  TORCH_CHECK(positions.scalar_type() == at::kLong, "rotary_embedding: positions must be int64");
  TORCH_CHECK(cos_sin_cache.dim() == 2 && rot_dim % 2 == 0 && rot_dim <= head_size,
              "rotary_embedding: cos_sin_cache must be [max_position, rot_dim], rot_dim even and <= head_size");
  TORCH_CHECK(cos_sin_cache.scalar_type() == query.scalar_type(),
              "rotary_embedding: cos_sin_cache and query dtypes differ");
  TORCH_CHECK(query.numel() % (tokens * head_size) == 0,
              "rotary_embedding: query must hold tokens x heads x head_size elements");
  TORCH_CHECK(tokens < (int64_t{1} << 31), "rotary_embedding: more tokens than a CUDA grid holds");
  const int64_t query_heads = query.numel() / (tokens * head_size);
  int64_t key_heads = 0;
  if (key.has_value()) {
    TORCH_CHECK(key->scalar_type() == query.scalar_type(), "rotary_embedding: key and query dtypes differ");
    TORCH_CHECK(key->numel() % (tokens * head_size) == 0,
                "rotary_embedding: key must hold tokens x heads x head_size elements");
    key_heads = key->numel() / (tokens * head_size);
  }
  const int64_t items = (query_heads + key_heads) * (rot_dim / 2);
  if (items == 0) {
    return;
  }
  const unsigned int threads = static_cast<unsigned int>(std::min<int64_t>(512, (items + 31) / 32 * 32));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, query.scalar_type(), "rotary_embedding_cuda", [&] {
    rotary_embedding_kernel<scalar_t><<<static_cast<unsigned int>(tokens), threads, 0, stream>>>(
        positions.const_data_ptr<int64_t>(), query.mutable_data_ptr<scalar_t>(),
        key.has_value() ? key->mutable_data_ptr<scalar_t>() : nullptr, cos_sin_cache.const_data_ptr<scalar_t>(),
        query_heads, key_heads, head_size, rot_dim, cos_sin_cache.size(0), is_neox);
  });
  const cudaError_t error = cudaGetLastError();
  TORCH_CHECK(error == cudaSuccess, "rotary_embedding_cuda: ", cudaGetErrorString(error));
}

}  // namespace kllm
