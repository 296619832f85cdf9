// Softcap and ALiBi (core/variant.h states them) on vectors of scores. The
// CPU kernels pre-scale Q, so their scores are already scaled (x = scale·q·k)
// and the variants apply to them as the public rule has it, with no raw-score
// form:  x → c·tanh(x/c), then x − slope_h·|i + off − j|.
// No include guard (see vec.h).

// The variants of one query head.
struct ScoreVariants {
  float cap = 0.0f;       // softcap c; 0: none
  float inv_cap = 0.0f;   // 1/c
  float slope = 0.0f;     // ALiBi's slope of the head; 0: none
  int32_t alignment = 0;  // off, within ±2^31 (both lengths are ints)

  bool any() const { return cap > 0.0f || slope != 0.0f; }

  // The scores x of rows `row` and keys `key` (lane by lane) after the
  // variants, and their derivative by x: 1 − tanh² under a softcap, else 1.
  Vec operator()(Vec x, IVec row, IVec key, Vec& derivative) const {
    derivative = splat(1.0f);
    if (cap > 0.0f) {
      const Vec t = tanh_lanes(x * splat(inv_cap));
      derivative = (1.0f - t) * (1.0f + t);
      x = splat(cap) * t;
    }
    if (slope != 0.0f) {
      // |i + off − j| < 2^31 for a row and a key of one sequence.
      const IVec distance = row + alignment - key;
      const IVec magnitude = distance < 0 ? -distance : distance;
      x -= splat(slope) * __builtin_convertvector(magnitude, Vec);
    }
    return x;
  }
  Vec operator()(Vec x, IVec row, IVec key) const {
    Vec derivative;
    return (*this)(x, row, key, derivative);
  }
};

inline ScoreVariants score_variants(const AttnParams& p, int hq, const RowMask& mask) {
  ScoreVariants v;
  if (p.scores.softcap > 0.0f) {
    v.cap = p.scores.softcap;
    v.inv_cap = 1.0f / p.scores.softcap;
  }
  if (p.scores.alibi_slopes) v.slope = p.scores.alibi_slopes[hq];
  v.alignment = int32_t(mask.alignment);
  return v;
}
