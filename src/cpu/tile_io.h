// Host tile loads shared by the CPU backends: rows of one head of a tensor as
// fp32, whatever its dtype.
#pragma once

#include <algorithm>

#include "core/half.h"
#include "core/params.h"

namespace flashattn::cpu {

// Copies rows [row0, row0 + rows) of head h of batch b of t into dst as fp32,
// head_dim apart.
inline void load_rows(const AttnParams& p, const TensorRef& t, int b, int h, int row0, int rows,
                      float* dst) {
  const int d = p.sizes.head_dim;
  for (int r = 0; r < rows; ++r) {
    const int64_t base = b * t.batch_stride + int64_t(row0 + r) * t.row_stride + h * t.head_stride;
    if (p.dtype == DType::f32) {
      std::copy_n(static_cast<const float*>(t.data) + base, d, dst + size_t(r) * d);
    } else {
      for (int c = 0; c < d; ++c) dst[size_t(r) * d + c] = load_float(t.data, p.dtype, base + c);
    }
  }
}

// Stores rows of fp32 values (head_dim apart) into rows [row0, row0 + rows) of
// head h of batch b of t, in t's dtype.
inline void store_rows(const AttnParams& p, const TensorRef& t, int b, int h, int row0, int rows,
                       const float* src) {
  const int d = p.sizes.head_dim;
  for (int r = 0; r < rows; ++r) {
    const int64_t base = b * t.batch_stride + int64_t(row0 + r) * t.row_stride + h * t.head_stride;
    for (int c = 0; c < d; ++c) store_float(t.data, p.dtype, base + c, src[size_t(r) * d + c]);
  }
}

}  // namespace flashattn::cpu
