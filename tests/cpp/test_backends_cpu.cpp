// The CPU backends on random problems of awkward shapes (the shared case list),
// scored against the float64 reference; and the reference itself against a
// computation small enough to do by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cases.h"
#include "dense.h"

namespace flashattn::test {
namespace {

class CpuBackend : public testing::TestWithParam<BackendCase> {};

TEST_P(CpuBackend, MatchesFloat64Reference) { expect_accurate(GetParam(), Device{}); }

INSTANTIATE_TEST_SUITE_P(
    SharedCases, CpuBackend,
    testing::ValuesIn(with_backends({Backend::reference, Backend::cpu}, shared_cases())),
    [](const testing::TestParamInfo<BackendCase>& info) { return backend_case_name(info.param); });

// Two queries, two keys, head_dim 2, scale 1:
//   q = [[1, 0], [0, 1]], k = [[1, 0], [0, 1]], v = [[1, 2], [3, 4]].
// Row 0 scores (1, 0), row 1 scores (0, 1), so with w = e/(e + 1):
//   out_0 = w·v_0 + (1 − w)·v_1,  out_1 = (1 − w)·v_0 + w·v_1,  lse = ln(e + 1).
// Top-left causal hides key 1 from row 0: out_0 = v_0, lse_0 = 1.
DenseProblem two_by_two(Mask mask) {
  DenseProblem p{Dense(1, 2, 1, 2), Dense(1, 2, 1, 2), Dense(1, 2, 1, 2)};
  p.q.values = {1, 0, 0, 1};
  p.k.values = {1, 0, 0, 1};
  p.v.values = {1, 2, 3, 4};
  p.scale = 1.0f;
  p.mask = mask;
  return p;
}

TEST(ReferenceBackend, MatchesHandComputation) {
  const DenseResult r = run_dense(two_by_two(Mask::none), Backend::reference);
  const double e = std::exp(1.0), w = e / (e + 1);
  const double expected[2][2] = {{w * 1 + (1 - w) * 3, w * 2 + (1 - w) * 4},
                                 {(1 - w) * 1 + w * 3, (1 - w) * 2 + w * 4}};
  for (int i = 0; i < 2; ++i) {
    for (int c = 0; c < 2; ++c) EXPECT_NEAR(r.out.at(0, i, 0, c), expected[i][c], 1e-6);
    EXPECT_NEAR(r.lse_at(0, 0, i), std::log(e + 1), 1e-6);
  }
}

TEST(ReferenceBackend, MatchesHandComputationCausal) {
  const DenseResult r = run_dense(two_by_two(Mask::causal_top_left), Backend::reference);
  const double e = std::exp(1.0), w = e / (e + 1);
  EXPECT_FLOAT_EQ(r.out.at(0, 0, 0, 0), 1.0f);
  EXPECT_FLOAT_EQ(r.out.at(0, 0, 0, 1), 2.0f);
  EXPECT_FLOAT_EQ(r.lse_at(0, 0, 0), 1.0f);
  EXPECT_NEAR(r.out.at(0, 1, 0, 0), (1 - w) * 1 + w * 3, 1e-6);
  EXPECT_NEAR(r.out.at(0, 1, 0, 1), (1 - w) * 2 + w * 4, 1e-6);
  EXPECT_NEAR(r.lse_at(0, 0, 1), std::log(e + 1), 1e-6);
}

TEST(AutomaticBackend, IsCpuForCpuTensors) {
  DenseProblem p = two_by_two(Mask::none);
  float out[4], lse[2];
  Params params;
  params.q = contiguous_view(p.q.values.data(), DType::f32, 1, 2, 1, 2);
  params.k = contiguous_view(p.k.values.data(), DType::f32, 1, 2, 1, 2);
  params.v = contiguous_view(p.v.values.data(), DType::f32, 1, 2, 1, 2);
  params.out = contiguous_view(out, DType::f32, 1, 2, 1, 2);
  params.lse = lse;
  EXPECT_EQ(select_backend(params), Backend::cpu);
  const std::vector<Backend> cpu_backends = available_backends(DeviceKind::cpu);
  EXPECT_EQ(cpu_backends, (std::vector<Backend>{Backend::reference, Backend::cpu}));
}

}  // namespace
}  // namespace flashattn::test
