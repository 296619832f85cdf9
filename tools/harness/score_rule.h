// Softcap, ALiBi and a bias or boolean mask as the public API states them
// (flashattn::Variants and flashattn::ScoreBias in flashattn.hpp), written out
// here for the harness's own computations of standard attention (standard.h,
// standard_backward.h), apart from the library's core/variant.h, so that the
// reference backend is never checked against its own code.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "bias.h"
#include "problem.h"

namespace flashattn::harness {

struct ScoreRule {
  float softcap = 0.0f;           // > 0: s → softcap·tanh(s/softcap)
  const float* slopes = nullptr;  // ALiBi's slope per query head (host memory); null: none
  int64_t alignment = 0;          // off: 0 for causal_top_left, seqlen_k − seqlen_q otherwise
  // The bias's addends, added after softcap and ALiBi; null: none. With a bias,
  // a row whose every score is −inf is empty: output 0, lse −inf, no gradient.
  const BiasAddends* bias = nullptr;

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
  return rule;
}

}  // namespace flashattn::harness
