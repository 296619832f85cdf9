// The backward on every backend that has one: the shared case list (awkward
// shapes, masks, GQA, strided views, custom scales) plus shapes for the GPU,
// each gradient against a float64 oracle (tools/harness/grad_problem.h);
// deterministic mode bit-identical; empty problems; non-finite inputs; the
// argument rules; and a finite-difference check of the reference itself.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cases.h"
#include "dense.h"
#include "grad_problem.h"
#include "seed.h"

namespace flashattn::test {
namespace {

using testing::HasSubstr;

// The shared list; for the GPU also tile-sized and multi-block shapes of every
// head-dim bucket of the tensor-core kernels, aligned strided views, and GQA
// groups of 8.
std::vector<harness::Case> backward_cases(bool gpu) {
  std::vector<harness::Case> cases = shared_cases();
  if (!gpu) return cases;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (int d : {32, 64, 96, 128, 192, 256}) {
      cases.push_back(make_case({2, 256, 256, 4, 2, d}, dtype, Mask::none));
      cases.push_back(make_case({1, 300, 333, 8, 1, d}, dtype, Mask::causal_bottom_right));
    }
    // The 512 bucket (head dims 257–512) on fewer rows: its float64 reference
    // costs the most host time of the suite.
    for (int d : {320, 512}) {
      cases.push_back(make_case({1, 200, 160, 4, 2, d}, dtype, Mask::none));
      cases.push_back(make_case({1, 150, 170, 4, 1, d}, dtype, Mask::causal_bottom_right));
    }
    cases.push_back(make_case({1, 513, 200, 4, 4, 128}, dtype, Mask::causal_top_left, true));
    harness::Case aligned = make_case({2, 190, 250, 8, 2, 64}, dtype, Mask::causal_bottom_right, true);
    aligned.strided_pad = 8;
    cases.push_back(aligned);
    cases.push_back(make_case({1, 128, 1024, 2, 2, 512}, dtype, Mask::none));
    // Small enough for the sanitizer (tools/gpu-check): d = 512's one-buffer
    // schedule over two query tiles, three key tiles, a GQA pair.
    cases.push_back(make_case({1, 70, 90, 2, 1, 512}, dtype, Mask::causal_top_left));
  }
  return cases;
}

// cuda_wgmma: the cases above whose tensors TMA can describe (head_dim a
// multiple of 8; strided views padded to keep rows 16-byte aligned), plus its
// own: each head-dim bucket over many key tiles (128 keys, 64 at head dim 256)
// and query tiles (64 or 128 rows), so that every stage's barrier phase wraps
// and several key tiles add into each dQ tile; GQA groups of 4; both causal
// alignments with seqlen_q on either side of seqlen_k; padded head dims (80,
// and 160 and 192 in the 256 bucket, whose last panel holds no column); a
// single query row; small ones for the sanitizer (Nq70); split tails.
std::vector<harness::Case> wgmma_backward_cases() {
  std::vector<harness::Case> cases = tma_cases(backward_cases(true));
  auto add = [&](harness::Shape shape, DType dtype, Mask mask, bool strided) {
    harness::Case c = make_case(shape, dtype, mask, strided);
    c.strided_pad = 8;
    cases.push_back(c);
  };
  add({2, 1000, 1100, 4, 2, 64}, DType::bf16, Mask::none, false);
  add({1, 700, 900, 8, 2, 128}, DType::f16, Mask::causal_bottom_right, false);
  add({1, 900, 600, 4, 1, 128}, DType::bf16, Mask::causal_top_left, true);
  add({1, 600, 900, 2, 2, 64}, DType::f16, Mask::causal_top_left, false);
  add({1, 1500, 1500, 2, 1, 80}, DType::bf16, Mask::causal_bottom_right, true);
  add({2, 1, 700, 2, 2, 128}, DType::f16, Mask::none, false);
  add({1, 300, 40, 2, 1, 64}, DType::bf16, Mask::causal_bottom_right, false);
  add({1, 70, 300, 4, 2, 64}, DType::bf16, Mask::causal_top_left, false);
  add({1, 70, 300, 2, 1, 128}, DType::f16, Mask::none, true);
  add({1, 700, 900, 8, 2, 256}, DType::bf16, Mask::causal_bottom_right, false);
  add({1, 900, 600, 4, 1, 256}, DType::f16, Mask::causal_top_left, true);
  add({2, 500, 500, 4, 2, 192}, DType::bf16, Mask::causal_top_left, false);
  add({2, 300, 430, 2, 2, 160}, DType::f16, Mask::none, true);
  add({2, 1, 700, 2, 2, 256}, DType::bf16, Mask::none, false);
  add({1, 70, 300, 4, 2, 256}, DType::bf16, Mask::causal_bottom_right, false);
  add({1, 70, 200, 2, 1, 192}, DType::f16, Mask::none, true);
  // The last wave's key tiles split by steps (core/tail_split.h: walks of 128
  // steps and more, GQA groups of 8 here) on a GPU of 132 SMs: 24 key tiles
  // in 5 parts (d128), 6 ragged ones in 16 (d64), 15 in 8 (d256).
  add({1, 1100, 1500, 16, 2, 128}, DType::f16, Mask::none, false);
  add({1, 2000, 700, 8, 1, 64}, DType::bf16, Mask::none, true);
  add({1, 1000, 900, 8, 1, 256}, DType::bf16, Mask::none, false);
  return cases;
}

std::vector<BackendCase> backend_cases() {
  std::vector<BackendCase> out;
  for (Backend b : backward_backends()) {
    const bool gpu = device_of(b) == DeviceKind::cuda;
    const std::vector<harness::Case> cases =
        b == Backend::cuda_wgmma ? wgmma_backward_cases() : backward_cases(gpu);
    for (const harness::Case& c : cases)
      if (takes_backward(b, c)) out.push_back({b, c});
  }
  return out;
}

class BackwardCases : public BackendCaseTest {};

TEST_P(BackwardCases, GradientsMatchTheReference) {
  const BackendCase& bc = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(std::string(to_string(bc.backend)) + " on " + harness::describe(bc.c) + ", " +
               replay_hint(seed));
  harness::GradProblem problem(bc.c, {device_of(bc.backend), 0}, seed);
  problem.run(bc.backend);
  const harness::GradAccuracy acc = problem.evaluate(bc.backend);
  EXPECT_TRUE(acc.passed()) << acc.summary();
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackwardCases, testing::ValuesIn(backend_cases()),
                         [](const auto& info) { return backend_case_name(info.param); });

class BackwardBackend : public testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    const std::string why = skip_reason(GetParam());
    if (!why.empty()) GTEST_SKIP() << why;
  }
  Device device() const { return {device_of(GetParam()), 0}; }
  DType dtype() const {
    for (const BackendInfo& info : backends())
      if (info.backend == GetParam() && !info.takes(DType::bf16)) return DType::f32;
    return DType::bf16;
  }
};

// Deterministic mode: the same bytes from every run (five runs, fresh poison
// each time), on a problem where several key tiles add into each dq row and a
// GQA group into each dk and dv; on the GPU also at head_dim 128 (cuda_wgmma's
// dQ split by columns; its adds from the first key tile up, walks falling, with
// and without a causal mask, rows without keys on top), 256 (its dQ added from
// the Q/dO stage) and 512 (cuda_mma's schedule of its own), where the backend's
// limit takes them.
TEST_P(BackwardBackend, DeterministicModeIsBitIdentical) {
  std::vector<harness::Case> cases = {
      make_case({2, 600, 700, 8, 2, 64}, dtype(), Mask::causal_bottom_right)};
  if (device().kind == DeviceKind::cuda) {
    cases.push_back(make_case({1, 500, 700, 4, 2, 128}, dtype(), Mask::none));
    cases.push_back(make_case({2, 900, 700, 4, 2, 128}, dtype(), Mask::causal_bottom_right));
    cases.push_back(make_case({1, 500, 700, 4, 2, 256}, dtype(), Mask::causal_bottom_right));
    cases.push_back(make_case({1, 200, 150, 4, 2, 512}, dtype(), Mask::causal_top_left));
  }
  for (const harness::Case& c : cases) {
    if (!takes_backward(GetParam(), c)) continue;
    SCOPED_TRACE(harness::describe(c));
    harness::GradProblem problem(c, device(), fresh_seed());
    problem.run(GetParam(), true);
    const std::vector<uint8_t> first = problem.gradient_bytes();
    for (int run = 0; run < 4; ++run) {
      problem.run(GetParam(), true);
      ASSERT_EQ(problem.gradient_bytes(), first) << "run " << run + 2 << " differs";
    }
    EXPECT_TRUE(problem.evaluate(GetParam()).passed());
  }
}

// Without query rows every key gets dk = dv = 0; without keys every row gets
// dq = 0; batch 0 writes nothing.
TEST_P(BackwardBackend, EmptyProblemsGiveZeroGradients) {
  for (const harness::Shape& shape : {harness::Shape{2, 0, 70, 4, 2, 32},
                                      harness::Shape{2, 50, 0, 4, 2, 32},
                                      harness::Shape{0, 50, 70, 4, 2, 32}}) {
    harness::GradProblem problem(make_case(shape, dtype(), Mask::causal_bottom_right), device(),
                                 fresh_seed());
    problem.run(GetParam());
    for (uint8_t byte : problem.gradient_bytes()) ASSERT_EQ(byte, 0) << harness::describe(problem.spec());
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackwardBackend, testing::ValuesIn(backward_backends()),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// A NaN in one row of q: that row's dq is NaN throughout, every other row's dq
// stays finite (of q's rows, dq_i depends on q_i alone), and dk and dv of a key
// the row sees are NaN.
TEST_P(BackwardBackend, NanInOneQueryRowPropagatesThere) {
  const Backend backend = GetParam();
  constexpr int kRows = 40, kKeys = 70, kDim = 16, kNanRow = 30;
  DenseProblem problem(Dense(1, kRows, 1, kDim), Dense(1, kKeys, 1, kDim), Dense(1, kKeys, 1, kDim));
  problem.dtype = dtype();
  problem.mask = Mask::causal_top_left;
  std::vector<float> dout(size_t(kRows) * kDim);
  uint64_t state = fresh_seed();
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float((state >> 40) & 0xFFFF) / 65536.0f - 0.5f;
  };
  for (Dense* t : {&problem.q, &problem.k, &problem.v})
    for (float& x : t->values) x = uniform();
  for (float& x : dout) x = uniform();
  problem.q.at(0, kNanRow, 0, 3) = std::numeric_limits<float>::quiet_NaN();
  const DenseGradients g = run_dense_backward(problem, dout, backend);
  for (int i = 0; i < kRows; ++i)
    for (int c = 0; c < kDim; ++c) {
      const float x = g.dq.at(0, i, 0, c);
      if (i == kNanRow) EXPECT_TRUE(std::isnan(x)) << "dq row " << i << " col " << c;
      else EXPECT_TRUE(std::isfinite(x)) << "dq row " << i << " col " << c;
    }
  EXPECT_TRUE(std::isnan(g.dk.at(0, 0, 0, 0))) << "key 0 is seen by the NaN row";
  EXPECT_TRUE(std::isnan(g.dv.at(0, 0, 0, 0))) << "key 0 is seen by the NaN row";
}

// Rows with no visible key (bottom-right, more rows than keys) get dq exactly 0.
TEST_P(BackwardBackend, RowsWithoutKeysGetZeroDq) {
  constexpr int kRows = 90, kKeys = 20, kDim = 8;
  DenseProblem problem(Dense(1, kRows, 2, kDim), Dense(1, kKeys, 1, kDim), Dense(1, kKeys, 1, kDim));
  problem.dtype = dtype();
  problem.mask = Mask::causal_bottom_right;
  for (Dense* t : {&problem.q, &problem.k, &problem.v})
    for (size_t e = 0; e < t->values.size(); ++e) t->values[e] = std::sin(0.37f * float(e));
  std::vector<float> dout(size_t(kRows) * 2 * kDim);
  for (size_t e = 0; e < dout.size(); ++e) dout[e] = std::cos(0.11f * float(e));
  const DenseGradients g = run_dense_backward(problem, dout, GetParam());
  for (int i = 0; i < kRows - kKeys; ++i)
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < kDim; ++c) ASSERT_EQ(g.dq.at(0, i, h, c), 0.0f) << "row " << i;
  for (float x : g.dk.values) ASSERT_TRUE(std::isfinite(x));
}

// The reference's gradients are the derivatives of its forward: central
// differences of L = Σ dout∘out on fp32 inputs that lie on a grid of 2^-10
// (so q ± 2^-10 is exact), the forward's outputs read in float64.
TEST(ReferenceBackward, MatchesFiniteDifferences) {
  constexpr int kRows = 5, kKeys = 7, kDim = 3;
  constexpr float kStep = 0x1p-10f;
  std::vector<float> q(kRows * kDim), k(kKeys * kDim), v(kKeys * kDim), dout(kRows * kDim);
  uint64_t state = fresh_seed();
  for (std::vector<float>* t : {&q, &k, &v, &dout})
    for (float& x : *t) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      x = float(int((state >> 40) % 2048) - 1024) * kStep;  // in [-1, 1), on the grid
    }
  Params fwd;
  std::vector<float> out(q.size());
  fwd.q = contiguous_view(q.data(), DType::f32, 1, kRows, 1, kDim);
  fwd.k = contiguous_view(k.data(), DType::f32, 1, kKeys, 1, kDim);
  fwd.v = contiguous_view(v.data(), DType::f32, 1, kKeys, 1, kDim);
  fwd.out = contiguous_view(out.data(), DType::f32, 1, kRows, 1, kDim);
  fwd.mask = Mask::causal_bottom_right;
  std::vector<int> rows(kRows);
  for (int i = 0; i < kRows; ++i) rows[i] = i;
  auto loss = [&] {
    const std::vector<double> o = reference_rows(fwd, rows);
    double sum = 0;
    for (size_t e = 0; e < o.size(); ++e) sum += o[e] * dout[e];
    return sum;
  };

  std::vector<float> lse(kRows), dq(q.size()), dk(k.size()), dv(v.size());
  fwd.lse = lse.data();
  forward(fwd);
  BackwardParams bwd = harness::backward_of(fwd);
  bwd.backend = Backend::reference;
  bwd.dout = contiguous_view(dout.data(), DType::f32, 1, kRows, 1, kDim);
  bwd.dq = contiguous_view(dq.data(), DType::f32, 1, kRows, 1, kDim);
  bwd.dk = contiguous_view(dk.data(), DType::f32, 1, kKeys, 1, kDim);
  bwd.dv = contiguous_view(dv.data(), DType::f32, 1, kKeys, 1, kDim);
  backward(bwd);

  const struct {
    std::vector<float>& input;
    const std::vector<float>& grad;
    const char* name;
  } pairs[] = {{q, dq, "dq"}, {k, dk, "dk"}, {v, dv, "dv"}};
  for (const auto& [input, grad, name] : pairs)
    for (size_t e = 0; e < input.size(); ++e) {
      const float x = input[e];
      input[e] = x + kStep;
      const double up = loss();
      input[e] = x - kStep;
      const double down = loss();
      input[e] = x;
      EXPECT_NEAR(grad[e], (up - down) / (2 * kStep), 2e-5) << name << "[" << e << "]";
    }
}

// The argument rules: each rejected call names the argument and writes nothing.
class BackwardValidation : public testing::Test {
 protected:
  static constexpr int kN = 8, kH = 2, kD = 4;
  std::vector<float> q = std::vector<float>(kN * kH * kD, 0.5f), k = q, v = q, out = q, dout = q;
  std::vector<float> dq = std::vector<float>(q.size(), 7.0f), dk = dq, dv = dq;
  std::vector<float> lse = std::vector<float>(kN * kH, 0.0f);
  BackwardParams params() {
    BackwardParams p;
    auto view = [](std::vector<float>& t) {
      return contiguous_view(t.data(), DType::f32, 1, kN, kH, kD);
    };
    p.q = view(q);
    p.k = view(k);
    p.v = view(v);
    p.out = view(out);
    p.dout = view(dout);
    p.dq = view(dq);
    p.dk = view(dk);
    p.dv = view(dv);
    p.lse = lse.data();
    return p;
  }
  void expect_rejected(const BackwardParams& p, const std::string& text) {
    try {
      backward(p);
      ADD_FAILURE() << "accepted; expected an error containing '" << text << "'";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(text));
    }
    for (const std::vector<float>* g : {&dq, &dk, &dv})
      for (float x : *g) ASSERT_EQ(x, 7.0f) << "a rejected call wrote a gradient";
  }
};

TEST_F(BackwardValidation, EachRuleNamesItsArgument) {
  BackwardParams p = params();
  p.lse = nullptr;
  expect_rejected(p, "lse: is null");
  p = params();
  p.dq.shape[1] = kN - 1;
  expect_rejected(p, "dq: seqlen is 7, must equal q's seqlen (8)");
  p = params();
  p.dk.dtype = DType::f16;
  expect_rejected(p, "dk: dtype f16 differs from k's dtype f32");
  p = params();
  p.dout.shape[3] = kD + 1;
  expect_rejected(p, "dout: head_dim is 5, must equal out's head_dim (4)");
  p = params();
  p.dv.data = q.data();
  expect_rejected(p, "dv: memory overlaps q");
  p = params();
  p.dk.data = dq.data();
  expect_rejected(p, "dk: memory overlaps dq");
  p = params();
  p.scale = std::numeric_limits<float>::infinity();
  expect_rejected(p, "scale: is inf, must be finite");
  p = params();
  p.dq.stride[1] = 0;
  expect_rejected(p, "dq: seqlen stride is 0, which makes elements overlap");
  p = params();
  p.variants.window_left = -2;
  expect_rejected(p, "variants.window_left: is -2");
  p = params();
  p.variants.softcap = std::numeric_limits<float>::quiet_NaN();
  expect_rejected(p, "variants.softcap: is nan");
  p = params();
  const float slopes[kH] = {0.5f, 0.25f};
  p.scale = 0.0f;
  p.variants.alibi_slopes = slopes;
  expect_rejected(p, "scale: is 0");
}

TEST_F(BackwardValidation, BackendsWithoutBackwardSaySo) {
  BackwardParams p = params();
  p.backend = Backend::cuda_naive;
  expect_rejected(p, "backend: cuda_naive runs on cuda tensors, but q is on cpu");
  for (const BackendInfo& info : backends())
    if (info.device == DeviceKind::cpu) {
      EXPECT_TRUE(info.has_backward()) << info.name;
    }
  EXPECT_EQ(select_backward_backend(params()), Backend::cpu);
}

}  // namespace
}  // namespace flashattn::test
