// A tensor's steps between rows along seqlen, heads and batch, which TMA's
// rules (tensor_map.cu) and the wide forward's sector test (aligned_kv.cu)
// both walk.
#pragma once

#include <array>
#include <cstdint>

#include "core/params.h"

namespace flashattn::cuda::sm90 {

// A dimension's name, element stride and extent (one of extent 1 is never
// stepped along, whatever its stride).
struct RowStep {
  const char* dim;
  int64_t stride;
  int extent;
};

inline std::array<RowStep, 3> row_steps(const TensorRef& t, int seqlen, int heads, int batch) {
  return {{{"seqlen", t.row_stride, seqlen}, {"heads", t.head_stride, heads},
           {"batch", t.batch_stride, batch}}};
}

}  // namespace flashattn::cuda::sm90
