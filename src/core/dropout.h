// Dropout on the attention probabilities, reproducible from (seed, offset) and
// the same on every backend, so that a forward on one backend and a backward on
// another drop the same elements, and the backward regenerates the mask instead
// of storing it.
//
// Element (b, h, i, j) (batch index or sequence b, query head h, query row i and
// key j of its sequence) draws a 16-bit uniform u from Philox4x32-7 (a
// counter-based generator: the random of an element is a function of its
// coordinates, whatever thread or order computes it) and is kept when
// u >= threshold = round(p·2^16); a kept probability is scaled by
// 2^16 / (2^16 − threshold), so the output's expectation is the undropped one
// exactly (p is rounded to a multiple of 2^-16; p = 1 drops every element and
// scales by 0). The softmax's sum l and lse are the undropped ones:
//   out_i = Σ_j p_ij·z_ij·v_j,  z_ij = keep_ij·keep_scale,
// and the backward, with dp_ij = dO_i·v_j:
//   dV_j += p_ij·z_ij·dO_i,  ds_ij = p_ij·(z_ij·dp_ij − D_i),  D_i = dO_i·out_i.
//
// One Philox call gives 8 uniforms, those of a group of rows {i0, i0 + 8} and
// keys {j0, j0 + 1, j0 + 8, j0 + 9}, with i0 = 16⌊i/16⌋ + i mod 8 and j0 =
// 16⌊j/16⌋ + 2⌊(j mod 8)/2⌋: the elements a thread of mma.sync's or
// wgmma's accumulator layout holds in two adjacent 8-key columns, so the
// tensor-core forwards make one call per 8 of their elements. The call's
// counter is (key group, row group, the 64-bit stream offset + b·heads_q + h),
// its key the 64-bit seed; uniform e (0..7) of the group, element
// (i0 + 8⌊e/4⌋, j0 + 8⌊e/2⌋ mod 2·8 + e mod 2), is half e mod 2 of word ⌊e/2⌋.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace flashattn {

// Philox4x32 with kRounds rounds (Salmon et al., SC'11): four 32-bit words of
// counter, two of key.
struct Philox4 {
  uint32_t x[4];
};

template <int kRounds>
FLASHATTN_HOST_DEVICE Philox4 philox4x32(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t p0 = uint64_t(kM0) * c.x[0], p1 = uint64_t(kM1) * c.x[2];
    c = {{uint32_t(p1 >> 32) ^ c.x[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c.x[3] ^ k1,
          uint32_t(p0)}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// Dropout's rounds: 7, the fewest with which its authors found Philox4x32 to
// pass TestU01's BigCrush, and the count FlashAttention-2 (PyTorch's `flash`
// backend) uses for its dropout. The generator is most of dropout's cost in
// the tensor-core kernels, each round two 32×32→64-bit multiplies per call
// (docs/perf/variants.md, v12); 10, the authors' default with a margin, cost
// 3/7 more.
constexpr int kDropoutRounds = 7;

// A call's dropout, checked (AttnParams::dropout): p = 0 is none.
struct DropoutParams {
  float p = 0.0f;
  uint64_t seed = 0, offset = 0;
  uint32_t threshold = 0;   // round(p·2^16): an element is kept when its u >= threshold
  float keep_scale = 1.0f;  // 2^16 / (2^16 − threshold); 0 when p rounds to 1
  FLASHATTN_HOST_DEVICE bool on() const { return threshold > 0; }
  // keep_scale in F's own precision (the float64 references).
  template <typename F>
  F keep_scale_in() const {
    return threshold >= 65536u ? F(0) : F(65536) / (F(65536) - F(threshold));
  }
};

inline DropoutParams dropout_params(float p, uint64_t seed, uint64_t offset) {
  DropoutParams d;
  d.p = p;
  d.seed = seed;
  d.offset = offset;
  // Unchecked p (validation follows): NaN and p <= 0 give none, p >= 1 all dropped.
  d.threshold = p > 0.0f ? uint32_t(std::lround(std::fmin(double(p), 1.0) * 65536.0)) : 0u;
  d.keep_scale = d.threshold >= 65536u ? 0.0f : float(65536.0 / (65536.0 - d.threshold));
  return d;
}

// The dropout of one (batch index, query head): the group calls of its elements.
struct DropoutRows {
  uint32_t k0 = 0, k1 = 0;          // the seed
  uint32_t stream_lo = 0, stream_hi = 0;  // offset + b·heads_q + h
  // threshold·2^16 − 1: a uniform u in a word's high half is kept when the word
  // exceeds it, one in the low half when the word shifted up by 16 does (one
  // compare each, no extraction); 2^32 − 1 for threshold 2^16 keeps none.
  uint32_t limit = 0;

  // The 8 uniforms of the group holding (row, key), as 4 words (see the top).
  FLASHATTN_HOST_DEVICE Philox4 group(int64_t row, int64_t key) const {
    const uint32_t key_group = uint32_t((key >> 4) * 4 + ((key & 7) >> 1));
    const uint32_t row_group = uint32_t((row >> 4) * 8 + (row & 7));
    return philox4x32<kDropoutRounds>({{key_group, row_group, stream_lo, stream_hi}}, k0, k1);
  }
  // The index of (row, key) in its group.
  FLASHATTN_HOST_DEVICE static int element(int64_t row, int64_t key) {
    return int(((row >> 3) & 1) * 4 + ((key >> 3) & 1) * 2 + (key & 1));
  }
  // Whether uniform e of a group (half e % 2 of word e / 2) is at least the threshold.
  FLASHATTN_HOST_DEVICE bool kept(const Philox4& w, int e) const {
    const uint32_t word = w.x[e >> 1];
    return (e & 1 ? word : word << 16) > limit;
  }
  // One element's decision, with a call of its own (the scalar kernels and the references).
  FLASHATTN_HOST_DEVICE bool keep(int64_t row, int64_t key) const {
    return kept(group(row, key), element(row, key));
  }
  // visit(r, c, kept) for every element of rows [row0, row0 + rows) and keys
  // [key0, key0 + keys), r and c counted from row0 and key0: one call per group
  // that meets the tile (the CPU kernels' tiles).
  template <typename Visit>
  void for_each(int64_t row0, int rows, int64_t key0, int keys, Visit&& visit) const {
    if (rows <= 0 || keys <= 0) return;
    const int64_t row_end = row0 + rows, key_end = key0 + keys;
    for (int64_t rb = row0 & ~int64_t(15); rb < row_end; rb += 16)
      for (int a = 0; a < 8; ++a) {
        const int64_t i0 = rb + a;
        const bool low = i0 >= row0 && i0 < row_end, high = i0 + 8 >= row0 && i0 + 8 < row_end;
        if (!low && !high) continue;
        for (int64_t kb = key0 & ~int64_t(15); kb < key_end; kb += 16)
          for (int pair = 0; pair < 4; ++pair) {
            const int64_t j0 = kb + 2 * pair;
            if (j0 + 9 < key0 || j0 >= key_end || (j0 + 1 < key0 && j0 + 8 >= key_end)) continue;
            const Philox4 w = group(i0, j0);
            for (int e = 0; e < 8; ++e) {
              const int64_t i = i0 + 8 * (e >> 2), j = j0 + 8 * ((e >> 1) & 1) + (e & 1);
              if (i >= row0 && i < row_end && j >= key0 && j < key_end)
                visit(int(i - row0), int(j - key0), kept(w, e));
            }
          }
      }
  }
};

FLASHATTN_HOST_DEVICE DropoutRows dropout_rows(const DropoutParams& d, int b, int heads_q, int hq) {
  DropoutRows r;
  r.k0 = uint32_t(d.seed);
  r.k1 = uint32_t(d.seed >> 32);
  const uint64_t stream = d.offset + uint64_t(b) * uint64_t(heads_q) + uint64_t(hq);
  r.stream_lo = uint32_t(stream);
  r.stream_hi = uint32_t(stream >> 32);
  r.limit = uint32_t((uint64_t(d.threshold) << 16) - 1);
  return r;
}

}  // namespace flashattn
