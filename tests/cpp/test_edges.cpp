// The edges of the input space on every backend and dtype (src/core/softmax.h
// and docs/guide.md state the rules):
//   - NaN and Inf in q, k or v follow standard attention's arithmetic, against
//     the float64 reference on the same inputs: a row whose scores hold a NaN
//     or +inf is NaN, a −inf score weighs 0; only a row the mask leaves without
//     keys gives 0 and lse −inf;
//   - empty problems (batch 0, seqlen_q 0, seqlen_k 0) are legal;
//   - any finite scale, zero and negative included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "cases.h"
#include "dense.h"

namespace flashattn::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using Edges = BackendDtypeTest;

// ---- non-finite values ------------------------------------------------------

// Values in [-1, 1], different per tensor.
void fill_pattern(Dense& t, double phase) {
  for (size_t e = 0; e < t.values.size(); ++e)
    t.values[e] = float(std::sin(1.3 * double(e) + phase));
}

struct Planting {
  std::string name;
  char tensor;  // 'q', 'k' or 'v'
  enum Where { first_row, last_row, all_rows } where;
  float value;
  bool one_element;  // one element of the row (else the whole row)
};

std::vector<Planting> plantings() {
  std::vector<Planting> out;
  for (char t : {'q', 'k', 'v'}) {
    const std::string name(1, t);
    out.push_back({name + "_first_row_nan", t, Planting::first_row, kNaN, false});
    out.push_back({name + "_last_row_nan", t, Planting::last_row, kNaN, false});
    out.push_back({name + "_all_rows_nan", t, Planting::all_rows, kNaN, false});
    out.push_back({name + "_first_row_inf", t, Planting::first_row, kInf, true});
    out.push_back({name + "_last_row_minus_inf", t, Planting::last_row, -kInf, true});
    out.push_back({name + "_all_rows_inf", t, Planting::all_rows, kInf, false});
  }
  return out;
}

void plant(Dense& t, const Planting& p) {
  for (int b = 0; b < t.batch; ++b)
    for (int s = 0; s < t.seqlen; ++s) {
      const bool hit = p.where == Planting::all_rows ||
                       (p.where == Planting::first_row && s == 0) ||
                       (p.where == Planting::last_row && s == t.seqlen - 1);
      if (!hit) continue;
      for (int h = 0; h < t.heads; ++h)
        for (int c = 0; c < (p.one_element ? 1 : t.head_dim); ++c) t.at(b, s, h, c) = p.value;
    }
}

// Whether key j is visible to row i (the mask's rule, written out again).
bool sees(Mask mask, int i, int j, int nq, int nk) {
  if (mask == Mask::none) return true;
  const int offset = mask == Mask::causal_top_left ? 0 : nk - nq;
  return j <= i + offset;
}

enum class Kind { nan, plus_inf, minus_inf, finite };
Kind kind(double x) {
  if (std::isnan(x)) return Kind::nan;
  if (std::isinf(x)) return x > 0 ? Kind::plus_inf : Kind::minus_inf;
  return Kind::finite;
}

// The backends that carry fp32 as split halves (a high and a low part): an
// infinite input becomes NaN where it enters a product (its low part is ∞ − ∞),
// so rows it reaches may be NaN where standard attention gives a finite row (an
// −inf score) or an infinite one (docs/guide.md). cuda_f16x3 scales K and V per
// key block, so the rows that see any key of the block are reached.
bool splits_operands(Backend b) { return b == Backend::cuda_tf32x3 || b == Backend::cuda_f16x3; }

// Runs the backend and the reference on one planted problem and compares them
// element by element: the same class (NaN, ±inf, finite), and finite values
// within a tolerance that allows the dtype's rounding.
void expect_like_reference(DenseProblem problem, Backend backend, const Planting& planting) {
  const std::string where = std::string(planting.name) + ", " +
                            (problem.mask == Mask::none              ? "no mask"
                             : problem.mask == Mask::causal_top_left ? "causal top-left"
                                                                     : "causal bottom-right");
  round_inputs(problem);
  const DenseResult ref = run_dense(problem, Backend::reference);
  const DenseResult got = run_dense(problem, backend);
  const double rel = problem.dtype == DType::f32 ? 1e-4 : problem.dtype == DType::f16 ? 1e-2 : 4e-2;
  const int nq = problem.q.seqlen, nk = problem.k.seqlen;
  int mismatches = 0;
  for (int b = 0; b < problem.q.batch; ++b)
    for (int i = 0; i < nq; ++i)
      for (int h = 0; h < problem.q.heads; ++h) {
        // Rows that do not see the planted v row, on a tiled backend, may be NaN
        // as well: v planted at a key this row does not see.
        const bool row_empty = !sees(problem.mask, i, 0, nq, nk) || nk == 0;
        bool leak_allowed = splits_operands(backend) && std::isinf(planting.value) && !row_empty;
        if (planting.tensor == 'v' && tiles_values(backend))
          for (int j = 0; j < nk; ++j) {
            const bool planted = planting.where == Planting::all_rows ||
                                 (planting.where == Planting::first_row && j == 0) ||
                                 (planting.where == Planting::last_row && j == nk - 1);
            if (planted && !sees(problem.mask, i, j, nq, nk)) leak_allowed = true;
          }
        for (int c = 0; c < problem.q.head_dim; ++c) {
          const double r = ref.out.at(b, i, h, c), g = got.out.at(b, i, h, c);
          const bool same_class = kind(r) == kind(g) || (leak_allowed && std::isnan(g));
          const bool close = kind(r) != Kind::finite || kind(g) != Kind::finite ||
                             std::fabs(g - r) <= rel * (1.0 + std::fabs(r));
          if ((!same_class || !close) && ++mismatches <= 5)
            ADD_FAILURE() << where << ": out[b=" << b << ", i=" << i << ", h=" << h << ", c=" << c
                          << "] is " << g << ", the reference gives " << r;
        }
        // lse does not depend on v; an infinite q or k reaches it on the split
        // backends as it reaches out.
        const double rl = ref.lse_at(b, h, i), gl = got.lse_at(b, h, i);
        const bool lse_leak = splits_operands(backend) && std::isinf(planting.value) &&
                              planting.tensor != 'v' && !row_empty && std::isnan(gl);
        const bool lse_ok = lse_leak || (kind(rl) == kind(gl) &&
                                         (kind(rl) != Kind::finite || std::fabs(gl - rl) <= 1e-2));
        if (!lse_ok && ++mismatches <= 5)
          ADD_FAILURE() << where << ": lse[b=" << b << ", h=" << h << ", i=" << i << "] is " << gl
                        << ", the reference gives " << rl;
      }
  EXPECT_EQ(mismatches, 0) << where;
}

// The shapes each planting runs on: one that spans several key and query tiles
// of every tiled kernel, with ragged ends, GQA and rows that see no key under
// bottom-right alignment (seqlen_q > seqlen_k); and two small enough for
// cuda_tiled's one-pass paths (a warp per row with K and V in registers, and
// K and V staged in shared memory).
std::vector<DenseProblem> shapes(DType dtype) {
  std::vector<DenseProblem> out;
  for (Mask mask : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
    DenseProblem big{Dense(1, 150, 2, 64), Dense(1, 130, 1, 64), Dense(1, 130, 1, 64)};
    DenseProblem small{Dense(2, 7, 2, 8), Dense(2, 5, 2, 8), Dense(2, 5, 2, 8)};
    DenseProblem medium{Dense(1, 20, 2, 40), Dense(1, 40, 2, 40), Dense(1, 40, 2, 40)};
    for (DenseProblem* p : {&big, &small, &medium}) {
      fill_pattern(p->q, 0.3);
      fill_pattern(p->k, 1.1);
      fill_pattern(p->v, 2.2);
      p->dtype = dtype;
      p->mask = mask;
      out.push_back(*p);
    }
  }
  return out;
}

TEST_P(Edges, NonFiniteInputsPropagateAsInStandardAttention) {
  for (const Planting& planting : plantings())
    for (DenseProblem problem : shapes(dtype())) {
      Dense& t = planting.tensor == 'q' ? problem.q : planting.tensor == 'k' ? problem.k : problem.v;
      plant(t, planting);
      expect_like_reference(problem, backend(), planting);
    }
}

// ---- empty problems ----------------------------------------------------------

TEST_P(Edges, ProblemsWithoutKeysGiveZeroAndMinusInfinity) {
  for (Mask mask : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
    DenseProblem p{Dense(2, 9, 4, 16), Dense(2, 0, 2, 16), Dense(2, 0, 2, 16)};
    fill_pattern(p.q, 0.5);
    p.dtype = dtype();
    p.mask = mask;
    const DenseResult r = run_dense(p, backend());
    for (float x : r.out.values) ASSERT_EQ(x, 0.0f) << "a row without keys must give 0";
    for (float x : r.lse) ASSERT_EQ(x, -kInf) << "a row without keys has lse -inf";
  }
}

TEST_P(Edges, ProblemsWithoutRowsRunAndWriteNothing) {
  for (const auto& [batch, seqlen_q] : {std::pair{0, 5}, std::pair{3, 0}, std::pair{0, 0}}) {
    DenseProblem p{Dense(batch, seqlen_q, 2, 16), Dense(batch, 6, 1, 16), Dense(batch, 6, 1, 16)};
    p.dtype = dtype();
    const DenseResult r = run_dense(p, backend());
    EXPECT_TRUE(r.out.values.empty() && r.lse.empty());
  }
}

TEST_P(Edges, EmptyTensorsMayHaveNullPointers) {
  Params p;
  const Device d = device();
  p.q = contiguous_view(nullptr, dtype(), 0, 4, 2, 8, d);
  p.k = contiguous_view(nullptr, dtype(), 0, 3, 2, 8, d);
  p.v = contiguous_view(nullptr, dtype(), 0, 3, 2, 8, d);
  p.out = contiguous_view(nullptr, dtype(), 0, 4, 2, 8, d);
  p.backend = backend();
  EXPECT_NO_THROW(forward(p));
}

// ---- any finite scale --------------------------------------------------------

TEST_P(Edges, AnyFiniteScaleMatchesTheReference) {
  for (float scale : {0.0f, -0.0f, -0.125f, -1.5f, 1e-30f})
    for (Mask mask : {Mask::none, Mask::causal_bottom_right}) {
      harness::Case c;
      c.shape = {1, 70, 90, 2, 1, 64};
      c.dtype = dtype();
      c.mask = mask;
      c.scale = scale;
      SCOPED_TRACE("scale " + std::to_string(scale));
      expect_accurate({backend(), c}, device());
    }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, Edges, testing::ValuesIn(backend_dtypes()),
                         backend_dtype_name);

// ---- the reference itself, in closed form ------------------------------------

// Four rows, three keys, head_dim 2, bottom-right alignment: row i sees keys
// j <= i − 1, so row 0 sees none and rows 1 to 3 see one to three keys.
DenseProblem two_rows() {
  DenseProblem p{Dense(1, 4, 1, 2), Dense(1, 3, 1, 2), Dense(1, 3, 1, 2)};
  fill_pattern(p.q, 0.1);
  fill_pattern(p.k, 0.2);
  fill_pattern(p.v, 0.3);
  p.mask = Mask::causal_bottom_right;
  return p;
}

TEST(ReferenceNonFinite, EmptyRowsAreZeroEvenWhenInputsAreNaN) {
  DenseProblem p = two_rows();
  std::fill(p.q.values.begin(), p.q.values.end(), kNaN);
  std::fill(p.v.values.begin(), p.v.values.end(), kNaN);
  const DenseResult r = run_dense(p, Backend::reference);
  // Row 0 sees no key: 0 and −inf, whatever its inputs; the others are NaN.
  EXPECT_EQ(r.out.at(0, 0, 0, 0), 0.0f);
  EXPECT_EQ(r.lse_at(0, 0, 0), -kInf);
  for (int i = 1; i < 4; ++i) {
    EXPECT_TRUE(std::isnan(r.out.at(0, i, 0, 0)));
    EXPECT_TRUE(std::isnan(r.lse_at(0, 0, i)));
  }
}

TEST(ReferenceNonFinite, AnInfiniteScoreMakesItsRowNaN) {
  // exp(s − m) with s = m = +inf is exp(NaN): standard attention's softmax of
  // [inf, x] is [NaN, 0], and the row is NaN.
  DenseProblem p = two_rows();
  p.mask = Mask::none;
  p.k.at(0, 1, 0, 0) = kInf;
  p.q.at(0, 3, 0, 0) = 0.5f;
  const DenseResult r = run_dense(p, Backend::reference);
  EXPECT_TRUE(std::isnan(r.out.at(0, 3, 0, 0)));
  EXPECT_TRUE(std::isnan(r.lse_at(0, 0, 3)));
}

TEST(ReferenceNonFinite, AllScoresMinusInfinityIsNaNNotEmpty) {
  // Every visible score −inf: standard attention's softmax is 0/0. Only the mask
  // makes a row empty.
  DenseProblem p = two_rows();
  p.mask = Mask::none;
  for (int j = 0; j < 3; ++j) p.k.at(0, j, 0, 0) = -kInf, p.k.at(0, j, 0, 1) = 0.0f;
  p.q.at(0, 0, 0, 0) = 1.0f;
  const DenseResult r = run_dense(p, Backend::reference);
  EXPECT_TRUE(std::isnan(r.out.at(0, 0, 0, 0)));
  EXPECT_TRUE(std::isnan(r.lse_at(0, 0, 0)));
}

TEST(ReferenceNonFinite, AMinusInfiniteScoreAmongFiniteOnesWeighsZero) {
  DenseProblem p = two_rows();
  p.mask = Mask::none;
  p.k.at(0, 2, 0, 0) = -kInf, p.k.at(0, 2, 0, 1) = 0.0f;
  p.q.at(0, 0, 0, 0) = 1.0f;
  const DenseResult r = run_dense(p, Backend::reference);
  // Keys 0 and 1 only: softmax over their two scores.
  const double s0 = double(p.q.at(0, 0, 0, 0)) * p.k.at(0, 0, 0, 0) +
                    double(p.q.at(0, 0, 0, 1)) * p.k.at(0, 0, 0, 1);
  const double s1 = double(p.q.at(0, 0, 0, 0)) * p.k.at(0, 1, 0, 0) +
                    double(p.q.at(0, 0, 0, 1)) * p.k.at(0, 1, 0, 1);
  const double scale = 1.0 / std::sqrt(2.0), w0 = std::exp(scale * s0), w1 = std::exp(scale * s1);
  const double expected = (w0 * p.v.at(0, 0, 0, 0) + w1 * p.v.at(0, 1, 0, 0)) / (w0 + w1);
  EXPECT_NEAR(r.out.at(0, 0, 0, 0), expected, 1e-6);
}

}  // namespace
}  // namespace flashattn::test
