// The forward's steps for a tile of few query rows (decode: few_rows() in
// forward_tiles.h), whose scores are dot products along head_dim. S is kept
// as rows × kBlockN with the keys across the lanes, so the online softmax
// takes one exp2 per kLanes scores and reduces each row across its lanes once
// per tile; P·V then reads P by rows (forward.h). No include guard (see
// vec.h).

namespace forward {

// The score lane of row r, key j in t.s.
inline float* score_row(const Tiles& t, int r) { return t.s + int64_t(r) * kBlockN; }

// S[r][j] = q_r·k_j (q: rows × dp, k: cols × dp, S: rows × ld): kLanes keys
// at a time, whose kLanes dot products fold into one vector (lane_sums); the
// last cols % kLanes keys one at a time.
inline void scores_by_dots(const float* q, int rows, int dp, MatB k, int cols, float* s,
                           int64_t ld) {
  int j = 0;
  for (; j + kLanes <= cols; j += kLanes) {
    const float* kj = k.p + j * k.ld;
    for (int r = 0; r < rows; ++r) {
      const float* qr = q + int64_t(r) * dp;
      Vec acc[kLanes] = {};
      for (int c = 0; c < dp; c += kLanes) {
        const Vec x = load(qr + c);
#pragma GCC unroll 16
        for (int i = 0; i < kLanes; ++i) acc[i] += x * load(kj + i * k.ld + c);
      }
      store(s + r * ld + j, lane_sums(acc));
    }
  }
  for (; j < cols; ++j)
    for (int r = 0; r < rows; ++r) {
      Vec acc{};
      for (int c = 0; c < dp; c += kLanes) acc += load(q + int64_t(r) * dp + c) * load(k.p + j * k.ld + c);
      s[r * ld + j] = sum_lanes(acc);
    }
}

// S[r][j] → its score after the variants, for query rows m0 + r.
inline void vary_score_rows(const Tiles& t, const ScoreVariants& variants, int rows, int m0,
                            int n0, int cols) {
  for (int r = 0; r < rows; ++r) {
    const IVec row = splat_int(m0 + r);
    for (int j = 0; j < cols; j += kLanes) {
      float* s = score_row(t, r) + j;
      store(s, variants(load(s), row, lane_index() + (n0 + j)));
    }
  }
}

// S[r][j] = −inf where row r does not see key n0 + j (mask_scores' rule).
template <bool kLowerEnds>
void mask_score_rows(const Tiles& t, int rows, int n0, int cols) {
  const Vec minus_inf = splat(-INFINITY);
  for (int r = 0; r < rows; ++r) {
    const IVec end = splat_int(t.key_end[r]), begin = splat_int(t.key_begin[r]);
    for (int j = 0; j < cols; j += kLanes) {
      const IVec key = lane_index() + (n0 + j);
      IVec seen = key < end;
      if constexpr (kLowerEnds) seen &= key >= begin;
      float* s = score_row(t, r) + j;
      store(s, seen ? load(s) : minus_inf);
    }
  }
}

// The online softmax over one tile of S (softmax_tile's arithmetic, row by
// row): m, l and alpha per row, S → P. Lanes past cols become −inf first, so
// they neither raise the max nor add to the sum.
inline void softmax_rows(const Tiles& t, int rows, int cols) {
  const int width = padded(cols);
  const Vec c = splat(kLog2e);
  for (int r = 0; r < rows; ++r) {
    float* s = score_row(t, r);
    std::fill(s + cols, s + width, -INFINITY);
    Vec lane_max = splat(-INFINITY);
    for (int j = 0; j < width; j += kLanes) lane_max = max_nan_blind(lane_max, load(s + j));
    const float m_old = t.m[r], tile_max = max_lanes(lane_max);
    const float m_new = tile_max > m_old ? tile_max : m_old;
    const Vec m_exp = splat(m_new == -INFINITY ? 0.0f : m_new);  // core's exponent_max
    const float alpha = exp2_nonpositive((splat(m_old) - m_exp) * c)[0];
    Vec sum{};
    for (int j = 0; j < width; j += kLanes) {
      const Vec prob = exp2_nonpositive((load(s + j) - m_exp) * c);
      store(s + j, prob);
      sum += prob;
    }
    t.l[r] = t.l[r] * alpha + sum_lanes(sum);
    t.m[r] = m_new;
    t.alpha[r] = alpha;
  }
}

// The few-rows products of an uncut tile of keys [n0, n0 + cols) whose fp32
// rows lie in several runs (a paged cache's tile straddling pages), each run
// read where it lies rather than gathered first: S by dot products, then
// O = diag(alpha)·O + P·V (O dp_v wide), one run's keys after another.
inline void scores_by_runs(const AttnParams& p, const Tiles& t, int b, const Sequence& seq, int h,
                           int rows, int dp, int n0, int cols) {
  for_each_run(p, b, seq, n0, n0 + cols, [&](const KeyRun& run, int at) {
    scores_by_dots(t.q_t, rows, dp, run_rows(p.k, run, h), run.count, t.s + at, kBlockN);
  });
}
inline void update_by_runs(const AttnParams& p, const Tiles& t, int b, const Sequence& seq, int h,
                           int rows, int dp_v, int n0, int cols) {
  for_each_run(p, b, seq, n0, n0 + cols, [&](const KeyRun& run, int at) {
    const MatA probs{t.s + at, kBlockN, 1};
    const MatB v = run_rows(p.v, run, h);
    if (at == 0) gemm<Init::scale_rows>(rows, dp_v, run.count, probs, v, {t.o, dp_v}, t.alpha);
    else gemm<Init::add>(rows, dp_v, run.count, probs, v, {t.o, dp_v});
  });
}

}  // namespace forward
