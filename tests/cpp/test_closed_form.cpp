// Inputs whose attention output is known in closed form, on every backend and
// dtype: equal scores average V, a dominant key selects its V row, huge scores
// stay finite, and rows that see no key give 0 with lse = -inf. Inputs are fixed
// patterns, rounded to the dtype before the expected values are computed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "dense.h"

namespace flashattn::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A deterministic spread of values in [-1, 1], different per tensor (phase).
void fill_pattern(Dense& t, double phase) {
  for (size_t e = 0; e < t.values.size(); ++e)
    t.values[e] = float(std::sin(1.7 * double(e) + phase));
}

// Mean of v's rows [0, count) for (batch b, kv head h), in double.
std::vector<double> mean_of_rows(const Dense& v, int b, int h, int count) {
  std::vector<double> mean(v.head_dim, 0.0);
  for (int j = 0; j < count; ++j)
    for (int c = 0; c < v.head_dim; ++c) mean[c] += v.at(b, j, h, c);
  for (double& x : mean) x /= count;
  return mean;
}

std::vector<double> row_of(const Dense& t, int b, int s, int h) {
  std::vector<double> row(t.head_dim);
  for (int c = 0; c < t.head_dim; ++c) row[c] = t.at(b, s, h, c);
  return row;
}

class ClosedForm : public BackendDtypeTest {
 protected:

  // Rounds the inputs to the dtype, runs the backend, and checks that nothing
  // in out or lse is NaN: every element is written, and no row divides 0 by 0.
  DenseResult run(DenseProblem& problem) const {
    problem.dtype = dtype();
    round_inputs(problem);
    DenseResult result = run_dense(problem, backend());
    for (float x : result.out.values) EXPECT_FALSE(std::isnan(x)) << "NaN in out";
    for (float x : result.lse) EXPECT_FALSE(std::isnan(x)) << "NaN in lse";
    return result;
  }

  // Output error allowed against an exact value: rounding the output to the dtype
  // (relative) plus fp32 accumulation over O(100) terms of magnitude <= 1.
  double out_tolerance(double expected) const {
    const double rounding = dtype() == DType::f32 ? 2e-6 : dtype() == DType::f16 ? 0x1p-10 : 0x1p-7;
    return rounding * std::fabs(expected) + 2e-6;
  }

  void expect_row(const DenseResult& r, int b, int i, int h, const std::vector<double>& expected,
                  const std::string& what) const {
    for (int c = 0; c < r.out.head_dim; ++c)
      EXPECT_NEAR(r.out.at(b, i, h, c), expected[c], out_tolerance(expected[c]))
          << what << ": out[b=" << b << ", i=" << i << ", h=" << h << ", c=" << c << "]";
  }

  // lse is computed in fp32 whatever the dtype: a few ulps of its magnitude.
  static void expect_lse(const DenseResult& r, int b, int h, int i, double expected) {
    const float got = r.lse_at(b, h, i);
    if (std::isinf(expected)) {
      EXPECT_EQ(got, expected) << "lse[b=" << b << ", h=" << h << ", i=" << i << "]";
      return;
    }
    EXPECT_NEAR(got, expected, 1e-6 * std::fabs(expected) + 2e-5)
        << "lse[b=" << b << ", h=" << h << ", i=" << i << "]";
  }
};

TEST_P(ClosedForm, ZeroQueryGivesMeanOfValues) {
  // q = 0 makes every score 0: uniform weights over all 100 keys (two key tiles).
  DenseProblem p{Dense(2, 3, 2, 5), Dense(2, 100, 2, 5), Dense(2, 100, 2, 5)};
  fill_pattern(p.k, 0.3);
  fill_pattern(p.v, 1.1);
  const DenseResult r = run(p);
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 3; ++i) {
        expect_row(r, b, i, h, mean_of_rows(p.v, b, h, 100), "mean of V");
        expect_lse(r, b, h, i, std::log(100.0));
      }
}

TEST_P(ClosedForm, IdenticalKeysGiveMeanOfValues) {
  // Every key of a (batch, head) is the same row, so all of a query's scores are
  // equal however large: uniform weights again, lse = scale·q·k + ln(seqlen_k).
  const int d = 6, nk = 130;
  DenseProblem p{Dense(1, 4, 2, d), Dense(1, nk, 2, d), Dense(1, nk, 2, d)};
  fill_pattern(p.q, 0.5);
  fill_pattern(p.v, 2.0);
  for (int j = 0; j < nk; ++j)
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < d; ++c) p.k.at(0, j, h, c) = float(1.5 * std::cos(c + 3.0 * h));
  const DenseResult r = run(p);
  const double scale = 1.0 / std::sqrt(double(d));
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i) {
      expect_row(r, 0, i, h, mean_of_rows(p.v, 0, h, nk), "mean of V");
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += double(p.q.at(0, i, h, c)) * p.k.at(0, 0, h, c);
      expect_lse(r, 0, h, i, scale * dot + std::log(double(nk)));
    }
}

TEST_P(ClosedForm, DominantKeyGivesItsValueRow) {
  // q = (10, 0, 0, 0) and one key (10, 0, 0, 0) among zero keys, scale 1: that
  // key scores 100, the rest 0, so its weight is 1 − 129·e^-100 = 1 in any float.
  const int nk = 130, dominant = 77;
  DenseProblem p{Dense(1, 2, 1, 4), Dense(1, nk, 1, 4), Dense(1, nk, 1, 4)};
  p.scale = 1.0f;
  for (int i = 0; i < 2; ++i) p.q.at(0, i, 0, 0) = 10.0f;
  p.k.at(0, dominant, 0, 0) = 10.0f;
  fill_pattern(p.v, 0.7);
  const DenseResult r = run(p);
  for (int i = 0; i < 2; ++i) {
    expect_row(r, 0, i, 0, row_of(p.v, 0, dominant, 0), "the dominant key's V row");
    expect_lse(r, 0, 0, i, 100.0);
  }
}

TEST_P(ClosedForm, ScoresOfMagnitude1e4DoNotOverflow) {
  // Scale 1, q0 = (100, 1), q1 = (−100, −1). Keys 5, 70, 140 score
  //   q0: 1e4, 9999, −1e4        q1: −1e4, −9999, 1e4
  // and the 147 filler keys (0, 50) score ±50. Row 0 is (V5 + e^-1·V70)/(1 + e^-1),
  // row 1 is V140; exp of a raw score would overflow, exp of score − max cannot.
  const int nk = 150;
  DenseProblem p{Dense(1, 2, 1, 2), Dense(1, nk, 1, 2), Dense(1, nk, 1, 2)};
  p.scale = 1.0f;
  p.q.values = {100.0f, 1.0f, -100.0f, -1.0f};
  for (int j = 0; j < nk; ++j) {
    p.k.at(0, j, 0, 0) = 0.0f;
    p.k.at(0, j, 0, 1) = 50.0f;
  }
  p.k.at(0, 5, 0, 0) = 100.0f, p.k.at(0, 5, 0, 1) = 0.0f;
  p.k.at(0, 70, 0, 0) = 100.0f, p.k.at(0, 70, 0, 1) = -1.0f;
  p.k.at(0, 140, 0, 0) = -100.0f, p.k.at(0, 140, 0, 1) = 0.0f;
  fill_pattern(p.v, 0.2);
  const DenseResult r = run(p);
  for (float x : r.out.values) EXPECT_TRUE(std::isfinite(x)) << "out not finite";

  const double w = std::exp(-1.0);
  std::vector<double> row0(2);
  for (int c = 0; c < 2; ++c) row0[c] = (p.v.at(0, 5, 0, c) + w * p.v.at(0, 70, 0, c)) / (1 + w);
  expect_row(r, 0, 0, 0, row0, "weights 1 : e^-1 on keys 5 and 70");
  expect_row(r, 0, 1, 0, row_of(p.v, 0, 140, 0), "key 140 alone");
  expect_lse(r, 0, 0, 0, 1e4 + std::log1p(w));
  expect_lse(r, 0, 0, 1, 1e4);
}

TEST_P(ClosedForm, SeqlenOneGivesTheValueRow) {
  // One key: its weight is 1, so out = v and lse = its score. Three query heads
  // share the one kv head (MQA); two batches.
  const int d = 7;
  DenseProblem p{Dense(2, 1, 3, d), Dense(2, 1, 1, d), Dense(2, 1, 1, d)};
  fill_pattern(p.q, 0.1);
  fill_pattern(p.k, 0.9);
  fill_pattern(p.v, 1.9);
  const DenseResult r = run(p);
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 3; ++h) {
      expect_row(r, b, 0, h, row_of(p.v, b, 0, 0), "the only V row");
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += double(p.q.at(b, 0, h, c)) * p.k.at(b, 0, 0, c);
      expect_lse(r, b, h, 0, dot / std::sqrt(double(d)));
    }
}

TEST_P(ClosedForm, HeadDimOneIsAScalarSoftmax) {
  // head_dim 1 (default scale 1): out_i = Σ_j e^{q_i k_j} v_j / Σ_j e^{q_i k_j}.
  DenseProblem p{Dense(1, 4, 1, 1), Dense(1, 5, 1, 1), Dense(1, 5, 1, 1)};
  p.q.values = {0.5f, -1.0f, 2.0f, 0.0f};
  p.k.values = {1.0f, 2.0f, -1.0f, 0.25f, 3.0f};
  p.v.values = {1.0f, 2.0f, 3.0f, -4.0f, 0.5f};
  const DenseResult r = run(p);
  for (int i = 0; i < 4; ++i) {
    double num = 0, den = 0;
    for (int j = 0; j < 5; ++j) {
      const double e = std::exp(double(p.q.values[i]) * p.k.values[j]);
      num += e * p.v.values[j];
      den += e;
    }
    expect_row(r, 0, i, 0, {num / den}, "scalar softmax");
    expect_lse(r, 0, 0, i, std::log(den));
  }
}

TEST_P(ClosedForm, RowsWithNoVisibleKeyGiveZeroAndNegInfLse) {
  // Bottom-right causal, seqlen_q 100 > seqlen_k 70: key j is visible to row i iff
  // j <= i − 30, so rows 0..29 see nothing (0 and −inf exactly, never NaN) and
  // row i >= 30 averages V[0, i − 29) with q = 0.
  const int nq = 100, nk = 70;
  DenseProblem p{Dense(1, nq, 2, 3), Dense(1, nk, 2, 3), Dense(1, nk, 2, 3)};
  p.mask = Mask::causal_bottom_right;
  fill_pattern(p.k, 0.4);
  fill_pattern(p.v, 1.3);
  const DenseResult r = run(p);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < nq; ++i) {
      const int visible = i - 29;
      if (visible <= 0) {
        for (int c = 0; c < 3; ++c) EXPECT_EQ(r.out.at(0, i, h, c), 0.0f) << "row " << i;
        expect_lse(r, 0, h, i, -kInf);
      } else {
        expect_row(r, 0, i, h, mean_of_rows(p.v, 0, h, visible), "visible prefix mean");
        expect_lse(r, 0, h, i, std::log(double(visible)));
      }
    }
}

TEST_P(ClosedForm, CausalRowsAverageTheirVisiblePrefix) {
  // With q = 0 a causal row averages exactly the keys it sees: j <= i (top-left)
  // or j <= i + seqlen_k − seqlen_q (bottom-right), over several tiles each way.
  for (Mask mask : {Mask::causal_top_left, Mask::causal_bottom_right})
    for (auto [nq, nk] : {std::pair{90, 130}, std::pair{130, 90}}) {
      SCOPED_TRACE((mask == Mask::causal_top_left ? "top-left, " : "bottom-right, ") +
                   std::to_string(nq) + " queries, " + std::to_string(nk) + " keys");
      DenseProblem p{Dense(1, nq, 1, 4), Dense(1, nk, 1, 4), Dense(1, nk, 1, 4)};
      p.mask = mask;
      fill_pattern(p.k, 0.8);
      fill_pattern(p.v, 2.4);
      const DenseResult r = run(p);
      const int offset = mask == Mask::causal_top_left ? 0 : nk - nq;
      for (int i = 0; i < nq; ++i) {
        const int visible = std::clamp(i + offset + 1, 0, nk);
        if (visible == 0) {
          expect_lse(r, 0, 0, i, -kInf);
          continue;
        }
        expect_row(r, 0, i, 0, mean_of_rows(p.v, 0, 0, visible), "visible prefix mean");
        expect_lse(r, 0, 0, i, std::log(double(visible)));
      }
    }
}

// Every backend with every dtype it takes but cuda_wgmma, whose head_dim must be
// a multiple of 8 (these problems have head_dim 2); it runs them in test_edges.
std::vector<std::tuple<Backend, DType>> closed_form_backends() {
  std::vector<std::tuple<Backend, DType>> out;
  for (const auto& bd : backend_dtypes())
    if (std::get<0>(bd) != Backend::cuda_wgmma) out.push_back(bd);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, ClosedForm, testing::ValuesIn(closed_form_backends()),
                         backend_dtype_name);

}  // namespace
}  // namespace flashattn::test
