// The online softmax's arithmetic, shared by every backend so that the kernels,
// the CPU backends and the float64 oracle cannot disagree on it.
//
// A row's state after some of its keys, with c = scale·log2(e) (or 1 where the
// scores are already in log2 units):
//   m = max of the scores seen,  l = Σ 2^((s − m)·c),  acc = Σ 2^((s − m)·c)·v;
// when m grows, l and acc are rescaled by alpha = 2^((m_old − m_new)·c). The
// max is taken NaN-blind (fmaxf): a NaN score still reaches l and acc through
// its probability, 2^NaN = NaN, so NaN propagates as in standard attention.
// Finishing a row (finish_row) gives out = acc / l and lse = m·scale + ln l.
//
// Non-finite values follow the arithmetic of standard attention, with one
// exception, the empty row: a row the mask leaves without keys gets output 0
// and lse −inf (standard attention would give NaN). Which rows are empty is the
// mask's to say (RowMask::empty), never l's: a row whose visible scores are all
// −inf, or NaN, has l = 0 or NaN and gets NaN, as standard attention does.
#pragma once

#include <cmath>

#include "core/host_device.h"

namespace flashattn {

// The max a probability's exponent subtracts: m, or 0 while a row has seen no
// finite score (m = −inf), so that −inf − (−inf) never appears.
template <typename F>
FLASHATTN_HOST_DEVICE F exponent_max(F m) {
  return m == F(-INFINITY) ? F(0) : m;
}

// exponent_max(m)·c, with the multiply first: on the GPU it then does not wait
// for the test (the softmax's latency is the Hopper kernel's critical path at
// head dim 64).
FLASHATTN_HOST_DEVICE float exponent_max_c(float m, float c) {
  return m == -INFINITY ? 0.0f : m * c;
}

// One row's running max and sum (the scalar backends; the tensor-core kernels
// keep the same quantities in fragments, in their family's softmax.cuh).
struct OnlineRow {
  float m = -INFINITY;
  float l = 0.0f;

  // Raises m to include block_max (the NaN-blind max of a block's scores) and
  // rescales l; returns alpha, by which the caller rescales its accumulators.
  FLASHATTN_HOST_DEVICE float raise_max(float block_max, float c) {
    const float m_new = fmaxf(m, block_max);
    const float alpha = exp2f((m - exponent_max(m_new)) * c);
    m = m_new;
    l *= alpha;
    return alpha;
  }
  // −m·c: a score s's probability is exp2(fmaf(s, c, neg_max_c)).
  FLASHATTN_HOST_DEVICE float neg_max_c(float c) const { return -exponent_max(m) * c; }
};

// 1/x, correctly rounded (on the GPU one MUFU.RCP and a fix-up, where 1.0f / x
// compiles to a division routine with a slow path).
template <typename F>
FLASHATTN_HOST_DEVICE F reciprocal(F x) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(F) == sizeof(float)) return __frcp_rn(x);
#endif
  return F(1) / x;
}

// ln x in F's own precision, on the host and the GPU.
template <typename F>
FLASHATTN_HOST_DEVICE F natural_log(F x) {
  if constexpr (sizeof(F) == sizeof(float)) return logf(x);
  else return log(x);
}

// A finished row: out = acc · inv_l and its lse, or 0 and −inf when empty. For
// an empty row inv_l is 0, but acc may hold a NaN (a masked key's 0·v), so out()
// selects.
template <typename F>
struct FinishedRow {
  bool empty;
  F inv_l;
  F lse;
  FLASHATTN_HOST_DEVICE F out(F acc) const { return empty ? F(0) : acc * inv_l; }
};

// A row's lse, m_natural + ln l, or −inf when empty. m_natural: the row's max
// in natural-log units (m·scale for raw scores, m·ln 2 for scores in log2
// units, less any bias the probabilities carry). l = 0 on a
// row that is not empty means every visible score was −inf: NaN, as standard
// attention gives (1/0 · 0); so does l = NaN.
template <typename F>
FLASHATTN_HOST_DEVICE F row_lse(F m_natural, F l, bool empty) {
  if (empty) return F(-INFINITY);
  return l > F(0) ? m_natural + natural_log(l) : F(NAN);
}

// The row's output factor and lse together. A kernel that stores the lse only
// on some rows (or none) finishes the output here and asks row_lse at the
// store, so that the logarithm runs where it is stored.
template <typename F>
FLASHATTN_HOST_DEVICE FinishedRow<F> finish_row(F m_natural, F l, bool empty) {
  if (empty) return {true, F(0), F(-INFINITY)};
  return {false, reciprocal(l), row_lse(m_natural, l, false)};
}

// Whether a finished row is empty: a row the mask leaves without keys, and,
// with a bias or boolean mask (kZeroSumEmpty: the score functor's kBias), a row
// whose every score was −inf (l = 0): the tensor's mask left it no key, and it
// gets 0 and lse −inf as PyTorch's SDPA gives a fully masked row.
template <bool kZeroSumEmpty, typename F>
FLASHATTN_HOST_DEVICE bool finished_empty(bool mask_empty, F l) {
  return mask_empty || (kZeroSumEmpty && l == F(0));
}

// The larger of two lse values, NaN if either is: merging partial rows
// (split-KV) must not drop a NaN partial the way fmaxf would.
FLASHATTN_HOST_DEVICE float lse_max(float a, float b) {
  return (a != a || b != b) ? NAN : fmaxf(a, b);
}

// The weight of a partial row with log-sum-exp lse in a merge whose largest is
// lse_top: e^(lse − lse_top); 0 for a partial that saw no key (lse −inf), and
// for every partial of a row where none saw a key.
FLASHATTN_HOST_DEVICE float partial_weight(float lse, float lse_top) {
  return lse_top == -INFINITY ? 0.0f : expf(lse - lse_top);
}

}  // namespace flashattn
