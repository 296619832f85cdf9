// The Hopper forward's tile scheduler and its parameters: which query tiles a
// block takes (one, or, persistent, several in rounds) in which order, and the
// key blocks each tile visits.
#pragma once

#include <cuda.h>

#include "core/mask.h"
#include "core/params.h"

namespace flashattn::cuda::sm90 {

// What the kernel needs of AttnParams, with the tensors as TMA descriptors.
struct KernelParams {
  CUtensorMap q, k, v, o;  // (head_dim, seqlen, heads, batch), 64-column boxes
  Sizes sizes;
  RowMask mask;      // the key range each query row sees (dense: one for the batch)
  ScoreParams scores;  // softcap and ALiBi (core/variant.h)
  DropoutParams dropout;  // core/dropout.h
  float* lse;
  float scale;       // for lse, in natural-log units
  float scale_log2;  // c = scale·log2(e)
  int m_blocks;      // query tiles per (batch, q head)
  int row_shift;     // tile m covers rows [m·kBlockM − row_shift, +kBlockM); see tile_row_shift
  int tiles;         // query tiles in all: m_blocks · batch · heads_q
  bool heads_fastest;  // tile order: see tile_at
};

// A query tile and the key blocks it visits.
struct Tile {
  int m_block, batch, head_q, head_kv;
  int row0;     // its first query row, negative when the tile starts before row 0
  int n_first;  // key blocks [n_first, n_end) hold a key visible to some row of the tile
  int n_end;
};

// The key blocks that hold a key visible to some query row in [row0, row0 + rows):
// the last real row sees up to the last, the first real row from the first
// (core/mask.h; without kLowerEnds the walk starts at block 0). Empty when no
// row of them lies in [0, seqlen_q).
struct BlockSpan {
  int first, end;
};
template <class Tr, bool kLowerEnds>
__device__ __forceinline__ BlockSpan visible_key_blocks(const KernelParams& p, int row0, int rows) {
  const int last_row = min(row0 + rows, p.sizes.seqlen_q) - 1;
  if (last_row < max(row0, 0)) return {0, 0};
  const int end = (p.mask.key_end(last_row) + Tr::kBlockN - 1) / Tr::kBlockN;
  if constexpr (!kLowerEnds) return {0, end};
  const int first = min(end, p.mask.key_begin(max(row0, 0)) / Tr::kBlockN);
  return {first, end};
}

// The index-th query tile. Causal tiles near the end of the sequence see the
// most keys, so they start first. With heads_fastest (causal, few heads, few
// waves; see launch.cuh), consecutive tiles are the same query tile of
// neighbouring heads: every head's heaviest tile, then every head's next, so
// the last wave holds only light tiles. Otherwise consecutive tiles are
// neighbouring query tiles of one head (heaviest first if causal), and the
// blocks running at once share its K and V in L2.
template <class Tr, bool kLowerEnds>
__device__ __forceinline__ Tile tile_at(const KernelParams& p, int index) {
  const Sizes& s = p.sizes;
  int bh, m_block;
  if (p.heads_fastest) {
    const int heads = s.batch * s.heads_q;
    bh = index % heads;
    m_block = p.m_blocks - 1 - index / heads;
  } else {
    bh = index / p.m_blocks;
    m_block = index % p.m_blocks;
    if (p.mask.bounded_above) m_block = p.m_blocks - 1 - m_block;
  }
  const int head_q = bh % s.heads_q;
  const int row0 = m_block * Tr::kBlockM - p.row_shift;
  const BlockSpan blocks = visible_key_blocks<Tr, kLowerEnds>(p, row0, Tr::kBlockM);
  return {m_block, bh / s.heads_q, head_q, head_q / s.group(), row0, blocks.first, blocks.end};
}

// A block's tiles: one per block (gridDim.x = tiles), or, persistent, round r
// gives the r-th run of gridDim.x tiles one to each block, the runs walked in
// alternating directions. Tiles come heaviest first (causal), so a block that
// takes a run's heaviest tile takes the next run's lightest; the launch makes
// gridDim.x a multiple of the per-head tile count where tiles repeat per head.
template <class F>
__device__ __forceinline__ void for_each_tile(const KernelParams& p, F&& f) {
  const int blocks = int(gridDim.x);
  for (int round = 0;; ++round) {
    const int index =
        round * blocks + ((round & 1) ? blocks - 1 - int(blockIdx.x) : int(blockIdx.x));
    if (index >= p.tiles) return;
    f(index);
  }
}

}  // namespace flashattn::cuda::sm90
