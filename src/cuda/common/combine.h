// Split-KV: the keys of a query tile split over several blocks, for grids too
// small to fill the GPU. Each split writes its rows' output normalised by its
// own sum, with that sum's lse (a row that saw no key in the split: 0 and −inf),
// and the combine merges them (core/softmax.h, lse_max and partial_weight):
//   lse = ln Σ_s e^(lse_s),   out = Σ_s e^(lse_s − lse) · out_s.
// Any kernel can split its keys: it takes a KeySplit, walks the key blocks
// split_key_blocks() gives it (cuda/common/tile_scheduler.cuh), and writes
// into KeySplit::out and lse when count > 1.
#pragma once

#include <cstddef>

#include "core/params.h"
#include "cuda/common/scratch.h"

namespace flashattn::cuda {

inline constexpr int kMaxKeySplits = 128;  // the merge's limit
// cuda_f16x3's own cap (its kernels were tuned with it; the decode kernel goes to kMaxKeySplits).
inline constexpr int kF16x3MaxKeySplits = 8;

struct KeySplit {
  int count = 1;          // 1: the kernel writes p.o and p.softmax.lse itself
  float* out = nullptr;   // [split][batch][q head][row][head_dim_v]
  float* lse = nullptr;   // [split][batch][q head][row]
  // The splits of a tile are one thread-block cluster (sm_90) and merge there,
  // through distributed shared memory, writing p.o and p.softmax.lse; out and
  // lse are not used.
  bool in_cluster = false;
};

inline constexpr int kMaxClusterSplits = 16;  // the largest cluster sm_90 takes (non-portable)

// out and lse of p from the count partial results (queued on p.stream).
void merge_key_splits(const AttnParams& p, const KeySplit& split);
// Whether the merge of `splits` splits of s fits its grid (under 2^31 threads,
// for its 32-bit index arithmetic).
bool merge_fits(const Sizes& s, int splits);

// Runs launch(split) over `splits` key splits: with one, the kernel writes p's
// output itself; with more, it writes partials into scratch memory, merged after.
// A problem whose merge would not fit runs unsplit (it has rows enough to fill
// the GPU without splits).
template <typename Launch>
void run_key_splits(const AttnParams& p, int splits, Launch&& launch) {
  if (splits <= 1 || !merge_fits(p.sizes, splits)) {
    launch(KeySplit{});
    return;
  }
  const Sizes& s = p.sizes;
  const size_t rows = size_t(splits) * s.batch * s.heads_q * s.seqlen_q;
  Scratch scratch(rows * (s.head_dim_v + 1) * sizeof(float), p.device_index, p.stream);
  KeySplit split{splits, static_cast<float*>(scratch.data()), nullptr};
  split.lse = split.out + rows * s.head_dim_v;
  launch(split);
  merge_key_splits(p, split);
}

}  // namespace flashattn::cuda
