// The CPU backend on each instruction set this machine runs, forced through
// FLASHATTN_CPU_ISA (baseline, avx2, avx512; a set the CPU lacks is skipped):
// the shared case list plus shapes that reach the kernels' other paths (few
// query rows scored by dot products, a GQA group's heads in one such tile,
// keys split across threads and merged, query tiles of 64, 128 and 256 rows
// and key tiles cut by the sequence ends, the backward's two schedules),
// forward and backward, against the float64 reference, with and without the
// variants (sliding windows' lower ends on the element mask, the vector tanh of
// the softcap, ALiBi), query tiles that read their head's keys packed; the
// variable's rules; and the outputs' first touch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cases.h"
#include "core/parallel.h"
#include "core/first_touch.h"
#include "dense.h"
#include "grad_problem.h"
#include "seed.h"

namespace flashattn::test {
namespace {

constexpr const char* kSets[] = {"baseline", "avx2", "avx512"};

// Sets FLASHATTN_CPU_ISA for one test and restores it after.
class ForcedIsa {
 public:
  explicit ForcedIsa(const char* name) {
    if (const char* old = std::getenv("FLASHATTN_CPU_ISA")) old_ = old, had_ = true;
    setenv("FLASHATTN_CPU_ISA", name, 1);
  }
  ~ForcedIsa() {
    if (had_) setenv("FLASHATTN_CPU_ISA", old_.c_str(), 1);
    else unsetenv("FLASHATTN_CPU_ISA");
  }

 private:
  std::string old_;
  bool had_ = false;
};

// The shared list and the shapes that take the kernels' other paths.
std::vector<harness::Case> isa_cases() {
  std::vector<harness::Case> cases = shared_cases();
  // One or two query rows against many keys: dot-product scores, and key
  // splits merged by lse (few tiles for the threads).
  cases.push_back(make_case({1, 1, 3000, 2, 1, 128}, DType::f32, Mask::none));
  cases.push_back(make_case({1, 2, 2500, 4, 2, 64}, DType::bf16, Mask::causal_bottom_right));
  cases.push_back(make_case({1, 1, 700, 1, 1, 80}, DType::f16, Mask::none, true));
  cases.push_back(make_case({2, 3, 1100, 1, 1, 40}, DType::f32, Mask::causal_top_left));
  // A GQA group's query heads sharing one few-rows tile (plain attention):
  // rows whose key ends restart with each head, MQA, key splits, strided.
  cases.push_back(make_case({2, 2, 1500, 8, 2, 64}, DType::f16, Mask::causal_bottom_right, true));
  cases.push_back(make_case({1, 1, 2100, 8, 1, 80}, DType::f32, Mask::none));
  cases.push_back(make_case({3, 3, 190, 6, 3, 32}, DType::bf16, Mask::causal_bottom_right));
  // Several query and key tiles, ragged at both ends, head dims that are not
  // multiples of the lanes, GQA.
  cases.push_back(make_case({1, 200, 190, 4, 2, 72}, DType::f32, Mask::causal_top_left));
  cases.push_back(make_case({2, 130, 257, 2, 1, 136}, DType::f16, Mask::causal_bottom_right));
  cases.push_back(make_case({1, 65, 129, 3, 3, 300}, DType::bf16, Mask::none, true));
  // The variants on those paths: windows whose ends cut key tiles (and, for
  // few rows, key splits) on both sides, softcaps that bite, ALiBi.
  auto with_variants = [](harness::Case c, int left, int right, float softcap, bool alibi) {
    c.window_left = left;
    c.window_right = right;
    c.softcap = softcap;
    c.input_std = softcap > 0.0f ? 3.0f : 1.0f;
    c.alibi = alibi;
    return c;
  };
  const Mask none = Mask::none;
  cases.push_back(with_variants(
      make_case({1, 200, 190, 4, 2, 72}, DType::f32, Mask::causal_top_left), 30, 10, 5, true));
  cases.push_back(
      with_variants(make_case({1, 1, 3000, 2, 1, 128}, DType::f32, none), 500, -1, 30, true));
  cases.push_back(
      with_variants(make_case({1, 2, 2500, 4, 2, 64}, DType::bf16, none), 64, 64, 0, false));
  const Mask bottom_right = Mask::causal_bottom_right;
  cases.push_back(with_variants(
      make_case({2, 130, 257, 2, 1, 136}, DType::f16, bottom_right), 100, -1, 0, true));
  cases.push_back(
      with_variants(make_case({1, 65, 129, 3, 3, 300}, DType::bf16, none, true), 7, 3, 30, false));
  // A batch of one sequence per thread: (batch × kv heads) items fill the
  // pool, so the backward takes its one-pass schedule (cpu/simd/
  // backward_schedule.h), which the single sequences above leave to the two
  // passes wherever the pool has two threads or more. GQA, rows without keys,
  // ragged tiles, rows read in place and converted, the variants.
  const int batch = thread_count();
  cases.push_back(make_case({batch, 150, 170, 4, 2, 72}, DType::f32, bottom_right));
  cases.push_back(make_case({batch, 90, 40, 2, 1, 32}, DType::f32, bottom_right));
  cases.push_back(make_case({batch, 129, 200, 2, 1, 64}, DType::f32, none, true));
  cases.push_back(make_case({batch, 100, 77, 3, 3, 48}, DType::f16, Mask::causal_top_left));
  cases.push_back(with_variants(make_case({batch, 140, 200, 4, 1, 64}, DType::f32, none), 30,
                                10, 5, true));
  // v's head_dim other than q's and k's (head_dim_v): Q and K at one width,
  // V, O and dO at another, on the matrix kernel (MLA's 192/128, rows without
  // keys at widths off the lanes, GQA strided with v the wider), a decode step
  // of a GQA group in one few-rows tile with key splits, and the one pass.
  cases.push_back(make_case({1, 130, 130, 2, 1, 192, 128}, DType::f32, bottom_right));
  cases.push_back(make_case({1, 130, 50, 2, 2, 40, 24}, DType::bf16, bottom_right));
  cases.push_back(make_case({2, 65, 130, 4, 2, 64, 128}, DType::f16, Mask::causal_top_left, true));
  cases.push_back(make_case({1, 1, 300, 4, 1, 128, 64}, DType::f32, none));
  cases.push_back(with_variants(make_case({batch, 90, 120, 2, 1, 40, 72}, DType::f32, bottom_right),
                                20, -1, 5, true));
  return cases;
}

// Whether the CPU runs the set: the backend refuses one it lacks as unsupported.
bool runs(const char* set) {
  ForcedIsa forced(set);
  DenseProblem p{Dense(1, 1, 1, 1), Dense(1, 1, 1, 1), Dense(1, 1, 1, 1)};
  try {
    run_dense(p, Backend::cpu);
  } catch (const Error& e) {
    if (e.status() == Status::unsupported) return false;
    throw;
  }
  return true;
}

struct IsaCase {
  const char* set;
  harness::Case c;
};

std::vector<IsaCase> all_isa_cases() {
  std::vector<IsaCase> out;
  for (const char* set : kSets)
    for (const harness::Case& c : isa_cases()) out.push_back({set, c});
  return out;
}

class CpuIsa : public testing::TestWithParam<IsaCase> {
 protected:
  void SetUp() override {
    if (!runs(GetParam().set)) GTEST_SKIP() << "this CPU does not run " << GetParam().set;
  }
};

TEST_P(CpuIsa, ForwardMatchesFloat64Reference) {
  ForcedIsa forced(GetParam().set);
  expect_accurate({Backend::cpu, GetParam().c}, Device{});
}

TEST_P(CpuIsa, BackwardMatchesFloat64Reference) {
  ForcedIsa forced(GetParam().set);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(harness::describe(GetParam().c) + ", " + replay_hint(seed));
  harness::GradProblem problem(GetParam().c, Device{}, seed);
  problem.run(Backend::cpu);
  const harness::GradAccuracy acc = problem.evaluate(Backend::cpu);
  EXPECT_TRUE(acc.passed()) << acc.summary();
}

INSTANTIATE_TEST_SUITE_P(EachSet, CpuIsa, testing::ValuesIn(all_isa_cases()),
                         [](const testing::TestParamInfo<IsaCase>& info) {
                           return std::string(info.param.set) + "_" +
                                  case_name(info.param.c);
                         });

TEST(CpuIsaVariable, UnknownNameIsAnErrorThatNamesTheChoices) {
  ForcedIsa forced("sse9");
  DenseProblem p{Dense(1, 1, 1, 1), Dense(1, 1, 1, 1), Dense(1, 1, 1, 1)};
  try {
    run_dense(p, Backend::cpu);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument);
    EXPECT_THAT(e.what(), testing::HasSubstr("FLASHATTN_CPU_ISA=sse9"));
    EXPECT_THAT(e.what(), testing::HasSubstr("baseline, avx2, avx512"));
  }
}

TEST(CpuIsaVariable, TheBaselineRunsEverywhere) { EXPECT_TRUE(runs("baseline")); }

// The outputs' first touch (core/first_touch.h) on a strided view with gaps
// between rows, heads and batches, rows longer than a page: it writes 0 to
// elements only, and to one in every 4 KiB page the elements span. A row that
// starts in the page where the one before it ended finds that page written
// already, so the rule is per page, not per row. The view starts at several
// offsets into a page, so the pages' edges fall in rows, in gaps and between
// them whatever address the allocation gets.
TEST(CpuFirstTouch, ZeroesOneElementInEveryPageTheElementsSpan) {
  constexpr int kBatch = 2, kRows = 3, kHeads = 2, kHeadDim = 1500;
  constexpr int64_t kHeadStride = 2000, kRowStride = kHeads * kHeadStride + 48;
  constexpr int64_t kBatchStride = kRows * kRowStride + 100;
  constexpr int64_t kPageFloats = 4096 / sizeof(float);
  constexpr float kUntouched = 7.0f;
  for (const int64_t shift : {0, 1, 500, 524, 1000, 1023}) {
    SCOPED_TRACE("the view starts " + std::to_string(shift) + " floats into a page");
    std::vector<float> memory(size_t(kBatch * kBatchStride + 2 * kPageFloats), kUntouched);
    const int64_t page_start = int64_t(
        (kPageFloats - reinterpret_cast<uintptr_t>(memory.data()) / sizeof(float) % kPageFloats) %
        kPageFloats);
    float* const view_data = memory.data() + page_start + shift;
    const TensorRef view{view_data, kBatchStride, kRowStride, kHeadStride};
    touch_output_pages(view, DType::f32, kBatch, kRows, kHeads, kHeadDim);
    const auto page = [&](int64_t at) {
      return reinterpret_cast<uintptr_t>(&view_data[at]) / 4096;
    };
    std::vector<bool> element(size_t(kBatch * kBatchStride), false);
    std::vector<uintptr_t> pages;
    for (int b = 0; b < kBatch; ++b)
      for (int r = 0; r < kRows; ++r)
        for (int h = 0; h < kHeads; ++h) {
          const int64_t row = b * kBatchStride + r * kRowStride + h * kHeadStride;
          for (int c = 0; c < kHeadDim; ++c) element[size_t(row + c)] = true;
          for (uintptr_t pg = page(row); pg <= page(row + kHeadDim - 1); ++pg) pages.push_back(pg);
        }
    for (const uintptr_t pg : pages) {
      bool zeroed = false;
      for (int64_t at = 0; at < kBatch * kBatchStride; ++at)
        zeroed |= element[size_t(at)] && page(at) == pg && view_data[at] == 0.0f;
      EXPECT_TRUE(zeroed) << "page " << pg - page(0) << " of the view holds no zeroed element";
    }
    for (int64_t at = 0; at < int64_t(memory.size()); ++at) {
      const int64_t in_view = at - page_start - shift;
      const bool is_element =
          in_view >= 0 && in_view < int64_t(element.size()) && element[size_t(in_view)];
      if (!is_element) {
        ASSERT_EQ(memory[size_t(at)], kUntouched) << "a gap at " << in_view << " was written";
      }
    }
  }
}

// One problem per case, its forward checked on every set this CPU runs.
void expect_forward_on_every_set(const std::vector<harness::Case>& cases) {
  for (const harness::Case& c : cases) {
    const uint64_t seed = fresh_seed();
    harness::Problem problem(c, Device{}, seed);
    for (const char* set : kSets) {
      if (!runs(set)) continue;
      SCOPED_TRACE(std::string(set) + " on " + harness::describe(c) + ", " + replay_hint(seed));
      ForcedIsa forced(set);
      problem.poison_output();
      forward(problem.params(Backend::cpu));
      const harness::Accuracy acc = problem.evaluate(Backend::cpu);
      EXPECT_TRUE(acc.passed) << acc.summary();
    }
  }
}

// Query tiles of 256 and 128 rows (cpu/simd/forward_tiles.h, block_rows): a
// tile reads 4 MiB or more of K and V (at its middle row), and there are
// enough tiles for four per thread at 256 rows (f32) or only at 128 (bf16);
// ragged last tiles, causal ends inside them, GQA, strided views. Forward
// only: the backward's tiles do not depend on it. One problem per shape,
// checked on every set.
TEST(CpuIsaWideQueryTiles, ForwardMatchesFloat64Reference) {
  const int heads = thread_count();
  const std::vector<harness::Case> cases = {
      make_case({1, 1025, 5000, heads, 1, 128}, DType::f32, Mask::causal_bottom_right),
      make_case({1, 700, 8192, heads, 1, 128}, DType::bf16, Mask::none, true)};
  expect_forward_on_every_set(cases);
}

// Query tiles that read their head's keys packed once per item of several
// tiles (cpu/simd/forward_tiles.h, packs_keys): enough tiles for four or more
// per item, rows that lie heads apart (f32 read in place otherwise) or
// convert (16-bit), ragged last tiles, causal ends of both alignments with
// seqlen_q ≠ seqlen_k, GQA, head dims off the lanes, v's head_dim other than
// q's, windows whose lower ends start a group's keys past 0 with softcap and
// ALiBi, and a packed batch whose sequences end inside a group or before it.
TEST(CpuIsaPackedKeys, ForwardMatchesFloat64Reference) {
  const int heads = 4 * thread_count();
  const Mask bottom_right = Mask::causal_bottom_right;
  harness::Case window = make_case({1, 400, 400, heads, 2, 64}, DType::f32, bottom_right);
  window.window_left = 100;
  window.window_right = 0;
  window.softcap = 5;
  window.alibi = true;
  const std::vector<harness::Case> cases = {
      make_case({1, 300, 420, heads, heads / 2, 64}, DType::f32, bottom_right),
      make_case({2, 260, 200, heads, heads, 72}, DType::bf16, Mask::causal_top_left, true),
      make_case({1, 300, 300, heads, 1, 64, 128}, DType::f16, Mask::none),
      window,
      harness::packed_case(make_case({0, 0, 0, heads, 2, 64}, DType::f32, bottom_right),
                           {{500, 450}, {70, 90}, {0, 30}, {257, 300}})};
  expect_forward_on_every_set(cases);
}

// v's head_dim other than q's and k's in KV caches, on every set: the new
// keys and values appended at their own widths, pages of 16 that a decode
// step's fp32 tiles straddle (read run by run where they lie), pages of 3
// gathered for the matrix kernel. Forward only: caches have no backward.
TEST(CpuIsaHeadDimPairCaches, ForwardMatchesFloat64Reference) {
  const Mask bottom_right = Mask::causal_bottom_right;
  const std::vector<harness::Case> cases = {
      harness::cache_case(make_case({0, 1, 0, 8, 2, 192, 128}, DType::f32, bottom_right),
                          {{0, 1, 130, 197}, 1, 200, 16}),
      harness::cache_case(make_case({0, 5, 0, 6, 2, 40, 24}, DType::bf16, bottom_right),
                          {{0, 1, 130, 197}, 3, 200, 3})};
  expect_forward_on_every_set(cases);
}

}  // namespace
}  // namespace flashattn::test
