// The Hopper forward's tile scheduler and its parameters: which query tiles a
// block takes (one, or, persistent, several in rounds) in which order, and the
// key blocks each tile visits.
#pragma once

#include <cuda.h>

#include <type_traits>

#include <cub/block/block_scan.cuh>

#include "core/host_device.h"
#include "core/mask.h"
#include "core/params.h"
#include "core/variant.h"
#include "core/tail_split.h"
#include "cuda/common/fast_divisor.h"

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
  // m_blocks, batch · heads_q, heads_q and the GQA group as divisors for tile_at.
  FastDivisor by_m_blocks, by_heads, by_heads_q, by_group;
  int row_shift;     // tile m covers rows [m·kBlockM − row_shift, +kBlockM); see tile_row_shift
  int tiles;         // blocks of work: the query tiles (m_blocks · batch · heads_q), the split ones counted per part
  bool heads_fastest;  // tile order: see tile_at
  // A packed batch (core/seqlen.h; the kernels instantiated with kPacked):
  // the maps are over the tensors' own (1, total) rows, the sequences' places
  // and lengths are read from the prefix sums per tile, and each sequence
  // resolves the rule for its own lengths (sizes and mask: the longest, which
  // size the grid and order the tiles). out: where the rows that a TMA store
  // would carry past a sequence's end are written one by one. total_q: lse's
  // rows per head, (heads_q, total_q).
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  MaskRule rule;
  TensorRef out;
  int64_t total_q;
  // Packed: the count of query tiles that have rows, then those tiles,
  // heaviest first, each as batch · m_blocks + m_block (written by
  // order_packed_tiles_kernel); tile index i is entry i / heads_q, q head
  // i % heads_q. The grid holds every sequence's tiles up to the longest one's:
  // handed out in grid order they loaded the blocks unevenly, while the list,
  // without the empty tiles and with the heavy ones first, loads them as the
  // dense causal order does.
  const int32_t* packed_tiles;
  // The grid's last tiles split by keys (core/tail_split.h; the kernels
  // of kSplitsTail alone): each split tile's parts write their warpgroups'
  // partial results into part_results (tail_merge.cuh's layout) and count
  // themselves in part_arrivals (per split tile and consumer, zeroed before the
  // launch); the last to arrive writes the tile.
  TailSplit tail;
  float4* part_results;
  int* part_arrivals;
};

// Whether a kernel may split its grid's last tiles by keys (TailSplit): the
// plain per-tile kernels of dense batches whose consumers own whole rows (not
// split by columns), and a merge's two accumulator arrays fit beside the
// rest (v's bucket at most 128 columns). The launch splits only where every
// tile walks every key block (no causal mask).
template <class Tr, class Variant, bool kPacked>
inline constexpr bool kSplitsTail = !kPacked && !Tr::kPersistent && Tr::kCluster == 1 &&
                                    !Tr::kSplitColumns && Tr::kHeadDimV <= 128 &&
                                    std::is_same_v<Variant, NoVariant>;

// A query tile and the key blocks it visits.
struct Tile {
  int m_block, batch, head_q, head_kv;
  int row0;     // its first query row, negative when the tile starts before row 0
  int n_first;  // key blocks [n_first, n_end) hold a key visible to some row of the tile
  int n_end;
  // Its sequence: where the sequence's rows and keys start along the tensors'
  // seqlen (0 dense), and its lengths. A packed tile at or past seqlen_q has
  // no rows (the grid is sized by the longest sequence).
  int q_row0, k_row0, seqlen_q, seqlen_k;
  // A split tile's part (KernelParams::tail): its place among the split tiles
  // (−1: not split) and which part; [n_first, n_end) is then the part's share.
  int tail = -1, part = 0;
  __device__ __forceinline__ bool has_rows() const { return row0 < seqlen_q; }
};

// Where a causal sequence's length is not a multiple of kBlockM, one tile is
// partly empty. Tiles shifted back by whole warpgroups (64 rows) leave that
// room before row 0 instead of after seqlen_q: the partial tile is then the
// first, which sees the fewest keys, instead of the last, which sees the most
// and would run them with idle warpgroups. The number of tiles stays the same.
template <int kBlockM>
FLASHATTN_HOST_DEVICE int tile_row_shift(bool bounded_above, int seqlen_q) {
  if (!bounded_above) return 0;
  const int room = (kBlockM - seqlen_q % kBlockM) % kBlockM;
  return 64 * (room / 64);
}

// The mask of tile t's rows: dense, the batch's, read from the parameters
// where it is used; packed, the rule resolved for t's sequence, into `own`.
template <bool kPacked>
__device__ __forceinline__ const RowMask& tile_mask(const KernelParams& p, const Tile& t,
                                                    RowMask& own) {
  if constexpr (!kPacked) return p.mask;
  own = resolve(p.rule, {t.seqlen_q, t.seqlen_k});
  return own;
}

// The key blocks that hold a key visible to some query row in [row0, row0 + rows):
// the last real row sees up to the last, the first real row from the first
// (core/mask.h; without kLowerEnds the walk starts at block 0). Empty when no
// row of them lies in [0, seqlen_q). The key ranges are the small forms
// throughout the kernels: wgmma_unsupported holds the sequences below
// RowMask::kSmallSeqlen, and the 64-bit forms' arithmetic and branches were a
// causal tile's largest set-up cost (docs/perf/cuda_wgmma.md, v4.31).
struct BlockSpan {
  int first, end;
};
template <class Tr, bool kLowerEnds>
__device__ __forceinline__ BlockSpan visible_key_blocks(const RowMask& mask, int row0, int rows) {
  const int last_row = min(row0 + rows, mask.seqlen_q) - 1;
  if (last_row < max(row0, 0)) return {0, 0};
  // Quotients of keys ≥ 0, unsigned (a shift).
  const int end = int(unsigned(mask.key_end_small(last_row) + Tr::kBlockN - 1) / Tr::kBlockN);
  if constexpr (!kLowerEnds) return {0, end};
  const int first = min(end, int(unsigned(mask.key_begin_small(max(row0, 0))) / Tr::kBlockN));
  return {first, end};
}

// Query tile m_block of packed sequence `batch`, for q head head_q; it has no
// rows (Tile::has_rows) where the sequence is shorter.
template <class Tr, bool kLowerEnds>
__device__ __forceinline__ Tile packed_tile(const KernelParams& p, int batch, int m_block,
                                            int head_q, int head_kv) {
  const int q_row0 = p.cu_seqlens_q[batch], k_row0 = p.cu_seqlens_k[batch];
  Tile t{m_block, batch, head_q, head_kv, 0, 0, 0,
         q_row0, k_row0, p.cu_seqlens_q[batch + 1] - q_row0, p.cu_seqlens_k[batch + 1] - k_row0};
  const RowMask mask = resolve(p.rule, {t.seqlen_q, t.seqlen_k});
  t.row0 = m_block * Tr::kBlockM - tile_row_shift<Tr::kBlockM>(mask.bounded_above, t.seqlen_q);
  const BlockSpan blocks = visible_key_blocks<Tr, kLowerEnds>(mask, t.row0, Tr::kBlockM);
  t.n_first = blocks.first;
  t.n_end = blocks.end;
  return t;
}

// The index-th query tile. Causal tiles near the end of the sequence see the
// most keys, so they start first. With heads_fastest (causal, few heads, few
// waves; see launch.cuh), consecutive tiles are the same query tile of
// neighbouring heads: every head's heaviest tile, then every head's next, so
// the last wave holds only light tiles. Otherwise consecutive tiles are
// neighbouring query tiles of one head (heaviest first if causal), and the
// blocks running at once share its K and V in L2. Packed, the list's tiles
// (KernelParams::packed_tiles), heaviest first, the q heads of each fastest.
// kSplitsTail: index counts blocks of work, each split tile's parts in turn
// after the whole tiles; a part takes its share of the tile's key blocks.
template <class Tr, bool kLowerEnds, bool kPacked, bool kSplitsTail = false>
__device__ __forceinline__ Tile tile_at(const KernelParams& p, int index) {
  const Sizes& s = p.sizes;
  if constexpr (kPacked) {
    int head_q, m_block;
    const int entry = p.packed_tiles[1 + p.by_heads_q.divmod(index, head_q)];
    const int batch = p.by_m_blocks.divmod(entry, m_block);
    return packed_tile<Tr, kLowerEnds>(p, batch, m_block, head_q, p.by_group.div(head_q));
  }
  TailBlock split{index, -1, 0};
  if constexpr (kSplitsTail) {
    split = p.tail.at(index);
    index = split.block;
  }
  int bh, m_block;
  if (p.heads_fastest) {
    m_block = p.m_blocks - 1 - p.by_heads.divmod(index, bh);
  } else {
    bh = p.by_m_blocks.divmod(index, m_block);
    if (p.mask.bounded_above) m_block = p.m_blocks - 1 - m_block;
  }
  int head_q;
  const int batch = p.by_heads_q.divmod(bh, head_q), head_kv = p.by_group.div(head_q);
  const int row0 = m_block * Tr::kBlockM - p.row_shift;
  BlockSpan blocks = visible_key_blocks<Tr, kLowerEnds>(p.mask, row0, Tr::kBlockM);
  if (split.tail >= 0) {
    const int span = blocks.end - blocks.first;
    blocks = {blocks.first + p.tail.share_begin(span, split.part),
              blocks.first + p.tail.share_begin(span, split.part + 1)};
  }
  return {m_block, batch, head_q, head_kv, row0, blocks.first, blocks.end,
          0, 0, s.seqlen_q, s.seqlen_k, split.tail, split.part};
}

// A block's tiles: one per block (gridDim.x = tiles), or, persistent, round r
// gives the r-th run of gridDim.x tiles one to each block, the runs walked in
// alternating directions. Tiles come heaviest first (causal), so a block that
// takes a run's heaviest tile takes the next run's lightest; the launch makes
// gridDim.x a multiple of the per-head tile count where tiles repeat per head.
// The tiles to run: the grid's, or the packed list's.
template <bool kPacked>
__device__ __forceinline__ int tile_count(const KernelParams& p) {
  if constexpr (kPacked) return p.packed_tiles[0] * p.sizes.heads_q;
  return p.tiles;
}

template <bool kPacked, class F>
__device__ __forceinline__ void for_each_tile(const KernelParams& p, F&& f) {
  const int blocks = int(gridDim.x);
  const int tiles = tile_count<kPacked>(p);
  for (int round = 0;; ++round) {
    const int index =
        round * blocks + ((round & 1) ? blocks - 1 - int(blockIdx.x) : int(blockIdx.x));
    if (index >= tiles) return;
    f(index);
  }
}

// The packed query tiles that have rows (KernelParams::packed_tiles), heaviest
// (most key blocks) first: a counting sort in one block. Tiles of equal weight
// come in any order; each tile's result is the same whichever block runs it.
constexpr int kOrderThreads = 1024;
constexpr int kWeightBins = 1024;  // weights from 0 key blocks; the last bin holds all above

// Tile m_block of sequence batch, with rows: its bin; -1 past its sequence's rows.
template <class Tr, bool kLowerEnds>
__device__ __forceinline__ int weight_bin(const KernelParams& p, int batch, int m_block) {
  const Tile t = packed_tile<Tr, kLowerEnds>(p, batch, m_block, 0, 0);
  return t.has_rows() ? min(t.n_end - t.n_first, kWeightBins - 1) : -1;
}

template <class Tr, bool kLowerEnds>
__global__ void __launch_bounds__(kOrderThreads) order_packed_tiles_kernel(const KernelParams p,
                                                                          int32_t* list) {
  __shared__ int bins[kWeightBins];  // tiles per weight, then each bin's next place
  using Scan = cub::BlockScan<int, kOrderThreads>;
  __shared__ typename Scan::TempStorage scan;
  static_assert(kWeightBins == kOrderThreads, "one bin per thread in the scan");
  bins[threadIdx.x] = 0;
  __syncthreads();
  // A warp per sequence, its lanes over the sequence's tiles; twice: count, then place.
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const auto each_tile = [&](auto&& take) {
    for (int b = warp; b < p.sizes.batch; b += kOrderThreads / 32)
      for (int m = lane; m < p.m_blocks; m += 32) {
        const int bin = weight_bin<Tr, kLowerEnds>(p, b, m);
        if (bin < 0) break;  // the later tiles lie past the sequence's rows too
        take(b * p.m_blocks + m, bin);
      }
  };
  each_tile([&](int, int bin) { atomicAdd(&bins[bin], 1); });
  __syncthreads();
  // Heaviest first: thread i scans bin kWeightBins - 1 - i.
  const int bin = kWeightBins - 1 - int(threadIdx.x);
  int count = bins[bin], start, total;
  Scan(scan).ExclusiveSum(count, start, total);
  __syncthreads();
  bins[bin] = start;
  if (threadIdx.x == 0) list[0] = total;
  __syncthreads();
  each_tile([&](int entry, int bin) { list[1 + atomicAdd(&bins[bin], 1)] = entry; });
}

}  // namespace flashattn::cuda::sm90
