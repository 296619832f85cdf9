// Dropout (core/dropout.h) on a warp's probabilities in the accumulator layout
// of mma.sync m16n8 and of wgmma: lane (g, t) holds, per 16-row slice, rows
// g and g + 8 and, per n8 column nt, keys 8·nt + 2t and 8·nt + 2t + 1. Two
// adjacent n8 columns (one 16-key block) of one slice are exactly one group of
// the generator's: one Philox call per 8 of a thread's elements.
#pragma once

#include <cstdint>

#include "core/dropout.h"

namespace flashattn::cuda {

// visit(nt, e, kept) for element e (2·h + e of row half h) of n8 column nt,
// nt < 2·kPairs, of one 16-row slice; row: this thread's row of half 0 (g of
// the slice), key: its key of column 0 (2t of a 16-key block), counted within
// the sequence. A slice that starts at a multiple of 16 rows makes one call
// per pair of columns; one shifted by 8 or more (the Hopper forward's tiles
// under a bottom-right alignment) two, its rows lying in two groups.
template <int kPairs, typename Visit>
__device__ __forceinline__ void for_each_kept(const DropoutRows& d, int64_t row, int64_t key,
                                              Visit&& visit) {
  const bool one_group = (row & 8) == 0;  // rows row and row + 8 share a group
#pragma unroll
  for (int pair = 0; pair < kPairs; ++pair) {
    const Philox4 w0 = d.group(row, key + 16 * pair);
    const Philox4 w1 = one_group ? w0 : d.group(row + 8, key + 16 * pair);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int half = int(((row + 8 * h) >> 3) & 1);  // the row's half of its group
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          visit(2 * pair + n, 2 * h + e, d.kept(h ? w1 : w0, 4 * half + 2 * n + e));
    }
  }
}

// Zeroes the dropped probabilities of mma.sync fragments s[mt][nt][4] whose
// slice mt starts at row row0 + 16·mt (row0: the warp's first row within the
// sequence) and whose column 0 is key key0 (a multiple of 16).
template <int kMT, int kNT>
__device__ __forceinline__ void drop_fragments(const DropoutRows& d, int64_t row0, int64_t key0,
                                               float (&s)[kMT][kNT][4]) {
  static_assert(kNT % 2 == 0, "dropout groups span two n8 columns");
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
    for_each_kept<kNT / 2>(d, row0 + 16 * mt + g, key0 + 2 * t, [&](int nt, int e, bool kept) {
      if (!kept) s[mt][nt][e] = 0.0f;
    });
}

// visit(j, e, kept) over a transposed fragment (Sᵀ: keys as its rows, the
// Hopper backward's): lane (g, t) holds keys key and key + 8 (e / 2) and, per
// n8 column j < 2·kPairs, queries 8·j + 2t + e % 2. query: this thread's query
// of column 0 (2t of a 16-aligned tile); key: its key of half 0 (g of a
// 16-aligned block). Its four elements in queries {i, i + 8} of one key parity
// are half a group, whose other half lane ^ 4 (g ^ 1, the other parity)
// holds: of the two groups of a column pair (query parity 0 and 1) each of the
// two lanes makes one call and passes it to the other by shuffles, so a warp
// makes one call per 8 elements, as in the row layout. Every lane of the warp
// takes part.
template <int kPairs, typename Visit>
__device__ __forceinline__ void for_each_kept_transposed(const DropoutRows& d, int64_t query,
                                                         int64_t key, Visit&& visit) {
  const int parity = int(key & 1);
#pragma unroll
  for (int pair = 0; pair < kPairs; ++pair) {
    const Philox4 mine = d.group(query + 16 * pair + parity, key);
    Philox4 theirs;
#pragma unroll
    for (int word = 0; word < 4; ++word)
      theirs.x[word] = __shfl_xor_sync(0xffffffffu, mine.x[word], 4);
#pragma unroll
    for (int odd = 0; odd < 2; ++odd) {
      const Philox4& w = odd == parity ? mine : theirs;
#pragma unroll
      for (int qh = 0; qh < 2; ++qh)
#pragma unroll
        for (int kh = 0; kh < 2; ++kh)
          visit(2 * pair + qh, 2 * kh + odd, d.kept(w, 4 * qh + 2 * kh + parity));
    }
  }
}

// The keep decisions of a wgmma fragment of one warp's 16 rows, s[4·nt + e] of
// kValues: bit 4·nt + e set where kept. row: this thread's row of half 0, key:
// its key of column 0. The Hopper kernels make them before they wait for the
// wgmma that computes the fragment (the generator's integer work is then free
// to be scheduled under it).
template <int kValues>
__device__ __forceinline__ uint64_t kept_bits(const DropoutRows& d, int64_t row, int64_t key) {
  static_assert(kValues % 8 == 0 && kValues <= 64, "two n8 columns a group, 64 bits");
  uint64_t bits = 0;
  for_each_kept<kValues / 8>(d, row, key, [&](int nt, int e, bool kept) {
    bits |= uint64_t(kept) << (4 * nt + e);
  });
  return bits;
}

// The same for the transposed fragment (for_each_kept_transposed): bit 4·j + e.
template <int kValues>
__device__ __forceinline__ uint64_t kept_bits_transposed(const DropoutRows& d, int64_t query,
                                                         int64_t key) {
  static_assert(kValues % 8 == 0 && kValues <= 64, "two n8 columns a pair, 64 bits");
  uint64_t bits = 0;
  for_each_kept_transposed<kValues / 8>(d, query, key, [&](int j, int e, bool kept) {
    bits |= uint64_t(kept) << (4 * j + e);
  });
  return bits;
}

}  // namespace flashattn::cuda
