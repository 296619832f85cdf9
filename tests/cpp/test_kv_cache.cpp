// KV-cache calls (flashattn::KVCache): q against a contiguous or paged cache
// with each sequence's own length, keys appended by the call first, on every
// backend whose table row says it takes them, against float64 oracles computed
// on each sequence's keys as a dense batch of one (tools/harness: Problem
// splits a cache case into its sequences and checks the appended rows bit for
// bit). The cache's rows past every length hold NaN, so a kernel that reads
// them fails. Lengths include 0, 1 and the capacity; pages of 1 to 256 keys in
// a random order; GQA groups, several query rows, masks, windows and score
// variants; split-KV counts chosen and forced; unchecked calls, including
// lengths and pages out of range (NaN rows for that sequence only). Bad
// arguments name themselves and write nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cases.h"
#include "flashattn/flashattn.h"
#include "dense.h"
#include "device_memory.h"
#include "seed.h"

namespace flashattn::test {
namespace {

using Cache = harness::Case::Cache;

harness::Case cached(harness::Shape heads, DType dtype, Mask mask, Cache cache) {
  harness::Case c = make_case(heads, dtype, mask);
  return harness::cache_case(c, std::move(cache));
}

// Cases at the CPU's sizes: every layout, lengths 0, 1 and at capacity.
std::vector<harness::Case> cache_cases() {
  std::vector<harness::Case> cases;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (Mask mask : {Mask::none, Mask::causal_bottom_right, Mask::causal_top_left})
      for (int page : {0, 16}) {
        cases.push_back(cached({0, 1, 0, 8, 2, 64}, dtype, mask, {{0, 1, 37, 100}, 0, 100, page}));
        cases.push_back(cached({0, 3, 0, 4, 4, 80}, dtype, mask, {{5, 0, 97}, 3, 100, page}));
      }
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    cases.push_back(cached({0, 1, 0, 4, 1, 128}, dtype, Mask::causal_bottom_right,
                           {{200, 1, 63}, 1, 201, 1}));
    cases.push_back(cached({0, 17, 0, 8, 2, 32}, dtype, Mask::causal_bottom_right,
                           {{30, 150}, 17, 170, 64}));
    harness::Case varied =
        cached({0, 2, 0, 6, 2, 64}, dtype, Mask::causal_bottom_right, {{90, 300}, 2, 320, 32});
    varied.window_left = 40;
    varied.softcap = 20.0f;
    varied.alibi = true;
    varied.input_std = 2.0f;
    cases.push_back(varied);
  }
  // Pages that the CPU's key tiles (64 keys) straddle or fill: 1, 3, 16 and 64
  // keys, on head dims 1, 80 and 200; a decode step that reads the cache only
  // (one query row: dot-product scores) in every dtype, and one that appends
  // to it (five rows: the matrix kernel); GQA; causal. Then a prefill into a
  // paged cache (two query tiles), and long decodes whose keys the CPU splits
  // over its threads, pages of 100 keys ending inside tiles.
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  const Mask masks[] = {Mask::causal_bottom_right, Mask::none, Mask::causal_top_left};
  int n = 0;
  for (int page : {1, 3, 16, 64})
    for (int head_dim : {1, 80, 200}) {
      for (DType dtype : dtypes)
        cases.push_back(cached({0, 1, 0, 6, 2, head_dim}, dtype, Mask::causal_bottom_right,
                               {{0, 1, 130, 197}, 0, 200, page}));
      cases.push_back(cached({0, 5, 0, 6, 2, head_dim}, dtypes[n % 3], masks[n / 3 % 3],
                             {{0, 1, 130, 197}, 3, 200, page}));
      ++n;
    }
  cases.push_back(cached({0, 70, 0, 4, 2, 64}, DType::f32, Mask::causal_bottom_right,
                         {{0, 50}, 70, 130, 3}));
  cases.push_back(cached({0, 1, 0, 2, 1, 128}, DType::bf16, Mask::causal_bottom_right,
                         {{900}, 1, 1000, 16}));
  cases.push_back(cached({0, 1, 0, 2, 1, 128}, DType::f32, Mask::none, {{1234, 77}, 0, 1300, 100}));
  return cases;
}

// The GPU also gets long caches (split-KV), explicit split counts (merged in a
// cluster and by the merge kernel), head dims 200 and 256, big groups,
// unchecked calls and pages of 256.
std::vector<harness::Case> gpu_cache_cases() {
  std::vector<harness::Case> cases = cache_cases();
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    cases.push_back(cached({0, 1, 0, 32, 8, 128}, dtype, Mask::causal_bottom_right,
                           {{5000, 33000, 1}, 1, 33001, 0}));
    cases.push_back(cached({0, 1, 0, 32, 8, 128}, dtype, Mask::none,
                           {{9000, 20, 4096}, 1, 9001, 256}));
  }
  for (DType dtype : {DType::f16, DType::bf16}) {
    // Forced counts: on sm_90 2 to 16 splits of a contiguous cache, or of pages
    // the kernel addresses whole (16 and 64 keys), merge in a cluster; 17 and
    // 128 by the merge kernel.
    for (int splits : {1, 2, 7, 16, 17, 128})
      for (int page : {0, 16, 64})
        cases.push_back(cached({0, 4, 0, 16, 2, 64}, dtype, Mask::causal_bottom_right,
                               {{3000, 700}, 4, 3004, page, true, splits}));
    cases.push_back(cached({0, 1, 0, 8, 1, 256}, dtype, Mask::causal_bottom_right,
                           {{4000, 1, 2500}, 1, 4001, 0, true, 16}));
    cases.push_back(cached({0, 8, 0, 64, 8, 128}, dtype, Mask::causal_bottom_right,
                           {{2000, 100}, 8, 2008, 0, true, 2}));
    cases.push_back(cached({0, 1, 0, 8, 1, 256}, dtype, Mask::causal_bottom_right,
                           {{2000, 1, 0}, 1, 2001, 16, false}));
    cases.push_back(cached({0, 3, 0, 4, 1, 200}, dtype, Mask::causal_bottom_right,
                           {{1500, 31}, 3, 1503, 0, false}));
    cases.push_back(cached({0, 8, 0, 64, 8, 128}, dtype, Mask::causal_bottom_right,
                           {{4000, 100}, 8, 4008, 128}));
    harness::Case varied =
        cached({0, 2, 0, 8, 2, 128}, dtype, Mask::causal_bottom_right, {{6000, 900}, 2, 6002, 32});
    varied.window_left = 1000;
    varied.softcap = 30.0f;
    varied.alibi = true;
    cases.push_back(varied);
  }
  return cases;
}

std::vector<BackendCase> forward_cases() {
  std::vector<BackendCase> out;
  for (const BackendInfo& info : backends()) {
    if (!info.takes_kv_cache) continue;
    const bool gpu = info.device == DeviceKind::cuda;
    for (const harness::Case& c : gpu ? gpu_cache_cases() : cache_cases()) {
      if (!backend_supports(info.backend, c.dtype, c.shape.head_dim)) continue;
      if (c.cache->page_size > 0 && !info.takes_paged_kv) continue;
      if (!c.cache->checked && info.backend != Backend::cuda_mma) continue;
      // The scalar backends on the long caches: kept to the CPU-sized cases.
      if ((info.backend == Backend::reference || info.backend == Backend::cuda_naive) &&
          c.shape.seqlen_k > 1000)
        continue;
      out.push_back({info.backend, c});
    }
  }
  return out;
}

class CacheForward : public BackendCaseTest {};

TEST_P(CacheForward, MatchesEachSequenceAlone) { expect_accurate(GetParam(), device()); }

INSTANTIATE_TEST_SUITE_P(AllBackends, CacheForward, testing::ValuesIn(forward_cases()),
                         [](const auto& info) { return backend_case_name(info.param); });

// Unchecked calls on the GPU with a length past the capacity or a page out of
// range: that sequence's rows are NaN, the others exact, and the cache is
// written nowhere outside it.
class CacheUnchecked : public testing::TestWithParam<int> {};

TEST_P(CacheUnchecked, BadSequenceGetsNaNOnly) {
  const std::string why = skip_reason(Backend::cuda_mma);
  if (!why.empty()) GTEST_SKIP() << why;
  const bool bad_page = GetParam() == 1;
  harness::Case c = cached({0, 1, 0, 8, 2, 64}, DType::bf16, Mask::causal_bottom_right,
                           {{300, 100, 200}, 1, 400, bad_page ? 16 : 0, false});
  harness::Problem problem(c, {DeviceKind::cuda, 0}, fresh_seed());
  Params p = problem.params(Backend::cuda_mma);
  std::vector<int32_t> lengths = {300, 100, 200};
  if (!bad_page) lengths[1] = 400;  // 400 + 1 appended > capacity 400
  harness::DeviceBuffer upload(lengths.size() * sizeof(int32_t), 0);
  upload.upload(lengths.data());
  p.kv_cache.seqlens = static_cast<const int32_t*>(upload.data());
  std::vector<int32_t> table = problem.block_table();
  harness::DeviceBuffer table_upload;
  if (bad_page) {
    table[1 * p.kv_cache.pages_per_sequence + 2] = 1 << 30;  // sequence 1's third page
    table_upload = harness::DeviceBuffer(table.size() * sizeof(int32_t), 0);
    table_upload.upload(table.data());
    p.kv_cache.block_table = static_cast<const int32_t*>(table_upload.data());
  }
  forward(p);
  const std::vector<float> out = problem.output();
  const int64_t per_sequence = int64_t(8) * 64;
  for (int b = 0; b < 3; ++b) {
    int nan = 0;
    for (int64_t e = 0; e < per_sequence; ++e) nan += std::isnan(out[b * per_sequence + e]);
    EXPECT_EQ(nan, b == 1 ? per_sequence : 0) << "sequence " << b;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CacheUnchecked, testing::Values(0, 1),
                         [](const auto& info) { return info.param ? "page" : "length"; });

// A backend without KV-cache calls refuses them, naming kv_cache.
TEST(CacheRefused, NamesKVCache) {
  const std::string why = skip_reason(Backend::cuda_wgmma);
  if (!why.empty()) GTEST_SKIP() << why;
  harness::Problem problem(
      cached({0, 1, 0, 4, 1, 64}, DType::f16, Mask::none, {{10, 20}, 0, 32, 0}),
      {DeviceKind::cuda, 0}, fresh_seed());
  try {
    forward(problem.params(Backend::cuda_wgmma));
    FAIL() << "cuda_wgmma accepted a KV cache";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::unsupported);
    EXPECT_NE(std::string(e.what()).find("kv_cache:"), std::string::npos) << e.what();
  }
}

// Bad KV-cache arguments on the CPU: each error names the argument and the
// rule; neither out, lse nor the cache is written.
struct BadCache {
  std::string name;
  std::vector<int32_t> seqlens;
  std::vector<int32_t> block_table;  // empty: contiguous
  int appended;
  std::string message;
};

class CacheValidation : public testing::TestWithParam<BadCache> {};

TEST_P(CacheValidation, RejectsAndWritesNothing) {
  const BadCache& bad = GetParam();
  constexpr int kBatch = 2, kNq = 1, kHeads = 2, kDim = 8, kPage = 4, kPages = 3;
  const bool paged = !bad.block_table.empty();
  const int rows = paged ? kPage : 10, first = paged ? kPages : kBatch;
  std::vector<float> q(kBatch * kNq * kHeads * kDim, 1.0f), k(first * rows * kHeads * kDim, 2.0f);
  std::vector<float> v = k, out(q.size(), -7.0f), lse(kBatch * kHeads * kNq, -7.0f);
  std::vector<float> k_new(kBatch * std::max(bad.appended, 1) * kHeads * kDim, 5.0f);
  Params p;
  p.q = contiguous_view(q.data(), DType::f32, kBatch, kNq, kHeads, kDim);
  p.k = contiguous_view(k.data(), DType::f32, first, rows, kHeads, kDim);
  p.v = contiguous_view(v.data(), DType::f32, first, rows, kHeads, kDim);
  p.out = contiguous_view(out.data(), DType::f32, kBatch, kNq, kHeads, kDim);
  p.lse = lse.data();
  p.kv_cache.seqlens = bad.seqlens.data();
  if (paged) {
    p.kv_cache.block_table = bad.block_table.data();
    p.kv_cache.pages_per_sequence = int(bad.block_table.size()) / kBatch;
  }
  std::vector<float> v_new = k_new;
  if (bad.appended > 0) {
    p.kv_cache.k_new = contiguous_view(k_new.data(), DType::f32, kBatch, bad.appended, kHeads, kDim);
    p.kv_cache.v_new = contiguous_view(v_new.data(), DType::f32, kBatch, bad.appended, kHeads, kDim);
  }
  expect_forward_rejected(p, bad.message);
  for (float x : out) ASSERT_EQ(x, -7.0f);
  for (float x : lse) ASSERT_EQ(x, -7.0f);
  for (float x : k) ASSERT_EQ(x, 2.0f);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CacheValidation,
    testing::Values(
        BadCache{"negative_length", {3, -1}, {}, 0,
                 "kv_cache.seqlens: entry 1 is -1, must be >= 0"},
        BadCache{"past_capacity", {3, 10}, {}, 1,
                 "kv_cache.seqlens: entry 1 is 10, must be >= 0 and, with the 1 keys appended, "
                 "at most the capacity (10)"},
        BadCache{"paged_past_capacity", {3, 8}, {0, 1, 2, 0}, 1, "at most the capacity (8)"},
        BadCache{"page_out_of_range", {3, 6}, {0, 1, 2, 3}, 0,
                 "kv_cache.block_table: entry (1, 1) is 3, must name a page of k and v, in [0, 3)"},
        BadCache{"negative_page", {3, 2}, {-1, 1, 2, 0}, 0,
                 "kv_cache.block_table: entry (0, 0) is -1"},
        BadCache{"too_many_new_keys", {0, 0}, {}, 11,
                 "kv_cache.k_new: seqlen is 11, more than the cache holds per sequence (10)"}),
    [](const auto& info) { return info.param.name; });

// v_new is checked as a view of its own (strides, dtype) and against k_new's shape.
TEST(CacheValidation, NewValuesAreAViewLikeNewKeys) {
  constexpr int kBatch = 2, kHeads = 2, kDim = 8, kCapacity = 6;
  std::vector<float> q(kBatch * kHeads * kDim, 1.0f), k(kBatch * kCapacity * kHeads * kDim, 2.0f);
  std::vector<float> v = k, out(q.size(), -7.0f), k_new(2 * kBatch * kHeads * kDim, 5.0f);
  std::vector<float> v_new = k_new;
  const int32_t seqlens[kBatch] = {1, 2};
  Params p;
  p.q = contiguous_view(q.data(), DType::f32, kBatch, 1, kHeads, kDim);
  p.k = contiguous_view(k.data(), DType::f32, kBatch, kCapacity, kHeads, kDim);
  p.v = contiguous_view(v.data(), DType::f32, kBatch, kCapacity, kHeads, kDim);
  p.out = contiguous_view(out.data(), DType::f32, kBatch, 1, kHeads, kDim);
  p.kv_cache.seqlens = seqlens;
  p.kv_cache.k_new = contiguous_view(k_new.data(), DType::f32, kBatch, 1, kHeads, kDim);
  p.kv_cache.v_new = contiguous_view(v_new.data(), DType::f32, kBatch, 1, kHeads, kDim);
  p.kv_cache.v_new.stride[3] = 2;
  expect_forward_rejected(p, "kv_cache.v_new: head_dim stride is 2");
  p.kv_cache.v_new = contiguous_view(v_new.data(), DType::f32, kBatch, 2, kHeads, kDim);
  expect_forward_rejected(p,
                          "kv_cache.v_new: seqlen is 2, must equal kv_cache.k_new's seqlen (1)");
  for (float x : out) ASSERT_EQ(x, -7.0f);
  for (float x : k) ASSERT_EQ(x, 2.0f);
}

// The C ABI's flashattn_kv_cache through flashattn_forward_with: the same
// result as the C++ call, bit for bit, appended keys included; a struct_size
// short of the first generation is rejected naming it.
TEST(CacheCApi, MatchesCppApiBitForBit) {
  constexpr int kBatch = 2, kHeads = 2, kDim = 8, kCapacity = 6;
  std::vector<float> q(kBatch * kHeads * kDim), k(kBatch * kCapacity * kHeads * kDim);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(float(i));
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(float(i));
  std::vector<float> v = k, k_new(kBatch * kHeads * kDim, 0.5f), v_new = k_new;
  const int32_t seqlens[kBatch] = {3, 5};
  std::vector<float> k_cpp = k, v_cpp = v, out_cpp(q.size()), out_c(q.size());
  Params p;
  p.q = contiguous_view(q.data(), DType::f32, kBatch, 1, kHeads, kDim);
  p.k = contiguous_view(k_cpp.data(), DType::f32, kBatch, kCapacity, kHeads, kDim);
  p.v = contiguous_view(v_cpp.data(), DType::f32, kBatch, kCapacity, kHeads, kDim);
  p.out = contiguous_view(out_cpp.data(), DType::f32, kBatch, 1, kHeads, kDim);
  p.mask = Mask::causal_bottom_right;
  p.kv_cache.seqlens = seqlens;
  p.kv_cache.k_new = contiguous_view(k_new.data(), DType::f32, kBatch, 1, kHeads, kDim);
  p.kv_cache.v_new = contiguous_view(v_new.data(), DType::f32, kBatch, 1, kHeads, kDim);
  forward(p);

  const auto tensor = [](float* data, int64_t batch, int64_t seqlen) {
    return flashattn_contiguous(data, FLASHATTN_F32, batch, seqlen, kHeads, kDim, FLASHATTN_CPU, 0);
  };
  flashattn_params c = flashattn_default_params(tensor(q.data(), kBatch, 1),
                                                tensor(k.data(), kBatch, kCapacity),
                                                tensor(v.data(), kBatch, kCapacity),
                                                tensor(out_c.data(), kBatch, 1));
  c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  flashattn_kv_cache cache = flashattn_kv_cache_defaults();
  cache.seqlens = seqlens;
  cache.k_new = tensor(k_new.data(), kBatch, 1);
  cache.v_new = tensor(v_new.data(), kBatch, 1);
  flashattn_forward_options options = flashattn_forward_options_defaults();
  options.kv_cache = &cache;
  ASSERT_EQ(flashattn_forward_with(&c, &options), FLASHATTN_OK) << flashattn_last_error();
  EXPECT_EQ(out_c, out_cpp);
  EXPECT_EQ(k, k_cpp);
  EXPECT_EQ(v, v_cpp);

  cache.struct_size = 8;
  EXPECT_EQ(flashattn_forward_with(&c, &options), FLASHATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashattn_last_error()).find("kv_cache: struct_size is 8"),
            std::string::npos)
      << flashattn_last_error();
}

}  // namespace
}  // namespace flashattn::test
