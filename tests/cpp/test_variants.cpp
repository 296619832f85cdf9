// The attention variants (flashattn::Variants: sliding windows, softcap, ALiBi,
// a bias or boolean mask, dropout) on every backend of the registry, forward and
// backward, alone and combined
// with each other and with both causal alignments, against the float64
// reference (tools/harness; the reference itself against the harness's own
// float64 standard attention, which writes the variants out apart from core).
// CPU backends run here; CUDA backends skip where skip_reason() says (no GPU,
// another architecture) and otherwise run the same cases plus shapes at their
// tile edges. Every backend supports the variants: one that refuses a variant
// problem whose dtype and head_dim its table takes fails the test.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cases.h"
#include "dense.h"
#include "grad_problem.h"
#include "seed.h"

namespace flashattn::test {
namespace {

struct Window {
  int left, right;
};

harness::Case windowed(harness::Case c, Window w) {
  c.window_left = w.left;
  c.window_right = w.right;
  return c;
}

// A softcap, with inputs wide enough that it bites: scores of several caps.
harness::Case capped(harness::Case c, float softcap, float input_std) {
  c.softcap = softcap;
  c.input_std = input_std;
  return c;
}

harness::Case with_alibi(harness::Case c) {
  c.alibi = true;
  return c;
}

harness::Case all_variants(harness::Case c, Window w, float softcap, float input_std) {
  return with_alibi(capped(windowed(c, w), softcap, input_std));
}

struct Broadcast {
  bool batch = false, heads = false;
};

// A bias or boolean mask of `type` (tools/harness/bias.h draws it, whole rows
// and whole tiles masked among its elements), of size 1 where it broadcasts.
harness::Case biased(harness::Case c, BiasType type, Broadcast over = {}, bool key_major = false) {
  c.bias = harness::Case::Bias{type, over.batch, over.heads, key_major};
  return c;
}

constexpr Mask kMasks[] = {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right};
constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr BiasType kBiasTypes[] = {BiasType::f32, BiasType::f16, BiasType::bf16,
                                   BiasType::boolean};
constexpr Broadcast kBroadcasts[] = {{false, false}, {true, false}, {false, true}, {true, true}};

// The bias cases every backend runs. Its pattern empties whole rows (output 0,
// lse −inf, no gradient), the first half of other rows' keys and, on 257 rows
// or keys and more, 128 × 128 blocks: whole key tiles of whole query tiles.
// Each bias type under each broadcast, over four shapes in turn (GQA, seqlen_q
// above and below seqlen_k, both causal masks, batch > 1, strided views with
// padded bias rows) and the three dtypes of q; each type with a window, a
// softcap and ALiBi under either causal mask (once with its keys outermost in
// memory); then the awkward shapes, negative scales, and a zero scale with a
// boolean mask (every kept key weighs the same).
void add_bias_cases(std::vector<harness::Case>& cases) {
  const harness::Case shapes[] = {
      make_case({2, 300, 280, 4, 2, 64}, DType::f32, Mask::none),
      make_case({2, 257, 300, 2, 1, 32}, DType::f32, Mask::causal_bottom_right),
      make_case({2, 130, 50, 2, 2, 80}, DType::f32, Mask::causal_top_left),
      make_case({3, 70, 90, 3, 3, 16}, DType::f32, Mask::causal_bottom_right, true),
  };
  for (int t = 0; t < 4; ++t)
    for (int w = 0; w < 4; ++w) {
      harness::Case c = shapes[(t + w) % 4];
      c.dtype = kDtypes[(t + 2 * w) % 3];
      cases.push_back(biased(c, kBiasTypes[t], kBroadcasts[w]));
    }
  for (int t = 0; t < 4; ++t) {
    cases.push_back(biased(all_variants(make_case({1, 300, 333, 4, 1, 80}, kDtypes[t % 3],
                                                  Mask::causal_bottom_right),
                                        {64, 0}, 30, 3),
                           kBiasTypes[t], {false, true}));
    cases.push_back(biased(all_variants(make_case({1, 333, 300, 4, 2, 48}, kDtypes[(t + 1) % 3],
                                                  Mask::causal_top_left, true),
                                        {100, 7}, 5, 3),
                           kBiasTypes[t], {true, false}, true));
  }
  cases.push_back(biased(make_case({1, 1, 1, 1, 1, 1}, DType::f32, Mask::none), BiasType::boolean));
  cases.push_back(biased(make_case({1, 1, 300, 2, 2, 200}, DType::f16, Mask::none), BiasType::f16));
  cases.push_back(biased(make_case({1, 300, 1, 2, 1, 64}, DType::bf16, Mask::causal_bottom_right),
                         BiasType::bf16, {false, true}));
  cases.push_back(biased(windowed(make_case({1, 130, 50, 2, 2, 1}, DType::f32, Mask::none), {3, 2}),
                         BiasType::f32));
  cases.push_back(biased(make_case({2, 17, 17, 2, 2, 80}, DType::bf16, Mask::none, true),
                         BiasType::boolean, {}, true));
  cases.push_back(
      biased(make_case({1, 40, 70, 8, 2, 32}, DType::f16, Mask::causal_bottom_right, true),
             BiasType::f32, {true, false}));
  cases.push_back(biased(make_case({1, 2, 3000, 2, 1, 128}, DType::bf16, Mask::none),
                         BiasType::boolean, {true, true}));
  // cuda_mma's bias tiles at head dim 128 (64 rows a block): several row blocks,
  // a ragged last one, and keys past a block's end.
  cases.push_back(biased(make_case({2, 150, 190, 4, 2, 128}, DType::f16, Mask::causal_top_left),
                         BiasType::f16));
  // Head dims split by columns on Hopper (384 and 512 buckets): every variant
  // and a bias on one, a window's blocks below some rows.
  cases.push_back(biased(all_variants(make_case({1, 200, 300, 2, 1, 512}, DType::bf16,
                                                Mask::causal_bottom_right),
                                      {64, 0}, 30, 3),
                         BiasType::bf16, {false, true}));
  cases.push_back(biased(make_case({1, 70, 150, 2, 2, 320}, DType::f16, Mask::none, true),
                         BiasType::boolean));
  harness::Case negative = make_case({1, 65, 65, 2, 2, 32}, DType::f32, Mask::causal_top_left);
  negative.scale = -0.5f;
  cases.push_back(biased(negative, BiasType::boolean));
  cases.push_back(biased(negative, BiasType::bf16, {false, true}));
}

harness::Case dropped(harness::Case c, float p) {
  c.dropout.p = p;
  return c;
}

// Dropout at rates 0.1 and 0.5 (and 1: every probability dropped, output 0)
// on the shapes of the other variants: GQA, seqlen_q above and below seqlen_k,
// both causal masks, strided views, the three dtypes, rows that see no key,
// one query row over 3000 keys (which the CPU splits over its threads), the
// awkward sizes; and combined with a window, softcap, ALiBi and a bias.
void add_dropout_cases(std::vector<harness::Case>& cases) {
  for (DType dtype : kDtypes) {
    cases.push_back(dropped(make_case({2, 300, 280, 4, 2, 64}, dtype, Mask::none), 0.1f));
    cases.push_back(dropped(make_case({2, 257, 300, 2, 1, 32}, dtype, Mask::causal_bottom_right), 0.5f));
    cases.push_back(dropped(make_case({1, 130, 50, 2, 2, 80}, dtype, Mask::causal_top_left, true), 0.1f));
    cases.push_back(dropped(all_variants(make_case({1, 300, 333, 4, 1, 80}, dtype,
                                                   Mask::causal_bottom_right),
                                         {64, 0}, 30, 3),
                            0.2f));
    cases.push_back(dropped(biased(make_case({2, 70, 90, 3, 3, 16}, dtype, Mask::none),
                                   BiasType::boolean, {false, true}),
                            0.3f));
    cases.push_back(dropped(make_case({1, 1, 1, 1, 1, 1}, dtype, Mask::none), 0.5f));
    cases.push_back(dropped(make_case({1, 17, 17, 3, 3, 200}, dtype, Mask::causal_top_left), 0.1f));
    cases.push_back(dropped(make_case({1, 2, 3000, 2, 1, 128}, dtype, Mask::none), 0.1f));
  }
  cases.push_back(dropped(make_case({1, 130, 50, 2, 2, 1}, DType::f32, Mask::none), 0.5f));
  cases.push_back(dropped(make_case({1, 130, 300, 2, 2, 384}, DType::f16, Mask::causal_top_left), 0.1f));
  cases.push_back(dropped(make_case({1, 40, 70, 2, 1, 64}, DType::f16, Mask::none), 1.0f));
}

// Every backend: windows of each kind (both sides, the left or the right side
// alone, zero width, as wide as a key tile, wider than the sequence) under
// each mask, on seqlen_q < seqlen_k (GQA 4:1, batch 2) and seqlen_q > seqlen_k
// (head_dim 80, rows that see no key); zero width under a causal mask (the
// diagonal alone); softcaps that bite; ALiBi; all of them together; and the
// awkward shapes (seqlen 1 either side, head_dim 1 and 200, strided views, few
// query rows over keys the CPU splits).
std::vector<harness::Case> variant_cases() {
  std::vector<harness::Case> cases;
  const Window windows[] = {{0, 0}, {3, -1}, {-1, 2}, {5, 4}, {64, 0}, {1000, 1000}};
  for (Mask mask : kMasks)
    for (Window w : windows) {
      cases.push_back(windowed(make_case({2, 50, 130, 4, 1, 16}, DType::f32, mask), w));
      cases.push_back(windowed(make_case({1, 130, 50, 2, 2, 80}, DType::f32, mask), w));
    }
  for (Mask mask : {Mask::causal_top_left, Mask::causal_bottom_right})
    for (DType dtype : kDtypes)
      cases.push_back(windowed(make_case({1, 70, 90, 2, 1, 32}, dtype, mask), {0, -1}));
  for (DType dtype : {DType::f16, DType::bf16})
    for (Mask mask : kMasks)
      cases.push_back(windowed(make_case({1, 300, 300, 2, 1, 64}, dtype, mask, true), {37, 5}));
  for (DType dtype : kDtypes) {
    cases.push_back(capped(make_case({1, 17, 17, 3, 3, 64}, dtype, Mask::causal_top_left), 5, 3));
    cases.push_back(capped(make_case({2, 300, 257, 2, 1, 80}, dtype, Mask::none), 30, 6));
    cases.push_back(
        capped(make_case({1, 40, 70, 2, 2, 200}, dtype, Mask::causal_bottom_right, true), 30, 4));
    for (Mask mask : kMasks)
      cases.push_back(with_alibi(make_case({1, 300, 300, 8, 2, 32}, dtype, mask)));
    cases.push_back(with_alibi(make_case({1, 40, 170, 4, 4, 200}, dtype, Mask::none, true)));
    cases.push_back(all_variants(
        make_case({2, 300, 333, 4, 1, 80}, dtype, Mask::causal_bottom_right), {64, 0}, 30, 3));
    cases.push_back(all_variants(
        make_case({1, 333, 300, 4, 2, 48}, dtype, Mask::causal_top_left, true), {100, 7}, 5, 3));
    cases.push_back(all_variants(make_case({1, 1, 1, 1, 1, 1}, dtype, Mask::none), {0, 0}, 5, 3));
    cases.push_back(
        all_variants(make_case({1, 1, 300, 2, 2, 200}, dtype, Mask::none), {5, 4}, 30, 3));
    cases.push_back(all_variants(make_case({1, 300, 1, 2, 1, 64}, dtype, Mask::causal_bottom_right),
                                 {3, -1}, 5, 3));
    cases.push_back(
        all_variants(make_case({1, 130, 50, 2, 2, 1}, dtype, Mask::none), {3, 2}, 5, 3));
    cases.push_back(
        all_variants(make_case({1, 2, 3000, 2, 1, 128}, dtype, Mask::none), {500, 100}, 30, 3));
  }
  add_bias_cases(cases);
  add_dropout_cases(cases);
  return cases;
}

// The CUDA backends also get their tile edges: seqlen 257 and 1000, head dims
// 64 and 128 (the 16-bit tensor-core kernels' buckets), and windows of 100–300
// keys, so that whole key blocks lie outside every row of a query tile on
// either side and the tiles the window's ends cross take the element mask.
std::vector<harness::Case> gpu_variant_cases() {
  std::vector<harness::Case> cases = variant_cases();
  for (DType dtype : kDtypes) {
    cases.push_back(
        windowed(make_case({1, 1000, 1000, 2, 1, 128}, dtype, Mask::causal_top_left), {256, 0}));
    cases.push_back(windowed(make_case({2, 1000, 1000, 2, 2, 128}, dtype, Mask::none), {200, 300}));
    cases.push_back(windowed(make_case({1, 257, 1000, 2, 1, 128}, dtype, Mask::none), {-1, 200}));
    cases.push_back(
        capped(windowed(make_case({2, 257, 300, 4, 2, 64}, dtype, Mask::none), {100, 100}), 30, 3));
    cases.push_back(with_alibi(windowed(
        make_case({1, 1000, 1000, 2, 2, 64}, dtype, Mask::causal_bottom_right), {300, -1})));
    cases.push_back(all_variants(make_case({1, 1000, 257, 4, 1, 64}, dtype, Mask::causal_top_left),
                                 {150, 150}, 5, 3));
    cases.push_back(
        all_variants(make_case({1, 513, 700, 2, 1, 128}, dtype, Mask::causal_bottom_right, true),
                     {128, 0}, 30, 3));
  }
  // A bias at the tile edges too: whole 128 × 128 blocks masked inside long
  // rows, with windows, softcap and ALiBi; head dims 64 to 256; one query row
  // per head of a GQA group (the tensor-core kernels may put a group's heads in
  // one tile, each with its own bias rows); cuda_f16x3's widest heads.
  for (DType dtype : kDtypes) {
    cases.push_back(biased(make_case({1, 1000, 1000, 2, 1, 128}, dtype, Mask::causal_top_left),
                           BiasType::boolean, {false, true}));
    cases.push_back(biased(
        windowed(make_case({2, 1000, 1000, 2, 2, 64}, dtype, Mask::none), {200, 300}),
        BiasType::f16));
    cases.push_back(biased(
        capped(make_case({1, 257, 1000, 4, 2, 64}, dtype, Mask::causal_bottom_right), 30, 3),
        BiasType::f32, {true, true}));
    cases.push_back(biased(
        all_variants(make_case({1, 513, 700, 2, 1, 128}, dtype, Mask::causal_bottom_right, true),
                     {128, 0}, 30, 3),
        BiasType::bf16, {}, true));
    cases.push_back(biased(make_case({1, 300, 300, 2, 1, 256}, dtype, Mask::none),
                           BiasType::boolean, {true, false}));
    cases.push_back(biased(make_case({2, 1, 1000, 8, 2, 128}, dtype, Mask::none), BiasType::f32));
  }
  cases.push_back(biased(make_case({1, 40, 1000, 2, 1, 1000}, DType::f32, Mask::causal_bottom_right),
                         BiasType::boolean, {false, true}));
  // Dropout at the tensor-core kernels' tile edges and head-dim buckets.
  for (DType dtype : kDtypes) {
    cases.push_back(dropped(make_case({1, 1000, 1000, 2, 1, 128}, dtype, Mask::causal_top_left), 0.1f));
    cases.push_back(dropped(make_case({2, 257, 1000, 4, 2, 64}, dtype, Mask::none), 0.1f));
    cases.push_back(dropped(windowed(make_case({1, 513, 700, 2, 1, 256}, dtype,
                                               Mask::causal_bottom_right, true),
                                     {128, 0}),
                            0.3f));
    cases.push_back(dropped(make_case({2, 1, 1000, 8, 2, 96}, dtype, Mask::none), 0.1f));
  }
  cases.push_back(dropped(make_case({1, 40, 1000, 2, 1, 1000}, DType::f32, Mask::none), 0.1f));
  return cases;
}

// The cases a backend's table takes (cases_taken_by).
std::vector<harness::Case> cases_for(Backend backend) {
  const bool gpu = device_of(backend) == DeviceKind::cuda;
  return cases_taken_by(backend, gpu ? gpu_variant_cases() : variant_cases());
}

std::vector<BackendCase> forward_cases() {
  std::vector<BackendCase> out;
  for (const BackendInfo& info : backends())
    for (const harness::Case& c : cases_for(info.backend)) out.push_back({info.backend, c});
  return out;
}

std::vector<BackendCase> backward_cases() {
  std::vector<BackendCase> out;
  for (Backend backend : backward_backends())
    for (const harness::Case& c : cases_for(backend))
      if (takes_backward(backend, c)) out.push_back({backend, c});
  return out;
}

class VariantForward : public BackendCaseTest {};

TEST_P(VariantForward, MatchesFloat64Reference) { expect_accurate(GetParam(), device()); }

INSTANTIATE_TEST_SUITE_P(AllBackends, VariantForward, testing::ValuesIn(forward_cases()),
                         [](const auto& info) { return backend_case_name(info.param); });

class VariantBackward : public BackendCaseTest {};

TEST_P(VariantBackward, GradientsMatchTheReference) { expect_gradients_accurate(GetParam(), device()); }

INSTANTIATE_TEST_SUITE_P(AllBackends, VariantBackward, testing::ValuesIn(backward_cases()),
                         [](const auto& info) { return backend_case_name(info.param); });

// Values from a fixed seed, uniform in [-1, 1).
void fill_uniform(std::vector<float>& values, uint64_t& state) {
  for (float& x : values) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = float((state >> 40) & 0xFFFF) / 32768.0f - 1.0f;
  }
}

class VariantDense : public BackendDtypeTest {};

// A zero-width window under the bottom-right mask, 60 rows over 40 keys: row
// i sees key i − 20 alone, so its output is that key's value whatever the
// softcap and ALiBi do to the score (its weight is 1), and its lse is the
// score c·tanh(scale·q·k/c) (distance 0: no ALiBi term); rows 0–19 see no key
// and give exactly 0 and −inf.
TEST_P(VariantDense, OneVisibleKeyGivesItsValue) {
  constexpr int kRows = 60, kKeys = 40, kDim = 8, kOff = kKeys - kRows;
  constexpr float kCap = 5.0f;
  DenseProblem p(Dense(1, kRows, 2, kDim), Dense(1, kKeys, 1, kDim), Dense(1, kKeys, 1, kDim));
  p.dtype = dtype();
  p.mask = Mask::causal_bottom_right;
  p.window_left = 0;
  p.softcap = kCap;
  p.alibi_slopes = {0.5f, 0.25f};
  uint64_t state = fresh_seed();
  for (Dense* t : {&p.q, &p.k, &p.v}) fill_uniform(t->values, state);
  for (float& x : p.q.values) x *= 8.0f;  // scores of several caps
  round_inputs(p);
  const DenseResult r = run_dense(p, backend());
  const double scale = 1.0 / std::sqrt(double(kDim));
  for (int i = 0; i < kRows; ++i)
    for (int h = 0; h < 2; ++h) {
      SCOPED_TRACE("row " + std::to_string(i) + ", head " + std::to_string(h));
      if (i + kOff < 0) {
        EXPECT_EQ(r.lse_at(0, h, i), -std::numeric_limits<float>::infinity());
        for (int c = 0; c < kDim; ++c) EXPECT_EQ(r.out.at(0, i, h, c), 0.0f);
        continue;
      }
      double dot = 0;
      for (int c = 0; c < kDim; ++c) dot += double(p.q.at(0, i, h, c)) * p.k.at(0, i + kOff, 0, c);
      EXPECT_NEAR(r.lse_at(0, h, i), kCap * std::tanh(scale * dot / kCap), 1e-3);
      for (int c = 0; c < kDim; ++c) {
        const float v = p.v.at(0, i + kOff, 0, c);
        EXPECT_NEAR(r.out.at(0, i, h, c), v, 1e-5 * (1 + std::fabs(v)));
      }
    }
}

// A NaN in v at key 10 reaches the rows whose window holds key 10 (rows 10–15
// under window (5, 0)), in its own column; a NaN in k at key 50 makes the
// scores, so the whole output, of rows 50–55 NaN. Every other element stays
// finite: a key outside a row's window never reaches it, not even as 0·NaN,
// except for v on the backends that multiply whole key tiles (docs/guide.md,
// non-finite values), where v's column may be NaN in any row.
TEST_P(VariantDense, NanOutsideTheWindowStaysOut) {
  constexpr int kN = 100, kDim = 16, kNanValue = 10, kNanKey = 50, kLeft = 5, kColumn = 3;
  DenseProblem p(Dense(1, kN, 1, kDim), Dense(1, kN, 1, kDim), Dense(1, kN, 1, kDim));
  p.dtype = dtype();
  p.window_left = kLeft;
  p.window_right = 0;
  p.softcap = 30.0f;
  p.alibi_slopes = {0.125f};
  uint64_t state = fresh_seed();
  for (Dense* t : {&p.q, &p.k, &p.v}) fill_uniform(t->values, state);
  p.v.at(0, kNanValue, 0, kColumn) = std::numeric_limits<float>::quiet_NaN();
  p.k.at(0, kNanKey, 0, 0) = std::numeric_limits<float>::quiet_NaN();
  const DenseResult r = run_dense(p, backend());
  auto sees = [](int row, int key) { return key <= row && key >= row - kLeft; };
  for (int i = 0; i < kN; ++i)
    for (int c = 0; c < kDim; ++c) {
      const float x = r.out.at(0, i, 0, c);
      if (sees(i, kNanKey) || (sees(i, kNanValue) && c == kColumn)) {
        EXPECT_TRUE(std::isnan(x)) << "row " << i << ", column " << c;
      } else if (!(tiles_values(backend()) && c == kColumn)) {
        EXPECT_TRUE(std::isfinite(x)) << "row " << i << ", column " << c << ": " << x;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, VariantDense, testing::ValuesIn(backend_dtypes()),
                         backend_dtype_name);

}  // namespace
}  // namespace flashattn::test
