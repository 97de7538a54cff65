// rotary_embedding's CPU kernel (torch_library): rotates, in place, the first rot_dim features of
// every head of query (and of key, where given) by the angle of the token's position.
// cos_sin_cache is [max_position, rot_dim]: cos in the first rot_dim / 2 columns, sin in the rest.
// Pairs: (i, i + rot_dim / 2) when is_neox (GPT-NeoX), else (2i, 2i + 1) (GPT-J), each rotated as
//   x1' = x1 * cos[i] - x2 * sin[i],  x2' = x2 * cos[i] + x1 * sin[i].
// kopgen has checked the devices and the contiguity of query and key.
#include "kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <optional>

namespace kllm {
namespace {

template <typename scalar_t>
void rotate_heads(scalar_t* x, int64_t heads, int64_t head_size, const scalar_t* cos,
                  const scalar_t* sin, int64_t half, bool is_neox) {
  using acc_t = at::opmath_type<scalar_t>;
  for (int64_t head = 0; head < heads; ++head) {
    scalar_t* h = x + head * head_size;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t first = is_neox ? i : 2 * i;
      const int64_t second = is_neox ? i + half : 2 * i + 1;
      const acc_t x1 = static_cast<acc_t>(h[first]);
      const acc_t x2 = static_cast<acc_t>(h[second]);
      const acc_t c = static_cast<acc_t>(cos[i]);
      const acc_t s = static_cast<acc_t>(sin[i]);
      h[first] = static_cast<scalar_t>(x1 * c - x2 * s);
      h[second] = static_cast<scalar_t>(x2 * c + x1 * s);
    }
  }
}

}  // namespace

void rotary_embedding_cpu(
    const at::Tensor& positions,
    at::Tensor& query,
    const std::optional<at::Tensor>& key,
    int64_t head_size,
    const at::Tensor& cos_sin_cache,
    bool is_neox) {
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
  const int64_t query_heads = query.numel() / (tokens * head_size);
  int64_t key_heads = 0;
  if (key.has_value()) {
    TORCH_CHECK(key->scalar_type() == query.scalar_type(), "rotary_embedding: key and query dtypes differ");
    TORCH_CHECK(key->numel() % (tokens * head_size) == 0,
                "rotary_embedding: key must hold tokens x heads x head_size elements");
    key_heads = key->numel() / (tokens * head_size);
  }
  const int64_t max_position = cos_sin_cache.size(0);
  const int64_t half = rot_dim / 2;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, query.scalar_type(), "rotary_embedding_cpu", [&] {
    const int64_t* pos = positions.const_data_ptr<int64_t>();
    const scalar_t* cache = cos_sin_cache.const_data_ptr<scalar_t>();
    scalar_t* q = query.mutable_data_ptr<scalar_t>();
    scalar_t* k = key.has_value() ? key->mutable_data_ptr<scalar_t>() : nullptr;
    // Geometry: at::parallel_for splits the tokens among the threads; each token rotates its
    // query heads, then its key heads, with its row of the cache. Offsets are int64_t.
    at::parallel_for(0, tokens, 1, [&](int64_t begin, int64_t end) {
      for (int64_t token = begin; token < end; ++token) {
        const int64_t p = pos[token];
        TORCH_CHECK(p >= 0 && p < max_position, "rotary_embedding: position ", p, " is outside [0, ",
                    max_position, ")");
        const scalar_t* cos = cache + p * rot_dim;
        const scalar_t* sin = cos + half;
        rotate_heads(q + token * query_heads * head_size, query_heads, head_size, cos, sin, half, is_neox);
        if (k != nullptr) {
          rotate_heads(k + token * key_heads * head_size, key_heads, head_size, cos, sin, half, is_neox);
        }
      }
    });
  });
}

}  // namespace kllm
