// The core definitions every backend shares (src/core/): the mask's key range
// per row and the block ranges derived from it, checked against a brute-force
// walk over every row and key; the rules that finish a row and merge partial
// rows; dropout's generator (core/dropout.h); and the backend registry as the
// C ABI exposes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dropout.h"
#include "core/mask.h"
#include "core/softmax.h"
#include "core/tail_split.h"
#include "flashattn/flashattn.h"
#include "flashattn/flashattn.hpp"

namespace flashattn {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Every rule: no mask, both causal alignments, and windows (open sides, zero
// width, wider than the sequence), with and without causal.
std::vector<MaskRule> rules() {
  std::vector<MaskRule> out = {{false, false}, {true, false}, {true, true}};
  for (bool causal : {false, true})
    for (bool bottom_right : {false, true})
      for (auto [left, right] : {std::pair{0, 0}, std::pair{3, -1}, std::pair{-1, 2},
                                 std::pair{5, 4}, std::pair{1, 0}, std::pair{200, 200}})
        out.push_back({causal, bottom_right, left, right});
  return out;
}

std::vector<std::pair<MaskRule, RowMask>> rule_masks() {
  std::vector<std::pair<MaskRule, RowMask>> out;
  for (auto [nq, nk] : {std::pair{1, 1}, std::pair{17, 17}, std::pair{40, 100},
                        std::pair{100, 40}, std::pair{64, 0}, std::pair{0, 9}})
    for (const MaskRule& rule : rules()) out.push_back({rule, resolve(rule, {nq, nk})});
  return out;
}

std::vector<RowMask> masks() {
  std::vector<RowMask> out;
  for (const auto& [rule, m] : rule_masks()) out.push_back(m);
  return out;
}

// The rule as the public API states it: i + off − left <= j <= i + off + right.
bool visible(const MaskRule& r, int seqlen_q, int seqlen_k, int i, int j) {
  const int64_t off = r.bottom_right ? int64_t(seqlen_k) - seqlen_q : 0;
  const int64_t right = r.causal ? 0 : r.window_right;
  return (right < 0 || j <= i + off + right) && (r.window_left < 0 || j >= i + off - r.window_left);
}

TEST(RowMaskTest, KeyRangeIsTheRule) {
  for (const auto& [rule, m] : rule_masks())
    for (int i = 0; i < m.seqlen_q; ++i)
      for (int j = 0; j < m.seqlen_k; ++j) {
        EXPECT_EQ(visible(rule, m.seqlen_q, m.seqlen_k, i, j),
                  j >= m.key_begin(i) && j < m.key_end(i))
            << "row " << i << " key " << j << " left " << rule.window_left << " right "
            << rule.window_right;
        EXPECT_EQ(m.hidden(i, j), !(j >= m.key_begin(i) && j < m.key_end(i)));
      }
}

// A window wider than the sequence is the plain rule (the plain kernels run it).
TEST(RowMaskTest, WideWindowsLeaveTheSideOpen) {
  const RowMask m = resolve(MaskRule{false, true, 100, 100}, {40, 60});
  EXPECT_FALSE(m.bounded_above);
  EXPECT_FALSE(m.bounded_below);
  const RowMask c = resolve(MaskRule{true, true, 100, -1}, {40, 60});
  EXPECT_TRUE(c.bounded_above);
  EXPECT_FALSE(c.bounded_below);
}

// On every row a kernel's tiles reach, before row 0 and past seqlen_q too.
TEST(RowMaskTest, SmallFormsAgreeWithTheGeneralOnes) {
  for (const RowMask& m : masks()) {
    ASSERT_TRUE(RowMask::small(m.seqlen_q, m.seqlen_k));
    for (int i = -200; i < m.seqlen_q + 200; ++i) {
      EXPECT_EQ(m.key_end_small(i), m.key_end(i)) << i;
      EXPECT_EQ(m.key_begin_small(i), m.key_begin(i)) << i;
      for (const int rows : {1, 64, 128}) {
        const KeyBlocks general = m.key_blocks(i, rows, 128);
        const KeyBlocks small = m.key_blocks<true, true>(i, rows, 128);
        EXPECT_EQ(small.begin, general.begin) << i;
        EXPECT_EQ(small.end, general.end) << i;
        EXPECT_EQ(small.unmasked_begin, general.unmasked_begin) << i;
        EXPECT_EQ(small.unmasked_end, general.unmasked_end) << i;
      }
    }
  }
}

// At the limit's edge: rows past seqlen_q by a tile, offsets at the extremes a
// bounded side takes, still in 32 bits.
TEST(RowMaskTest, SmallFormsHoldAtTheLimit) {
  constexpr int kLast = RowMask::kSmallSeqlen - 1;
  EXPECT_FALSE(RowMask::small(RowMask::kSmallSeqlen, 1));
  EXPECT_FALSE(RowMask::small(1, RowMask::kSmallSeqlen));
  for (const MaskRule rule : {MaskRule{true, false}, MaskRule{true, true},
                              MaskRule{false, true, 5, 3}, MaskRule{false, false, kLast - 2, 0}})
    for (const SequenceLengths seq : {SequenceLengths{kLast, kLast}, SequenceLengths{kLast, 7},
                                      SequenceLengths{7, kLast}}) {
      const RowMask m = resolve(rule, seq);
      for (const int i : {-256, -1, 0, 1, seq.seqlen_q / 2, seq.seqlen_q - 1, seq.seqlen_q + 255}) {
        EXPECT_EQ(m.key_end_small(i), m.key_end(i)) << i;
        EXPECT_EQ(m.key_begin_small(i), m.key_begin(i)) << i;
      }
    }
}

// empty() reads the resolved first_nonempty_row; the rule is key_end <= key_begin,
// on rows before 0 and past seqlen_q too (a kernel's tiles reach there).
TEST(RowMaskTest, EmptyRowsAreThoseWithoutKeys) {
  for (const RowMask& m : masks())
    for (int i = -70; i < m.seqlen_q + 70; ++i)
      EXPECT_EQ(m.empty(i), m.key_end(i) <= m.key_begin(i)) << "row " << i;
}

TEST(RowMaskTest, BottomRightLastRowSeesEveryKey) {
  const RowMask m = resolve(MaskRule{true, true}, {40, 100});
  EXPECT_EQ(m.key_end(39), 100);
  EXPECT_EQ(m.key_end(0), 61);
  const RowMask tall = resolve(MaskRule{true, true}, {100, 40});
  EXPECT_TRUE(tall.empty(59));
  EXPECT_FALSE(tall.empty(60));
}

// Brute force: which blocks hold a key some row of [row0, row0 + rows) sees, and
// which hold only keys every such row sees.
TEST(RowMaskTest, KeyBlocksMatchBruteForce) {
  for (const RowMask& m : masks())
    for (int block_n : {1, 16, 64})
      for (int row0 = -64; row0 < m.seqlen_q; row0 += 13)
        for (int rows : {1, 5, 64}) {
          const KeyBlocks b = m.key_blocks(row0, rows, block_n);
          const int blocks = (m.seqlen_k + block_n - 1) / block_n;
          for (int n = 0; n < blocks; ++n) {
            bool any = false, whole = true;
            for (int i = row0; i < row0 + rows; ++i)
              for (int j = n * block_n; j < (n + 1) * block_n; ++j) {
                const bool seen = j < m.seqlen_k && j >= m.key_begin(i) && j < m.key_end(i);
                any |= seen;
                whole &= seen;
              }
            const std::string at = "rows [" + std::to_string(row0) + ", +" +
                                   std::to_string(rows) + ") block " + std::to_string(n);
            if (any) {
              EXPECT_TRUE(n >= b.begin && n < b.end) << at;
            }
            if (n >= b.unmasked_begin && n < b.unmasked_end && n >= b.begin && n < b.end) {
              EXPECT_TRUE(whole) << at;
            }
            // Blocks reported whole are whole; a partial block always needs the mask.
            if (n >= b.end || n < b.begin) continue;
            if (!b.needs_mask<true>(n)) {
              EXPECT_TRUE(whole) << at;
            }
          }
        }
}

// Kernels built without lower ends (kLowerEnds false) skip key_begin; on every
// rule without a lower end their key blocks are the general ones.
TEST(RowMaskTest, KeyBlocksWithoutLowerEndsMatchTheGeneralOnes) {
  for (const RowMask& m : masks()) {
    if (m.bounded_below) continue;
    for (int block_n : {1, 16, 64, 128})
      for (int row0 = -130; row0 < m.seqlen_q + 64; row0 += 11)
        for (int rows : {1, 5, 64, 128}) {
          const KeyBlocks general = m.key_blocks(row0, rows, block_n);
          const KeyBlocks upper = m.key_blocks<false>(row0, rows, block_n);
          const std::string at = "rows [" + std::to_string(row0) + ", +" +
                                 std::to_string(rows) + ") block_n " + std::to_string(block_n);
          EXPECT_EQ(upper.begin, general.begin) << at;
          EXPECT_EQ(upper.end, general.end) << at;
          EXPECT_EQ(upper.unmasked_begin, general.unmasked_begin) << at;
          EXPECT_EQ(upper.unmasked_end, general.unmasked_end) << at;
        }
  }
}

TEST(RowMaskTest, RowsSeeingAKeyTileMatchBruteForce) {
  for (const RowMask& m : masks())
    for (int key0 = 0; key0 < m.seqlen_k; key0 += 7)
      for (int keys : {1, 8, 64}) {
        const RowRange r = m.rows_seeing(key0, keys);
        for (int i = 0; i < m.seqlen_q; ++i) {
          bool sees = false;
          for (int j = key0; j < std::min(key0 + keys, m.seqlen_k); ++j)
            sees |= j >= m.key_begin(i) && j < m.key_end(i);
          EXPECT_EQ(sees, i >= r.begin && i < r.end) << "row " << i << " keys " << key0;
        }
      }
}

TEST(RowMaskTest, SeesKeysInASplit) {
  const RowMask m = resolve(MaskRule{true, false}, {10, 10});
  EXPECT_TRUE(m.sees_keys_in(5, 0, 3));
  EXPECT_FALSE(m.sees_keys_in(2, 3, 10));
  EXPECT_TRUE(m.sees_keys_in(3, 3, 10));
}

TEST(SoftmaxRules, EmptyRowIsZeroAndMinusInfinity) {
  const FinishedRow<float> row = finish_row(std::numeric_limits<float>::quiet_NaN(), 0.0f, true);
  EXPECT_EQ(row.out(std::numeric_limits<float>::quiet_NaN()), 0.0f);
  EXPECT_EQ(row.lse, -kInf);
}

TEST(SoftmaxRules, NonEmptyRowFollowsTheArithmetic) {
  const FinishedRow<float> row = finish_row(1.5f, 4.0f, false);
  EXPECT_FLOAT_EQ(row.out(2.0f), 0.5f);
  EXPECT_FLOAT_EQ(row.lse, 1.5f + std::log(4.0f));
  // l = 0 on a row with keys: every visible score was −inf, as in 0/0.
  const FinishedRow<float> all_minus_inf = finish_row(-kInf, 0.0f, false);
  EXPECT_TRUE(std::isnan(all_minus_inf.out(0.0f)));
  EXPECT_TRUE(std::isnan(all_minus_inf.lse));
  const FinishedRow<float> nan_sum = finish_row(0.0f, std::nanf(""), false);
  EXPECT_TRUE(std::isnan(nan_sum.out(1.0f)));
  EXPECT_TRUE(std::isnan(nan_sum.lse));
}

TEST(SoftmaxRules, RowLseIsFinishRowsLse) {
  // Kernels that store the lse on some rows only ask row_lse there.
  const float nan = std::nanf("");
  const struct {
    float m, l;
    bool empty;
  } rows[] = {{1.5f, 4.0f, false}, {-kInf, 0.0f, false}, {0.0f, nan, false},
              {nan, 0.0f, true}, {-3.0f, 1.0f, false}, {2.0f, 0.0f, true}};
  for (const auto& r : rows) {
    const float whole = finish_row(r.m, r.l, r.empty).lse, alone = row_lse(r.m, r.l, r.empty);
    if (std::isnan(whole)) EXPECT_TRUE(std::isnan(alone));
    else EXPECT_EQ(alone, whole);
  }
}

TEST(SoftmaxRules, OnlineRowNeverSubtractsInfinities) {
  OnlineRow row;
  EXPECT_EQ(row.raise_max(-kInf, 1.0f), 0.0f);  // nothing seen yet: alpha 0, not NaN
  EXPECT_EQ(row.neg_max_c(2.0f), -0.0f);
  row.l = 1.0f;
  EXPECT_FLOAT_EQ(row.raise_max(3.0f, 1.0f), 0.0f);  // 2^(−inf − 3) rescales the empty sum
  EXPECT_FLOAT_EQ(row.raise_max(4.0f, 1.0f), 0.5f);
  EXPECT_FLOAT_EQ(row.l, 0.0f);
}

TEST(SoftmaxRules, MergingPartialsKeepsNaN) {
  EXPECT_TRUE(std::isnan(lse_max(1.0f, std::nanf(""))));
  EXPECT_TRUE(std::isnan(lse_max(std::nanf(""), -kInf)));
  EXPECT_EQ(lse_max(-kInf, 2.0f), 2.0f);
  EXPECT_EQ(partial_weight(-kInf, 2.0f), 0.0f);
  EXPECT_EQ(partial_weight(-kInf, -kInf), 0.0f);
  EXPECT_FLOAT_EQ(partial_weight(1.0f, 2.0f), std::exp(-1.0f));
}

// The last wave's split (SDXL's 440 tiles of 32 key blocks on 132 SMs: 44 in
// the last wave, in thirds one round), and where it does not pay.
TEST(TailSplit, SplitsAHalfEmptyLastWave) {
  const TailSplit sdxl = tail_split(440, 132, 32, kForwardTailCosts);
  EXPECT_EQ(sdxl.first, 396);
  EXPECT_EQ(sdxl.parts, 3);
  EXPECT_EQ(sdxl.blocks(440), 396 + 44 * 3);
  // One partial wave: a small grid's tiles split up to the SMs.
  const TailSplit small = tail_split(8, 132, 64, kForwardTailCosts);
  EXPECT_EQ(small.first, 0);
  EXPECT_EQ(small.parts, kMaxTailParts);
  // Full waves, too few units for two parts, a nearly full last wave.
  EXPECT_EQ(tail_split(264, 132, 64, kForwardTailCosts).parts, 1);
  EXPECT_EQ(tail_split(140, 132, 7, kForwardTailCosts).parts, 1);
  EXPECT_EQ(tail_split(131, 132, 64, kForwardTailCosts).parts, 1);
  EXPECT_EQ(tail_split(131, 132, 64, kForwardTailCosts).blocks(131), 131);
  // Block 396 + 3·5 + 2 is part 2 of split tile 5, which stands for tile 401;
  // the shares of 32 key blocks in thirds are 10, 11 and 11, end to end.
  const TailBlock cut = sdxl.at(396 + 3 * 5 + 2);
  EXPECT_EQ(cut.block, 401);
  EXPECT_EQ(cut.tail, 5);
  EXPECT_EQ(cut.part, 2);
  EXPECT_EQ(sdxl.at(395).tail, -1);
  EXPECT_EQ(sdxl.at(395).block, 395);
  EXPECT_EQ(sdxl.share_begin(32, 0), 0);
  EXPECT_EQ(sdxl.share_begin(32, 1), 10);
  EXPECT_EQ(sdxl.share_begin(32, 2), 21);
  EXPECT_EQ(sdxl.share_begin(32, 3), 32);
  // A tile below the fewest units to split (the backward's 128 steps here).
  const TailCosts steps{1.5, 0.5, 1, 128};
  EXPECT_EQ(tail_split(2048, 132, 64, steps).parts, 1);
  EXPECT_GT(tail_split(2048, 132, 256, steps).parts, 1);
  for (const TailCosts& costs : {kForwardTailCosts, steps})
    for (int tiles = 1; tiles < 600; ++tiles)
      for (int units : {1, 8, 13, 32, 94, 128, 300}) {
        const TailSplit s = tail_split(tiles, 132, units, costs);
        EXPECT_TRUE(s.parts == 1 || (s.first % 132 == 0 && s.first < tiles &&
                                     s.parts * costs.min_part_units <= units &&
                                     units >= costs.min_tile_units))
            << tiles << " tiles of " << units;
      }
}

// Random123's known-answer vectors for Philox4x32 at 7 rounds (dropout's) and
// 10 (its tests/kat_vectors): the round function and the key schedule.
TEST(Dropout, PhiloxMatchesTheKnownAnswers) {
  struct Vector {
    Philox4 counter;
    uint32_t k0, k1;
    Philox4 expected7, expected10;
  };
  const Vector vectors[] = {
      {{{0, 0, 0, 0}},
       0,
       0,
       {{0x5f6fb709u, 0x0d893f64u, 0x4f121f81u, 0x4f730a48u}},
       {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x5207ddc2u, 0x45165e59u, 0x4d8ee751u, 0x8c52f662u}},
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0x4dfccabau, 0x190a87f0u, 0xc47362bau, 0xb6b5242au}},
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  static_assert(kDropoutRounds == 7, "dropout's generator is the 7-round one");
  for (const Vector& v : vectors) {
    const Philox4 got7 = philox4x32<7>(v.counter, v.k0, v.k1);
    const Philox4 got10 = philox4x32<10>(v.counter, v.k0, v.k1);
    for (int w = 0; w < 4; ++w) {
      EXPECT_EQ(got7.x[w], v.expected7.x[w]) << "7 rounds, word " << w;
      EXPECT_EQ(got10.x[w], v.expected10.x[w]) << "10 rounds, word " << w;
    }
  }
}

// kept() compares whole words against threshold·2^16 − 1: the same as taking
// the 16-bit half and comparing it with the threshold, at every threshold's edges.
TEST(Dropout, KeptComparesEachHalfWithTheThreshold) {
  for (float p : {1.0f / 65536, 0.1f, 0.5f, 65535.0f / 65536, 1.0f}) {
    const DropoutParams d = dropout_params(p, 1, 0);
    const DropoutRows rows = dropout_rows(d, 0, 1, 0);
    for (uint32_t half : {0u, 1u, d.threshold - 1, d.threshold, d.threshold + 1, 65535u}) {
      if (half > 65535u) continue;
      const Philox4 w{{half, half << 16 | 0xffffu, half | 0xffff0000u, half << 16}};
      const bool want = half >= d.threshold;
      EXPECT_EQ(rows.kept(w, 0), want) << "p " << p << ", half " << half;
      EXPECT_EQ(rows.kept(w, 3), want) << "p " << p << ", half " << half;
    }
  }
}

TEST(Dropout, RateRoundsToSixteenBitsAndScalesExactly) {
  EXPECT_FALSE(dropout_params(0.0f, 1, 0).on());
  EXPECT_FALSE(dropout_params(1e-6f, 1, 0).on());  // rounds to 0
  const DropoutParams tenth = dropout_params(0.1f, 1, 0);
  EXPECT_EQ(tenth.threshold, 6554u);
  EXPECT_FLOAT_EQ(tenth.keep_scale, float(65536.0 / (65536.0 - 6554.0)));
  const DropoutParams all = dropout_params(1.0f, 1, 0);
  EXPECT_EQ(all.threshold, 65536u);
  EXPECT_EQ(all.keep_scale, 0.0f);
}

// The kept fraction of 2^21 elements lies within 5 standard deviations of
// 1 − p at each rate, for fresh seeds; so does each query row's and key's
// share in aggregate (no row or key group is biased).
TEST(Dropout, KeepRateMatchesTheRate) {
  const uint64_t seed = uint64_t(std::random_device{}()) << 32 | std::random_device{}();
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const std::vector<uint8_t> keep = dropout_keep_mask({p, seed, 12345}, 2, 4, 512, 512);
    double kept = 0;
    for (uint8_t k : keep) kept += k;
    const double n = double(keep.size()), rate = 1.0 - p;
    EXPECT_NEAR(kept / n, rate, 5 * std::sqrt(rate * (1 - rate) / n)) << "p " << p << ", seed " << seed;
    // Rows 0–7 and 8–15 of each 16 (one group's two halves) and odd keys.
    double first_half = 0, odd_keys = 0;
    for (size_t e = 0; e < keep.size(); ++e) {
      const size_t i = e / 512 % 512, j = e % 512;
      first_half += (i % 16 < 8) * keep[e];
      odd_keys += (j % 2) * keep[e];
    }
    const double half = n / 2, bound = 5 * std::sqrt(rate * (1 - rate) / half);
    EXPECT_NEAR(first_half / half, rate, bound) << "p " << p << ", seed " << seed;
    EXPECT_NEAR(odd_keys / half, rate, bound) << "p " << p << ", seed " << seed;
  }
}

// The mask is a function of (seed, offset, b, h, i, j): batch index b of a call
// is batch 0 of a call at offset + b·heads_q; another seed or offset (past the
// call's streams) gives another mask, and tile-wise generation agrees with
// element-wise.
TEST(Dropout, MaskDependsOnSeedOffsetAndCoordinatesOnly) {
  const Dropout d{0.3f, 0xfeedfacecafebeefull, 7};
  const int heads = 3, nq = 37, nk = 45;
  const std::vector<uint8_t> two = dropout_keep_mask(d, 2, heads, nq, nk);
  const std::vector<uint8_t> second = dropout_keep_mask({d.p, d.seed, d.offset + heads}, 1, heads, nq, nk);
  EXPECT_TRUE(std::equal(second.begin(), second.end(), two.begin() + two.size() / 2));
  EXPECT_NE(dropout_keep_mask({d.p, d.seed + 1, d.offset}, 2, heads, nq, nk), two);
  EXPECT_NE(dropout_keep_mask({d.p, d.seed, d.offset + 2 * heads}, 2, heads, nq, nk), two);
  const DropoutRows rows = dropout_rows(dropout_params(d.p, d.seed, d.offset), 1, heads, 2);
  int visited = 0;
  rows.for_each(5, 30, 3, 40, [&](int r, int c, bool kept) {
    ++visited;
    EXPECT_EQ(kept, rows.keep(5 + r, 3 + c)) << "row " << 5 + r << ", key " << 3 + c;
    EXPECT_EQ(kept, bool(two[((size_t(1) * heads + 2) * nq + 5 + r) * nk + 3 + c]));
  });
  EXPECT_EQ(visited, 30 * 40);
}

TEST(Dropout, RejectsRatesOutsideZeroToOne) {
  for (float p : {-0.1f, 1.5f, std::numeric_limits<float>::quiet_NaN()})
    EXPECT_THROW(dropout_keep_mask({p, 0, 0}, 1, 1, 1, 1), Error);
  EXPECT_EQ(flashattn_dropout_keep_mask(2.0f, 0, 0, 1, 1, 1, 1, nullptr), FLASHATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashattn_last_error()).find("dropout.p"), std::string::npos);
  uint8_t keep[12];
  EXPECT_EQ(flashattn_dropout_keep_mask(0.5f, 3, 4, 1, 2, 2, 3, keep), FLASHATTN_OK);
  const std::vector<uint8_t> want = dropout_keep_mask({0.5f, 3, 4}, 1, 2, 2, 3);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), keep));
}

TEST(Registry, CAbiListsTheSameBackends) {
  const std::vector<BackendInfo>& all = backends();
  ASSERT_EQ(flashattn_backend_count(), int32_t(all.size()));
  for (int32_t i = 0; i < flashattn_backend_count(); ++i) {
    flashattn_backend_info info{};
    info.struct_size = sizeof info;
    ASSERT_EQ(flashattn_get_backend_info(i, &info), FLASHATTN_OK) << flashattn_last_error();
    EXPECT_EQ(info.backend, int32_t(all[i].backend));
    EXPECT_EQ(std::string(info.name), all[i].name);
    EXPECT_EQ(info.dtypes, all[i].dtypes);
    EXPECT_EQ(info.max_head_dim, all[i].max_head_dim);
    EXPECT_EQ(info.takes_head_dim_v != 0, all[i].takes_head_dim_v);
    EXPECT_EQ(info.takes_backward_head_dim_v != 0, all[i].takes_backward_head_dim_v);
    EXPECT_EQ(backend_from_string(info.name), all[i].backend);
  }
}

// A caller built before the head_dim_v fields (struct_size up to
// takes_backward_sequences) gets the fields it knows and nothing past them.
TEST(Registry, CallersFromBeforeHeadDimVKeepTheirSize) {
  unsigned char bytes[sizeof(flashattn_backend_info) + 8];
  std::memset(bytes, 0xAB, sizeof bytes);
  const uint32_t older = offsetof(flashattn_backend_info, takes_head_dim_v);
  std::memcpy(bytes, &older, sizeof older);
  ASSERT_EQ(flashattn_get_backend_info(0, reinterpret_cast<flashattn_backend_info*>(bytes)),
            FLASHATTN_OK);
  flashattn_backend_info known;
  std::memcpy(&known, bytes, older);
  EXPECT_EQ(known.takes_backward_sequences != 0, backends()[0].takes_backward_sequences);
  for (size_t b = older; b < sizeof bytes; ++b) ASSERT_EQ(bytes[b], 0xAB) << "byte " << b;
}

TEST(Registry, OlderCallersGetOnlyTheFieldsTheyKnow) {
  unsigned char bytes[sizeof(flashattn_backend_info) + 8];
  std::memset(bytes, 0xAB, sizeof bytes);
  const uint32_t older = offsetof(flashattn_backend_info, device);  // up to and with name
  std::memcpy(bytes, &older, sizeof older);
  ASSERT_EQ(flashattn_get_backend_info(0, reinterpret_cast<flashattn_backend_info*>(bytes)),
            FLASHATTN_OK);
  for (size_t b = older; b < sizeof bytes; ++b) ASSERT_EQ(bytes[b], 0xAB) << "byte " << b;
}

TEST(Registry, BadIndexAndSizeAreInvalidArguments) {
  flashattn_backend_info info{};
  info.struct_size = sizeof info;
  EXPECT_EQ(flashattn_get_backend_info(-1, &info), FLASHATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashattn_last_error()).find("index: is -1"), std::string::npos);
  EXPECT_EQ(flashattn_get_backend_info(0, nullptr), FLASHATTN_ERR_INVALID_ARGUMENT);
  info.struct_size = 0;
  EXPECT_EQ(flashattn_get_backend_info(0, &info), FLASHATTN_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace flashattn
