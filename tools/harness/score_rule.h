// Softcap and ALiBi as the public API states them (flashattn::Variants in
// flashattn.hpp), written out here for the harness's own computations of
// standard attention (standard.h, standard_backward.h), apart from the
// library's core/variant.h, so that the reference backend is never checked
// against its own code.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "problem.h"

namespace flashattn::harness {

struct ScoreRule {
  float softcap = 0.0f;           // > 0: s → softcap·tanh(s/softcap)
  const float* slopes = nullptr;  // ALiBi's slope per query head (host memory); null: none
  int64_t alignment = 0;          // off: 0 for causal_top_left, seqlen_k − seqlen_q otherwise

  // The scaled score s of query head h, row i and key j after the variants, in
  // F's arithmetic, and its derivative by s.
  template <typename F>
  F operator()(F s, int h, int64_t i, int64_t j, F& derivative) const {
    derivative = F(1);
    if (softcap > 0.0f) {
      const F t = std::tanh(s / F(softcap));
      derivative = F(1) - t * t;
      s = F(softcap) * t;
    }
    if (slopes) s -= F(slopes[h]) * F(std::llabs(i + alignment - j));
    return s;
  }
  template <typename F>
  F operator()(F s, int h, int64_t i, int64_t j) const {
    F derivative;
    return (*this)(s, h, i, j, derivative);
  }
};

// The rule of case c, reading ALiBi's slopes (heads_q floats) from `slopes`.
inline ScoreRule score_rule(const Case& c, const float* slopes) {
  ScoreRule rule;
  rule.softcap = c.softcap;
  rule.slopes = c.alibi ? slopes : nullptr;
  rule.alignment =
      c.mask == Mask::causal_top_left ? 0 : int64_t(c.shape.seqlen_k) - c.shape.seqlen_q;
  return rule;
}

}  // namespace flashattn::harness
