// Keys split over several blocks per query tile, for grids too small to fill
// the GPU: each split writes its rows' output normalised by its own sum, with
// that sum's lse, and merge_key_splits() combines them:
//   lse = ln Σ_s e^(lse_s),   out = Σ_s e^(lse_s − lse) · out_s.
#pragma once

#include <cstddef>

#include "cuda/common/scratch.h"
#include "params.h"

namespace flashattn::cuda {

inline constexpr int kMaxKeySplits = 8;

struct KeySplit {
  int count = 1;          // 1: the kernel writes p.o and p.softmax.lse itself
  float* out = nullptr;   // [split][batch][q head][row][head_dim]
  float* lse = nullptr;   // [split][batch][q head][row]
};

// A query tile's rows [row0, row0 + rows), and the key blocks [first, end) of
// block_n keys that key split blockIdx.y walks (last to first) out of those the
// tile sees. The tiles of one (batch, head) run last to first, so under a causal
// mask the longest rows start first. key_end_first: the keys row0 sees.
struct TileKeys {
  int row0, rows;
  int first, end;
  int key_end_first;
};

__device__ __forceinline__ TileKeys tile_keys(const AttnParams& p, int m_block, int m_blocks,
                                              int block_m, int block_n, const KeySplit& split) {
  const Sizes& s = p.sizes;
  TileKeys k;
  k.row0 = (m_blocks - 1 - m_block) * block_m;
  k.rows = min(block_m, s.seqlen_q - k.row0);
  const int visible = (p.mask.key_end(k.row0 + k.rows - 1, s.seqlen_k) + block_n - 1) / block_n;
  const int per_split = (visible + split.count - 1) / split.count;
  k.first = int(blockIdx.y) * per_split;
  k.end = min(visible, k.first + per_split);
  k.key_end_first = p.mask.key_end(k.row0, s.seqlen_k);
  return k;
}

// out and lse of p from the count partial results (queued on p.stream).
void merge_key_splits(const AttnParams& p, const KeySplit& split);

// Runs launch(split) over `splits` key splits: with one, the kernel writes p's
// output itself; with more, it writes partials into scratch memory, merged after.
template <typename Launch>
void run_key_splits(const AttnParams& p, int splits, Launch&& launch) {
  if (splits <= 1) {
    launch(KeySplit{});
    return;
  }
  const Sizes& s = p.sizes;
  const size_t rows = size_t(splits) * s.batch * s.heads_q * s.seqlen_q;
  Scratch scratch(rows * (s.head_dim + 1) * sizeof(float), p.device_index, p.stream);
  KeySplit split{splits, static_cast<float*>(scratch.data()), nullptr};
  split.lse = split.out + rows * s.head_dim;
  launch(split);
  merge_key_splits(p, split);
}

}  // namespace flashattn::cuda
