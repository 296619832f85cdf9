// Head-dim buckets: each tensor-core forward is instantiated for a few head
// dims and runs any other by padding it with zero columns to the next one.
#pragma once

#include <cstddef>

namespace flashattn::cuda {

// The smallest of the ascending `buckets` holding head_dim, or 0 when head_dim
// exceeds the largest.
template <size_t N>
constexpr int head_dim_bucket(const int (&buckets)[N], int head_dim) {
  for (int bucket : buckets)
    if (head_dim <= bucket) return bucket;
  return 0;
}

}  // namespace flashattn::cuda
