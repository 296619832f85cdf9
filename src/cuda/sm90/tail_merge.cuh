// The Hopper forward's split tail (core/tail_split.h): a part of a split
// tile writes each consumer warpgroup's partial result (its unnormalised
// accumulators and its rows' running maxima and sums) to global memory and
// counts itself; the part that arrives last for a warpgroup reads the others'
// back, merges them into its own by the online softmax's rescale, and writes
// the rows through the ordinary epilogue. The split runs where every row sees
// every key (kSplitsTail, launch.cuh), so a warpgroup whose rows see no key
// in one part (rows past seqlen_q) sees none in any, and writes nothing that
// reaches the output: it takes the ordinary epilogue and no merge.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/softmax.h"
#include "cuda/common/mma_16bit.cuh"
#include "cuda/sm90/epilogue.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/scheduler.cuh"

namespace flashattn::cuda::sm90 {

// A warpgroup's partial result: kHeadDimV / 8 float4 chunks of each thread's
// accumulators (a consumer of whole rows holds every column), then one of
// (m₀, m₁, l₀, l₁), chunk k of all 128 threads side by side (coalesced);
// slots ordered (split tile, part, consumer).
template <class Tr>
inline constexpr int kPartChunks = Tr::kHeadDimV / 8 + 1;

template <class Tr>
size_t part_results_bytes(const TailSplit& split, int64_t tiles) {
  return size_t(tiles - split.first) * split.parts * Tr::kConsumers * 128 * kPartChunks<Tr> * 16;
}

template <class Tr>
__device__ __forceinline__ float4* part_slot(const KernelParams& p, int tail, int part,
                                             int warpgroup) {
  const int64_t slot = (int64_t(tail) * p.tail.parts + part) * Tr::kConsumers + warpgroup;
  return p.part_results + slot * kPartChunks<Tr> * 128 + int(threadIdx.x) % 128;
}

// The warpgroup's rows of split tile t: its part written out and counted;
// the last part to arrive merges and writes them (epilogue), the others
// leave.
// (kAcc, acc's size, is deduced: the call is compiled in every kernel, whose
// consumers' accumulators may be other sizes, but runs only in those that split.)
template <typename T, class Tr, int kAcc>
__device__ __forceinline__ void finish_tail_part(const KernelParams& p, const Tile& t,
                                                 const RowMask& mask, uint8_t* smem,
                                                 const float (&acc)[kAcc],
                                                 const float (&row_max)[2],
                                                 const float (&row_sum)[2], const FragmentCoord& at,
                                                 int warpgroup, int warp, int lane) {
  static_assert(!Tr::kSplitColumns && kAcc == Tr::kHeadDimV / 2, "a consumer of whole rows");
  constexpr int kChunks = Tr::kHeadDimV / 8;
  float merged[kAcc], m[2], l[2];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) merged[i] = acc[i];
#pragma unroll
  for (int half = 0; half < 2; ++half) m[half] = row_max[half], l[half] = row_sum[half];
  float4* own = part_slot<Tr>(p, t.tail, t.part, warpgroup);
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
    own[128 * k] = make_float4(merged[4 * k], merged[4 * k + 1], merged[4 * k + 2],
                               merged[4 * k + 3]);
  own[128 * kChunks] = make_float4(m[0], m[1], l[0], l[1]);
  if (!arrive_last(p.part_arrivals + t.tail * Tr::kConsumers + warpgroup, p.tail.parts,
                   kEpilogueBarrier + warpgroup, 128, int(threadIdx.x) % 128 == 0))
    return;
  const float c = p.scale_log2;
  for (int part = 0; part < p.tail.parts; ++part) {
    if (part == t.part) continue;
    const float4* other = part_slot<Tr>(p, t.tail, part, warpgroup);
    float4 x[kChunks];
#pragma unroll
    for (int k = 0; k < kChunks; ++k) x[k] = __ldcg(other + 128 * k);
    const float4 stats = __ldcg(other + 128 * kChunks);
    const float other_max[2] = {stats.x, stats.y}, other_sum[2] = {stats.z, stats.w};
    float own_scale[2], other_scale[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float m_new = fmaxf(m[half], other_max[half]);
      const float m_scaled = exponent_max_c(m_new, c);
      own_scale[half] = fast_exp2(m[half] * c - m_scaled);
      other_scale[half] = fast_exp2(other_max[half] * c - m_scaled);
      l[half] = l[half] * own_scale[half] + other_sum[half] * other_scale[half];
      m[half] = m_new;
    }
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const float xs[4] = {x[k].x, x[k].y, x[k].z, x[k].w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2;  // element 4k + e: row at.row0 + 8 · (e / 2)
        merged[4 * k + e] = merged[4 * k + e] * own_scale[half] + xs[e] * other_scale[half];
      }
    }
  }
  epilogue<T, Tr, false, false, 0>(p, t, mask, smem, merged, m, l, false, at, warpgroup, warp,
                                   lane, 1.0f);
}

}  // namespace flashattn::cuda::sm90
