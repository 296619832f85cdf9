// Split-KV: when (query tiles × heads × batch) would leave multiprocessors idle,
// each query tile's keys are split across several blocks. Block `split` writes
// its partial output, normalised by its own row sum, and its partial
// lse_s = m_s·scale + ln l_s; a second kernel merges them:
//   lse = ln Σ_s exp(lse_s),  o = Σ_s exp(lse_s − lse)·o_s.
// A split that saw no key has lse_s = −inf and weighs nothing; a row no split
// saw gets o = 0 and lse = −inf. The partials are O(seqlen) extra memory,
// allocated stream-ordered (cudaMallocAsync), so calls never synchronise.
#pragma once

#include <cstdint>

#include "params.h"

namespace flashattn::cuda {

struct SplitKv {
  int count = 1;         // 1: blocks write out and lse directly
  float* o = nullptr;    // (count, batch, heads_q, seqlen_q, head_dim)
  float* lse = nullptr;  // (count, batch, heads_q, seqlen_q)

  // Element offset of (split, b, h, row) in lse; times head_dim in o.
  FLASHATTN_HOST_DEVICE int64_t row_index(int split, int b, int h, int row, const Sizes& s) const {
    return ((int64_t(split) * s.batch + b) * s.heads_q + h) * s.seqlen_q + row;
  }
};

// How many splits fill the device: blocks_per_split blocks already run, each
// query tile has up to key_tiles key tiles (each split keeps at least two).
int choose_splits(int64_t blocks_per_split, int key_tiles, int device_index);

// Partial buffers for `count` splits, allocated on p.stream and freed there
// (after the merge) when this goes out of scope.
class SplitWorkspace {
 public:
  SplitWorkspace(const AttnParams& p, int count);
  ~SplitWorkspace();
  SplitWorkspace(const SplitWorkspace&) = delete;
  SplitWorkspace& operator=(const SplitWorkspace&) = delete;
  const SplitKv& split() const { return split_; }

 private:
  SplitKv split_;
  void* stream_;
};

// Merges the partials into p.o and p.softmax.lse, on p.stream.
void merge_splits(const AttnParams& p, const SplitKv& split);

}  // namespace flashattn::cuda
