// The exercise's entry point, solve(Q, K, V, output, N, d_model, h): fp32 device
// matrices N × d_model, head i on columns [i·d_model/h, (i+1)·d_model/h), values
// in [-10, 10], exact to 1e-5 against the float64 reference. Bad arguments
// write nothing and say why through solve_last_error().
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device_memory.h"
#include "flashattn/flashattn.hpp"
#include "seed.h"
#include "solve.h"

namespace flashattn::test {
namespace {

struct Exercise {
  int n, d_model, h;
};

// Relative L2 error of solve's output against the float64 reference.
double solve_error(const Exercise& e, uint64_t seed) {
  const size_t count = size_t(e.n) * e.d_model;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-10.0f, 10.0f);
  std::vector<float> q(count), k(count), v(count);
  for (auto* m : {&q, &k, &v})
    for (float& x : *m) x = value(rng);
  std::vector<float> out(count, std::numeric_limits<float>::quiet_NaN());

  harness::DeviceBuffer dq(count * 4, 0), dk(count * 4, 0), dv(count * 4, 0), dout(count * 4, 0);
  dq.upload(q.data());
  dk.upload(k.data());
  dv.upload(v.data());
  dout.upload(out.data());
  solve(static_cast<float*>(dq.data()), static_cast<float*>(dk.data()),
        static_cast<float*>(dv.data()), static_cast<float*>(dout.data()), e.n, e.d_model, e.h);
  EXPECT_STREQ(solve_last_error(), "");
  harness::device_synchronize(0);
  dout.download(out.data());

  // The same matrices as (1, N, h, head_dim) host views; reference_rows gives
  // (1, N, h, head_dim) = N × d_model.
  const int head_dim = e.d_model / e.h;
  std::vector<float> unused_out(count);
  Params p;
  p.q = contiguous_view(q.data(), DType::f32, 1, e.n, e.h, head_dim);
  p.k = contiguous_view(k.data(), DType::f32, 1, e.n, e.h, head_dim);
  p.v = contiguous_view(v.data(), DType::f32, 1, e.n, e.h, head_dim);
  p.out = contiguous_view(unused_out.data(), DType::f32, 1, e.n, e.h, head_dim);
  std::vector<int> rows(e.n);
  for (int i = 0; i < e.n; ++i) rows[i] = i;
  const std::vector<double> ref = reference_rows(p, rows);
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < count; ++i) {
    err2 += (out[i] - ref[i]) * (out[i] - ref[i]);
    ref2 += ref[i] * ref[i];
  }
  const double rel = std::sqrt(err2 / ref2);
  return std::isnan(rel) ? INFINITY : rel;
}

class Solve : public testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: solve() runs on the GPU";
  }
};

TEST_F(Solve, ExerciseShapesAreExact) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(replay_hint(seed));
  for (const Exercise& e : std::vector<Exercise>{{1, 2, 1},
                                                 {17, 96, 3},
                                                 {1000, 1024, 16},
                                                 {1000, 1024, 1},
                                                 {1000, 1024, 1024},
                                                 {1000, 512, 8}}) {
    SCOPED_TRACE("N " + std::to_string(e.n) + " d_model " + std::to_string(e.d_model) + " h " +
                 std::to_string(e.h));
    EXPECT_LE(solve_error(e, seed), 1e-5);
  }
}

TEST_F(Solve, RandomExercisesAreExact) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(replay_hint(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 12; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 1000)(rng);
    const int d_model = std::uniform_int_distribution<int>(2, 1024)(rng);
    std::vector<int> divisors;
    for (int h = 1; h <= d_model; ++h)
      if (d_model % h == 0) divisors.push_back(h);
    const int h = divisors[std::uniform_int_distribution<size_t>(0, divisors.size() - 1)(rng)];
    SCOPED_TRACE("N " + std::to_string(n) + " d_model " + std::to_string(d_model) + " h " +
                 std::to_string(h));
    EXPECT_LE(solve_error({n, d_model, h}, seed + trial), 1e-5);
  }
}

TEST_F(Solve, BadArgumentsWriteNothing) {
  const size_t count = 4 * 6;
  std::vector<float> sentinel(count, 7.0f), host(count, 1.0f), back(count);
  harness::DeviceBuffer q(count * 4, 0), out(count * 4, 0);
  q.upload(host.data());
  out.upload(sentinel.data());
  const float* dq = static_cast<float*>(q.data());
  float* dout = static_cast<float*>(out.data());
  struct Bad {
    int n, d_model, h;
    const char* says;
  };
  for (const Bad& bad : {Bad{4, 6, 4, "d_model % h"}, Bad{0, 6, 1, "N:"}, Bad{4, 0, 1, "d_model:"},
                         Bad{4, 6, 0, "h:"}, Bad{4, 6, 7, "h:"}}) {
    solve(dq, dq, dq, dout, bad.n, bad.d_model, bad.h);
    EXPECT_NE(std::string(solve_last_error()).find(bad.says), std::string::npos)
        << solve_last_error();
  }
  solve(nullptr, dq, dq, dout, 4, 6, 2);
  EXPECT_NE(std::string(solve_last_error()), "");
  out.download(back.data());
  EXPECT_EQ(back, sentinel);
}

}  // namespace
}  // namespace flashattn::test
