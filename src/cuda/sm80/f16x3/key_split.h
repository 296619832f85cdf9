// Keys split over several blocks per query tile, for grids too small to fill
// the GPU: each split writes its rows' output normalised by its own sum, with
// that sum's lse, and merge_key_splits() combines them:
//   lse = ln Σ_s e^(lse_s),   out = Σ_s e^(lse_s − lse) · out_s.
#pragma once

#include "params.h"

namespace flashattn::cuda {

inline constexpr int kMaxKeySplits = 8;

struct KeySplit {
  int count = 1;          // 1: the kernel writes p.o and p.softmax.lse itself
  float* out = nullptr;   // [split][batch][q head][row][head_dim]
  float* lse = nullptr;   // [split][batch][q head][row]
};

// out and lse of p from the count partial results (queued on p.stream).
void merge_key_splits(const AttnParams& p, const KeySplit& split);

}  // namespace flashattn::cuda
