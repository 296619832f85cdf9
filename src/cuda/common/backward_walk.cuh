// The walk every tensor-core backward's key-tile block makes (cuda_mma's and
// cuda_wgmma's): which key tile of which (batch, kv head) a block owns, the
// query tiles of each query head of its GQA group that see those keys, and the
// order of the grid that keeps a head's key tiles side by side in L2. Also the
// global-memory primitives of their dQ sums: cuda_mma's 16-byte reduction and
// the release add and acquire load of the deterministic mode's turn counters.
#pragma once

#include <cstdint>

#include "core/mask.h"
#include "core/params.h"
#include "core/tail_split.h"

namespace flashattn::cuda {

// dst[0..3] += x in global memory: one 16-byte reduction on sm_90.
__device__ __forceinline__ void add_four(float* dst, const float (&x)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(dst), make_float4(x[0], x[1], x[2], x[3]));
#else
#pragma unroll
  for (int e = 0; e < 4; ++e) atomicAdd(dst + e, x[e]);
#endif
}

// *p += v as a release at GPU scope: this thread's earlier writes (and those it
// has observed) are performed before the add is seen. One instruction, where a
// fence followed by a relaxed atomic made two.
__device__ __forceinline__ void add_release(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// What the block walks: steps = group × (m_end − m_first) query tiles of the
// query heads [hq_first, hq_end) of its GQA group. In the default order each
// head in turn, from query tile m_first to m_end − 1; falling (deterministic
// mode where dQ's adds go from the first key tile up, adds_from_first below),
// query tiles from m_end − 1 down to m_first, the group's heads innermost.
// (Starting each key tile's walk at a different query tile, so that the key
// tiles of a head do not add into the same dQ rows at once, gained nothing and
// cost 12% at head dim 256 under a causal mask, v4; with a head's key tiles side
// by side, without a causal mask, it cost up to 3% at d = 128 and gained up to
// 2% at 256, v6: docs/perf/cuda_mma_backward.md. The falling order as the
// default cost 1-3% under a causal mask at d128 and d256, where all of a head's
// key tiles then reach its last query tile at once: cuda_wgmma_backward.md, v12.)
// A split tail (TailSplit, the default order alone): the block walks steps
// step0 … step0 + steps − 1 of its key tile's walk, and tail names the tile
// among the split ones (−1: the block walks the whole tile).
struct QueryTile;
struct BackwardWalk {
  int b, hk, n;
  int key0, keys;  // first key of the tile, and how many exist
  int m_first, m_end, steps;
  int hq_first, hq_end;
  bool falling;
  int step0 = 0, tail = -1;
  __device__ __forceinline__ QueryTile first() const;
};

// The backward's costs of a split tail (core/tail_split.h), in steps: a
// block's own, K and V in and dK and dV out, about 1.5 steps; a part's fp32
// adds of dK and dV and the last part's read-back about 0.5 more. Walks under
// 128 steps are not split: there the blocks' ends spread over the last waves,
// so the last one is not half empty, and splits at 16–64 steps read 0.95–0.99×
// (d128 and d256, H200; 128 steps 1.01×, 256 steps 1.04×).
inline constexpr TailCosts kBackwardTailCosts{1.5, 0.5, 1, 128};

// A step of the walk: query head hq, query tile m.
struct QueryTile {
  int hq, m;
  // The step after this one (no division per step).
  __device__ __forceinline__ QueryTile next(const BackwardWalk& w) const {
    if (w.falling) return hq + 1 < w.hq_end ? QueryTile{hq + 1, m} : QueryTile{w.hq_first, m - 1};
    return m + 1 < w.m_end ? QueryTile{hq, m + 1} : QueryTile{hq + 1, w.m_first};
  }
};

__device__ __forceinline__ QueryTile BackwardWalk::first() const {
  if (falling) return QueryTile{hq_first, m_end - 1};
  const int tiles = m_end - m_first;  // > 0 where step0 > 0
  return step0 == 0 ? QueryTile{hq_first, m_first}
                    : QueryTile{hq_first + step0 / tiles, m_first + step0 % tiles};
}

// The block's key tile n and (sequence, kv head). The grid cuts each head's key
// tiles into runs of `chunk` (the last one shorter) and goes through run 0 of
// every head, then run 1, and so on; inside a run n is the fastest index. So
// the key tiles of a run are neighbours in the grid and share the head's Q and
// dO tiles and its dQ sums in L2 (FlashAttention-2 runs a head's key tiles side
// by side for that). With the key tile as the slowest index they ran waves
// apart, and each read Q and dO and added dQ through HBM (+3–50%, the most at
// short sequences: docs/perf/cuda_mma_backward.md, v6). chunk: all key tiles of
// a head without a causal mask; 8 under one, so that the key tiles with the
// longest walks (the first) still start first and no head's longest walk is left
// for the last wave.
//
// Deterministic mode (turn_group > 0): each query tile's dQ takes its key
// tiles' adds in a fixed order (dq_adds_before), so a key tile waits for those
// before it in that order, and the grid starts those first. The heads go in
// groups of turn_group (DqSums sizes them to fit their sums, Q and dO in L2)
// with chunk 1 inside a group: key tile n of the group's heads, then the next.
// - Adds from the last key tile down (adds_from_first false): the grid starts
//   a group's key tiles from the last one down, and each walks its query tiles
//   first to last. A walk's first query tile m_first grows with n and, without
//   a window's lower end, its length m_end − m_first does not, so tile n + 1,
//   started no later than n, reaches each (query head, query tile) at a step no
//   later than n does, and n waits little. But under a causal mask a slice's
//   longest walks (its first key tiles) start last, a tail where a group holds
//   one slice.
// - Adds from the first key tile up (adds_from_first): the grid starts the key
//   tiles from the first, and each walks falling. Both ends of a walk grow with
//   n, so every key tile reaches (head, query tile) at step
//   (m_end − 1 − m)·group + head, the same for every n (or a later one for a
//   larger n, under a window): a key tile waits for its predecessor's round
//   trip alone, and the longest walks start first.
// The groups serve both orders: without them, in the default's runs (a slice's
// key tiles started together, the next run a wave later), every run at short
// sequences was a fresh chain waiting one round trip a link at its first
// query tile (d128, 1024 keys, causal: 1.21× the default's time against 1.09×
// in groups; cuda_wgmma_backward.md, v16). Groups twice as large read 1.1–1.4×
// slower at d128 and d256, their sums, Q and dO beyond L2.
// (In key-tile order with rising walks, a causal key tile n reached a query
// tile two or more steps after n + 1 did and waited at every step; and with
// chunk 1 over every head, each wave read all of Q and dO and added all of dQ
// through HBM: 1.3–2.0× the default's time.)
template <int kBlockM, int kBlockN>
__device__ __forceinline__ BackwardWalk backward_walk(const BwdParams& p, int query_tiles,
                                                      int turn_group, bool adds_from_first,
                                                      TailSplit split = {}) {
  const Sizes& s = p.sizes;
  // The block of the unsplit grid, and which part of it this one is.
  const TailBlock cut = split.at(int(blockIdx.x));
  const int grid_block = cut.block;
  const int slices = s.batch * s.heads_kv;
  const int key_tiles = (s.seqlen_k + kBlockN - 1) / kBlockN;
  const int grouped = turn_group > 0 ? turn_group : slices;  // slices per group
  const int chunk = turn_group > 0 ? 1 : p.mask.bounded_above ? min(8, key_tiles) : key_tiles;
  const int group = grid_block / (grouped * key_tiles);
  const int group_slices = min(grouped, slices - group * grouped);
  const int block = grid_block - group * grouped * key_tiles;
  const int whole_runs = key_tiles / chunk * chunk;  // key tiles in full runs, per head
  int slice, n;
  if (block < whole_runs * group_slices) {
    const int run = block / (chunk * group_slices), in_run = block % (chunk * group_slices);
    slice = in_run / chunk;
    n = run * chunk + in_run % chunk;
  } else {
    const int rest = key_tiles - whole_runs, in_run = block - whole_runs * group_slices;
    slice = in_run / rest;
    n = whole_runs + in_run % rest;
  }
  BackwardWalk w;
  w.falling = turn_group > 0 && adds_from_first;
  w.n = turn_group > 0 && !adds_from_first ? key_tiles - 1 - n : n;
  slice += group * grouped;
  w.b = slice / s.heads_kv;
  w.hk = slice % s.heads_kv;
  w.key0 = w.n * kBlockN;
  const Sequence seq = sequence(p, w.b);  // packed: a tile past its keys has keys <= 0, no steps
  w.keys = min(kBlockN, seq.seqlen_k - w.key0);
  const RowRange rows = row_mask(p, seq).rows_seeing(w.key0, w.keys);
  w.m_first = rows.begin / kBlockM;
  w.m_end = rows.end > rows.begin
                ? min(query_tiles, (rows.end + kBlockM - 1) / kBlockM)
                : w.m_first;
  w.steps = (w.m_end - w.m_first) * s.group();
  w.hq_first = w.hk * s.group();
  w.hq_end = w.hq_first + s.group();
  if (cut.tail >= 0) {
    w.step0 = split.share_begin(w.steps, cut.part);
    w.steps = split.share_begin(w.steps, cut.part + 1) - w.step0;
    w.tail = cut.tail;
  }
  return w;
}

// Deterministic mode: how many key tiles add into the dQ rows of the query tile
// at row0 before the walk's key tile w.n does. The tiles that see its rows are
// blocks.begin … blocks.end − 1 (both ends of a row's key range grow with the
// row, so the first row bounds where they begin and the last where they end);
// falling, those below n add first, else those above n. The grid starts them
// before n (backward_walk), so the wait for them ends.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ int dq_adds_before(const RowMask& mask, int row0, const BackwardWalk& w) {
  const int rows = min(kBlockM, mask.seqlen_q - row0);
  const KeyBlocks blocks = mask.key_blocks(row0, rows, kBlockN);
  return w.falling ? w.n - blocks.begin : blocks.end - 1 - w.n;
}

}  // namespace flashattn::cuda
