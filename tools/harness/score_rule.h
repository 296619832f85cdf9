// Softcap, ALiBi, a bias or boolean mask, and dropout as the public API states them
// (flashattn::Variants and flashattn::ScoreBias in flashattn.hpp), written out
// here for the harness's own computations of standard attention (standard.h,
// standard_backward.h), apart from the library's core/variant.h, so that the
// reference backend is never checked against its own code.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "bias.h"
#include "problem.h"

namespace flashattn::harness {

// Dropout's factor per element (flashattn::Dropout): 2^16 / (2^16 − round(p·2^16))
// where the public dropout_keep_mask() keeps the element, else 0.
struct DropoutFactors {
  std::vector<uint8_t> keep;  // (batch, heads_q, seqlen_q, seqlen_k)
  int heads_q = 0, seqlen_q = 0, seqlen_k = 0;
  double scale = 1.0;
  double operator()(int b, int h, int64_t i, int64_t j) const {
    return keep[((int64_t(b) * heads_q + h) * seqlen_q + i) * seqlen_k + j] ? scale : 0.0;
  }
};

inline std::shared_ptr<const DropoutFactors> dropout_factors(const Case& c) {
  if (c.dropout.p <= 0.0f) return nullptr;
  auto f = std::make_shared<DropoutFactors>();
  const Shape& s = c.shape;
  f->keep = dropout_keep_mask(c.dropout, s.batch, s.heads_q, s.seqlen_q, s.seqlen_k);
  f->heads_q = s.heads_q;
  f->seqlen_q = s.seqlen_q;
  f->seqlen_k = s.seqlen_k;
  const double dropped = std::round(double(c.dropout.p) * 65536.0);
  f->scale = dropped >= 65536.0 ? 0.0 : 65536.0 / (65536.0 - dropped);
  return f;
}

struct ScoreRule {
  float softcap = 0.0f;           // > 0: s → softcap·tanh(s/softcap)
  const float* slopes = nullptr;  // ALiBi's slope per query head (host memory); null: none
  int64_t alignment = 0;          // off: 0 for causal_top_left, seqlen_k − seqlen_q otherwise
  // The bias's addends, added after softcap and ALiBi; null: none. With a bias,
  // a row whose every score is −inf is empty: output 0, lse −inf, no gradient.
  const BiasAddends* bias = nullptr;
  // Dropout's factors z_ij, multiplying each probability after the softmax
  // (its sum is the undropped one); null: none.
  std::shared_ptr<const DropoutFactors> dropout;

  double kept(int b, int h, int64_t i, int64_t j) const {
    return dropout ? (*dropout)(b, h, i, j) : 1.0;
  }

  // The scaled score s of batch index b, query head h, row i and key j after
  // the variants, in F's arithmetic, and its derivative by s (the bias is a
  // constant: it adds nothing to the derivative).
  template <typename F>
  F operator()(F s, int b, int h, int64_t i, int64_t j, F& derivative) const {
    derivative = F(1);
    if (softcap > 0.0f) {
      const F t = std::tanh(s / F(softcap));
      derivative = F(1) - t * t;
      s = F(softcap) * t;
    }
    if (slopes) s -= F(slopes[h]) * F(std::llabs(i + alignment - j));
    if (bias) s += F(bias->at(b, h, i, j));
    return s;
  }
  template <typename F>
  F operator()(F s, int b, int h, int64_t i, int64_t j) const {
    F derivative;
    return (*this)(s, b, h, i, j, derivative);
  }
  // Whether a row whose scores are all −inf (its max, m) is empty.
  template <typename F>
  bool empties(F m) const {
    return bias != nullptr && m == -INFINITY;
  }
};

// The rule of case c, reading ALiBi's slopes (heads_q floats) from `slopes`
// and the bias's addends from `bias` (null: none).
inline ScoreRule score_rule(const Case& c, const float* slopes, const BiasAddends* bias = nullptr) {
  ScoreRule rule;
  rule.softcap = c.softcap;
  rule.slopes = c.alibi ? slopes : nullptr;
  rule.alignment =
      c.mask == Mask::causal_top_left ? 0 : int64_t(c.shape.seqlen_k) - c.shape.seqlen_q;
  rule.bias = c.bias ? bias : nullptr;
  rule.dropout = dropout_factors(c);
  return rule;
}

}  // namespace flashattn::harness
