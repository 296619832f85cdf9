// v's head_dim other than q's and k's (head_dim_v ≠ head_dim, as in multi-head
// latent attention's prefill, 192 and 128): out takes v's head_dim, dq and dk
// q's and k's, dv v's. Every backend whose table row takes such pairs runs them,
// forward and backward, against the float64 oracles, on shapes where either
// head dim is the wider, 1-wide ones, both beyond a kernel's bucket, masks that
// leave rows without keys, GQA, strided views, a packed batch and KV caches
// (contiguous and paged), and MLA's pair with softcap.
// Backends that do not take them refuse with an error naming v's head_dim; out,
// dout and the gradients of the wrong width are refused by validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "cases.h"
#include "dense.h"
#include "grad_problem.h"

namespace flashattn::test {
namespace {

struct PairSpec {
  harness::Shape shape;  // batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, head_dim_v
  Mask mask;
  bool strided;
};

const std::vector<PairSpec> kSpecs = {
    {{1, 130, 130, 2, 1, 192, 128}, Mask::causal_bottom_right, false},  // MLA prefill's pair
    {{2, 300, 260, 4, 1, 192, 128}, Mask::none, false},                // across key blocks, MQA
    {{1, 200, 333, 2, 2, 176, 104}, Mask::causal_top_left, true},       // inside 192's and 128's
    {{2, 65, 130, 4, 2, 64, 128}, Mask::causal_top_left, true},         // v wider than q
    {{1, 130, 50, 2, 2, 40, 24}, Mask::causal_bottom_right, false},     // rows without keys
    {{1, 1, 300, 4, 1, 128, 64}, Mask::none, false},                    // one query row, MQA
    {{1, 33, 33, 2, 2, 1, 3}, Mask::none, true},                        // the narrowest
    {{1, 70, 90, 1, 1, 256, 512}, Mask::causal_top_left, false},        // beyond 256
    {{1, 150, 200, 2, 1, 264, 320}, Mask::none, false},                 // 384's widths at 320
    {{1, 150, 200, 2, 2, 320, 264}, Mask::causal_top_left, true},       // likewise, v narrower
    {{1, 100, 130, 2, 1, 280, 384}, Mask::none, false},                 // q within 288, v not
    {{1, 20, 24, 1, 1, 16, 1024}, Mask::none, false},                   // one very wide side
};

std::vector<harness::Case> pair_cases() {
  std::vector<harness::Case> out;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (const PairSpec& spec : kSpecs)
      out.push_back(make_case(spec.shape, dtype, spec.mask, spec.strided, 8));
  // A window with softcap, a packed batch and a KV cache with appended keys.
  for (DType dtype : {DType::f32, DType::bf16}) {
    harness::Case windowed = make_case({1, 100, 100, 2, 2, 96, 64}, dtype, Mask::causal_top_left);
    windowed.window_left = 20;
    windowed.softcap = 30.0f;
    out.push_back(windowed);
    // MLA's pair with a score variant: on Hopper the 256 bucket's variant kernel, v padded.
    harness::Case capped = make_case({1, 100, 100, 2, 1, 192, 128}, dtype, Mask::causal_bottom_right);
    capped.softcap = 30.0f;
    out.push_back(capped);
    out.push_back(harness::packed_case(make_case({1, 1, 1, 2, 1, 192, 128}, dtype, Mask::causal_bottom_right),
                                       {{70, 70}, {0, 5}, {1, 1}, {40, 130}}));
    harness::Case::Cache cache;
    cache.cached = {100, 0, 257};
    cache.appended = 2;
    cache.capacity = 300;
    out.push_back(harness::cache_case(make_case({1, 2, 1, 8, 2, 192, 128}, dtype, Mask::causal_bottom_right),
                                      cache));
    cache.page_size = 16;
    out.push_back(harness::cache_case(make_case({1, 1, 1, 4, 1, 64, 32}, dtype, Mask::causal_bottom_right),
                                      cache));
  }
  return out;
}

const BackendInfo& info_of(Backend backend) {
  for (const BackendInfo& info : backends())
    if (info.backend == backend) return info;
  throw std::logic_error("no such backend");
}

// Whether `backend` runs c at all (its layout rules: dtypes, head-dim limits,
// packed batches, caches; cuda_wgmma's multiples of 8).
bool runs(Backend backend, const harness::Case& c, bool backward) {
  const BackendInfo& info = info_of(backend);
  if (!info.takes(c.dtype)) return false;
  if (harness::is_packed(c) && !(backward ? info.takes_backward_sequences : info.takes_sequences))
    return false;
  if (harness::is_cache(c) &&
      (backward || !info.takes_kv_cache || (c.cache->page_size > 0 && !info.takes_paged_kv)))
    return false;
  // cuda_mma's paged caches run on its decode kernel, which takes one head_dim.
  if (backend == Backend::cuda_mma && harness::is_cache(c) && c.cache->page_size > 0) return false;
  if (backend == Backend::cuda_wgmma &&
      (c.shape.head_dim % 8 != 0 || harness::value_head_dim(c.shape) % 8 != 0))
    return false;
  const int d = c.shape.head_dim, d_v = harness::value_head_dim(c.shape);
  return backward ? info.takes_backward_head_dims(d, d_v) : info.takes_head_dims(d, d_v);
}

std::vector<BackendCase> cases(bool backward) {
  std::vector<BackendCase> out;
  for (const BackendInfo& info : backends())
    for (const harness::Case& c : pair_cases())
      if (runs(info.backend, c, backward)) out.push_back({info.backend, c});
  return out;
}

class HeadDimPairForward : public BackendCaseTest {};

TEST_P(HeadDimPairForward, MatchesFloat64Reference) { expect_accurate(GetParam(), device()); }

INSTANTIATE_TEST_SUITE_P(AllBackends, HeadDimPairForward, testing::ValuesIn(cases(false)),
                         [](const auto& info) { return backend_case_name(info.param); });

class HeadDimPairBackward : public BackendCaseTest {};

TEST_P(HeadDimPairBackward, GradientsMatchFloat64Reference) {
  expect_gradients_accurate(GetParam(), device());
}

INSTANTIATE_TEST_SUITE_P(AllBackends, HeadDimPairBackward, testing::ValuesIn(cases(true)),
                         [](const auto& info) { return backend_case_name(info.param); });

// Backends whose row says they do not take the pair refuse it, naming v's
// head_dim; automatic runs it.
class HeadDimPairRefusal : public BackendDtypeTest {};

TEST_P(HeadDimPairRefusal, RefusedWhereTheTableSaysSo) {
  const BackendInfo& info = info_of(backend());
  DenseProblem problem{Dense(1, 8, 2, 64), Dense(1, 8, 2, 64), Dense(1, 8, 2, 32)};
  problem.dtype = dtype();
  const bool takes = info.takes_head_dim_v;
  try {
    const DenseResult r = run_dense(problem, backend());
    EXPECT_TRUE(takes) << to_string(backend()) << " ran a head_dim_v pair its row refuses";
    EXPECT_EQ(r.out.head_dim, 32);
  } catch (const Error& e) {
    EXPECT_FALSE(takes) << e.what();
    EXPECT_NE(std::string(e.what()).find("v: head_dim 32 differs from q's and k's (64)"),
              std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, HeadDimPairRefusal, testing::ValuesIn(backend_dtypes()),
                         backend_dtype_name);

// out, dout, dv and k_new/v_new of the wrong width are refused, naming the tensor.
TEST(HeadDimPairValidation, OutTakesVsHeadDim) {
  std::vector<float> q(8 * 64), k(8 * 64), v(8 * 32), out(8 * 64, -1.0f);
  Params p;
  p.q = contiguous_view(q.data(), DType::f32, 1, 8, 1, 64);
  p.k = contiguous_view(k.data(), DType::f32, 1, 8, 1, 64);
  p.v = contiguous_view(v.data(), DType::f32, 1, 8, 1, 32);
  p.out = contiguous_view(out.data(), DType::f32, 1, 8, 1, 64);
  expect_forward_rejected(p, "out: head_dim is 64, must equal v's head_dim (32)");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == -1.0f; }));
  p.k = contiguous_view(k.data(), DType::f32, 1, 8, 1, 32);
  p.out = contiguous_view(out.data(), DType::f32, 1, 8, 1, 32);
  expect_forward_rejected(p, "k: head_dim is 32, must equal q's head_dim (64)");
}

TEST(HeadDimPairValidation, GradientsTakeTheirTensorsWidths) {
  std::vector<float> q(8 * 64), k(8 * 64), v(8 * 32), out(8 * 32), dout(8 * 32), lse(8);
  std::vector<float> dq(8 * 64, -1.0f), dk(8 * 64, -1.0f), dv(8 * 64, -1.0f);
  BackwardParams p;
  p.q = contiguous_view(q.data(), DType::f32, 1, 8, 1, 64);
  p.k = contiguous_view(k.data(), DType::f32, 1, 8, 1, 64);
  p.v = contiguous_view(v.data(), DType::f32, 1, 8, 1, 32);
  p.out = contiguous_view(out.data(), DType::f32, 1, 8, 1, 32);
  p.dout = contiguous_view(dout.data(), DType::f32, 1, 8, 1, 32);
  p.lse = lse.data();
  p.dq = contiguous_view(dq.data(), DType::f32, 1, 8, 1, 64);
  p.dk = contiguous_view(dk.data(), DType::f32, 1, 8, 1, 64);
  p.dv = contiguous_view(dv.data(), DType::f32, 1, 8, 1, 64);
  try {
    backward(p);
    ADD_FAILURE() << "a dv of k's width was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dv: head_dim is 64, must equal v's head_dim (32)"),
              std::string::npos)
        << e.what();
  }
  for (const auto* g : {&dq, &dk, &dv})
    EXPECT_TRUE(std::all_of(g->begin(), g->end(), [](float x) { return x == -1.0f; }));
}

}  // namespace
}  // namespace flashattn::test
