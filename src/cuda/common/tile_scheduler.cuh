// The tile scheduler of the kernels that take one query tile per block (the
// generic and sm_80 kernels; Hopper's persistent scheduler is sm90/scheduler.cuh).
// blockIdx.x walks (batch, q head, query tile) with the query tile fastest, so
// neighbouring blocks share K and V in L2, and the query tiles of one head run
// last to first: under a causal mask the longest rows start first. blockIdx.y is
// the slice of output columns (head dims wider than one block) or, for kernels
// that split the keys, the key split (split_key_blocks).
#pragma once

#include <algorithm>

#include "core/error.h"
#include "core/mask.h"
#include "cuda/common/fast_divisor.h"

namespace flashattn::cuda {

// The divisors that take blockIdx.x to a tile's coordinates (tile_coord), set
// by the launch: a block's set-up runs while its other threads wait at the
// first barrier, and a division by a runtime value is some twenty instructions.
struct TileDivisors {
  FastDivisor m_blocks, heads_q, group;
};

struct TileGrid {
  int m_blocks;  // query tiles per (batch, q head)
  dim3 dims;
  TileDivisors divisors;
};

// Query tiles of block_m rows per (batch, q head), the last one possibly partial.
inline int query_tiles(const Sizes& s, int block_m) { return (s.seqlen_q + block_m - 1) / block_m; }

// Slices of slice_cols output columns: out's head_dim (v's) in slices.
inline TileGrid make_tile_grid(const Sizes& s, int block_m, int slice_cols, const char* backend) {
  const int m_blocks = query_tiles(s, block_m);
  const int64_t blocks = int64_t(m_blocks) * s.batch * s.heads_q;
  const int64_t slices = (s.head_dim_v + slice_cols - 1) / slice_cols;
  if (blocks > 0x7FFFFFFF || slices > 65535)
    fail(Status::unsupported, "q: shape too large for ", backend, "'s grid");
  // (An empty problem's zeros as ones: its grid is never launched.)
  const int group = s.heads_kv > 0 ? std::max(1, s.group()) : 1;
  const TileDivisors divisors{FastDivisor(std::max(1, m_blocks)),
                              FastDivisor(std::max(1, s.heads_q)), FastDivisor(group)};
  return {m_blocks, dim3{unsigned(blocks), unsigned(slices)}, divisors};
}

// This block's query tile, batch, q head and the kv head it reads (GQA).
struct TileCoord {
  int m_block, b, hq, hk;
};

__device__ __forceinline__ TileCoord tile_coord(const TileDivisors& d) {
  int m, hq;
  const int bh = d.m_blocks.divmod(int(blockIdx.x), m);
  const int b = d.heads_q.divmod(bh, hq);
  return {int(d.m_blocks.divisor) - 1 - m, b, hq, d.group.div(hq)};
}

// Key blocks [first, end) that one block walks.
struct BlockRange {
  int first, end;
};

// The key blocks key split blockIdx.y of `splits` walks: an equal share of the
// tile's [first, end), in order (empty for a split past the last). kLowerEnds:
// the kernel's Variant's (core/variant.h), so that a window's splits share the
// blocks its rows see, not those from block 0.
template <bool kLowerEnds>
__device__ __forceinline__ BlockRange split_key_blocks(const KeyBlocks& blocks, int splits) {
  const int begin = blocks.first<kLowerEnds>();
  const int per_split = (blocks.end - begin + splits - 1) / splits;
  const int first = begin + int(blockIdx.y) * per_split;
  return {first, min(blocks.end, first + per_split)};
}

}  // namespace flashattn::cuda
