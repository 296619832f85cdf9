// The mask as a key range per query row: row i of a sequence sees the keys
// [key_begin(i), key_end(i)) and no other. MaskRule is what the caller asked
// for; RowMask is that rule resolved for one sequence's lengths (row_mask(p, seq)
// in core/params.h), and everything a backend needs follows from it:
//   - the element mask of a score tile (key j hidden from row i: score −inf);
//   - the key blocks a query tile visits (blocks outside every row's range are
//     skipped, never loaded) and, among them, those every row of the tile sees
//     whole, which need no element mask;
//   - the query rows that see a key tile (the backward walks those);
//   - whether a row is empty: it sees no key, so its output is 0 and its lse −inf.
// With off the alignment offset (0 top-left, seqlen_k − seqlen_q bottom-right),
// row i sees key j iff  i + off − left <= j <= i + off + right:  a causal mask
// is right = 0, a sliding window sets left and right, −1 leaves a side open.
// So both ends grow by one key per row, and every rule is two offsets:
// key_begin(i) = i + lower_offset and key_end(i) = i + upper_offset + 1,
// clamped to [0, seqlen_k].
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/host_device.h"
#include "core/seqlen.h"

namespace flashattn {

// The mask the caller asked for; resolve() turns it, for one sequence's
// lengths, into the key range each query row sees.
struct MaskRule {
  bool causal;
  bool bottom_right;      // off = seqlen_k − seqlen_q (else 0); a window without causal uses it too
  int window_left = -1;   // keys before i + off a row sees; −1: all
  int window_right = -1;  // keys after i + off a row sees; −1: all (causal: 0)
};

// Key blocks [begin, end) hold a key that some row of a query tile sees; in
// [unmasked_begin, unmasked_end) every row of the tile sees every key. Plain
// data, as RowMask.
//
// kLowerEnds: whether the kernel was built for rules with a lower end (a
// sliding window's left side; the Variant a kernel is instantiated with says,
// core/variant.h). Without, a walk starts at block 0 and checks only the upper
// end, both known at compile time: a lower end known only at run time costs the
// mma.sync key loops a register, which at head dims 64 and 128 (255 registers)
// sent K's and V's row strides out to constant loads inside the loop, 3–5%
// slower (docs/perf/cuda_mma.md, v3.8). A rule without a lower end resolves to
// begin = unmasked_begin = 0, so either build walks it right.
struct KeyBlocks {
  int begin, end;
  int unmasked_begin, unmasked_end;

  // The first block a walk visits.
  template <bool kLowerEnds>
  FLASHATTN_HOST_DEVICE int first() const { return kLowerEnds ? begin : 0; }
  // Whether a row's key range may begin inside block n_block.
  template <bool kLowerEnds>
  FLASHATTN_HOST_DEVICE bool lower_end_in(int n_block) const {
    return kLowerEnds && n_block < unmasked_begin;
  }
  // Whether block n_block needs the element mask. Both bounds are read
  // unconditionally (| not ||), so that a kernel can load them early.
  template <bool kLowerEnds>
  FLASHATTN_HOST_DEVICE bool needs_mask(int n_block) const {
    return lower_end_in<kLowerEnds>(n_block) | (n_block >= unmasked_end);
  }
};

// Query rows [begin, end) see some key of a key tile.
struct RowRange {
  int begin, end;
};

// Plain data without default initialisers, so kernels can keep it in a
// __shared__ variable; resolve() sets every field.
struct RowMask {
  int seqlen_q;
  int seqlen_k;
  // Whether rows have an upper end (causal, or a window's right side), and
  // whether a lower end (a window's left side); resolve() leaves open a side
  // that cuts no row, so each offset lies within ±(seqlen_q + seqlen_k).
  bool bounded_above;
  bool bounded_below;
  int64_t upper_offset;  // key j visible to row i only if !bounded_above or j <= i + upper_offset
  int64_t lower_offset;  // ... and only if !bounded_below or j >= i + lower_offset
  // Rows in [first_nonempty_row, end_nonempty_row) see some key, the others
  // none (both ends grow with the row): INT_MIN and INT_MAX where every row
  // sees a key. Resolved once, so that a kernel's empty-row test is two
  // comparisons with constants, not key_end's 64-bit arithmetic and branches
  // per row (cuda_wgmma's epilogue, docs/perf/cuda_wgmma.md v4.17).
  int first_nonempty_row;
  int end_nonempty_row;
  int64_t alignment;  // off: ALiBi's distance is |i + off − j|

  FLASHATTN_HOST_DEVICE int key_begin(int64_t row) const {
    if (!bounded_below) return 0;
    const int64_t begin = row + lower_offset;
    return begin <= 0 ? 0 : (begin >= seqlen_k ? seqlen_k : int(begin));
  }
  FLASHATTN_HOST_DEVICE int key_end(int64_t row) const {
    if (!bounded_above) return seqlen_k;
    const int64_t end = row + upper_offset + 1;
    return end <= 0 ? 0 : (end >= seqlen_k ? seqlen_k : int(end));
  }
  // Sequences shorter than kSmallSeqlen (2^29) keep row + offset inside 32 bits
  // for every row a kernel's tiles reach (a tile before row 0 or past seqlen_q):
  // a bounded side's offset lies within (−seqlen_q, seqlen_k), so the sums stay
  // within ±(seqlen_q + seqlen_k + a tile). For such problems key_begin_small
  // and key_end_small give key_begin's and key_end's values as selects, without
  // 64-bit arithmetic or branches on a latency-bound kernel's path (cuda_tiled's
  // one-warp path, cuda_wgmma's forward, whose launch holds to the limit;
  // test_core checks them against the general forms).
  static constexpr int kSmallSeqlen = 1 << 29;
  FLASHATTN_HOST_DEVICE static bool small(int64_t seqlen_q, int64_t seqlen_k) {
    return seqlen_q < kSmallSeqlen && seqlen_k < kSmallSeqlen;
  }
  FLASHATTN_HOST_DEVICE int key_begin_small(int row) const {
    const int begin = row + int(lower_offset);
    return bounded_below ? clamp_key(begin) : 0;
  }
  FLASHATTN_HOST_DEVICE int key_end_small(int row) const {
    const int end = row + int(upper_offset) + 1;
    return bounded_above ? clamp_key(end) : seqlen_k;
  }
  // key_begin and key_end, in their small forms where kSmall.
  template <bool kSmall>
  FLASHATTN_HOST_DEVICE int key_begin_of(int64_t row) const {
    if constexpr (kSmall) return key_begin_small(int(row));
    else return key_begin(row);
  }
  template <bool kSmall>
  FLASHATTN_HOST_DEVICE int key_end_of(int64_t row) const {
    if constexpr (kSmall) return key_end_small(int(row));
    else return key_end(row);
  }
  FLASHATTN_HOST_DEVICE int clamp_key(int key) const {
#ifdef __CUDA_ARCH__
    return ::max(0, ::min(seqlen_k, key));  // IMNMX, no branch
#else
    return std::max(0, std::min(seqlen_k, key));
#endif
  }
  // key_end(row) <= key_begin(row), from the resolved row range.
  FLASHATTN_HOST_DEVICE bool empty(int64_t row) const {
    return row < first_nonempty_row || row >= end_nonempty_row;
  }
  // key >= key_end(row), asked without clamping key_end: the cheaper form for a
  // key loop that asks it of every block's last key.
  FLASHATTN_HOST_DEVICE bool beyond_end(int64_t row, int64_t key) const {
    return key >= seqlen_k || (bounded_above && key > row + upper_offset);
  }
  // Whether row does not see key (either end), for keys in [0, seqlen_k).
  FLASHATTN_HOST_DEVICE bool hidden(int64_t row, int64_t key) const {
    return beyond_end(row, key) || (bounded_below && key < row + lower_offset);
  }
  // Whether the row sees a key of [key_lo, key_hi): a kernel that walked only
  // those keys (one split of them) finishes the row as empty if not.
  FLASHATTN_HOST_DEVICE bool sees_keys_in(int64_t row, int key_lo, int key_hi) const {
    const int lo = key_begin(row) > key_lo ? key_begin(row) : key_lo;
    const int hi = key_end(row) < key_hi ? key_end(row) : key_hi;
    return lo < hi;
  }

  // The key blocks of block_n keys for query rows [row0, row0 + rows) (row0 may
  // be negative: a tile that starts before row 0). key_begin and key_end grow
  // with the row, so the first row bounds the blocks all rows see whole and the
  // last row the blocks any row sees. Built without lower ends (kLowerEnds
  // false, above), begin and unmasked_begin are 0 without asking key_begin: its
  // 64-bit arithmetic and branches were a tenth of the Hopper kernel's per-tile
  // set-up at 128 keys. The quotients are of keys ≥ 0, divided unsigned (a
  // shift, where a signed one needs the sign's fix-up).
  // kSmall: the key ranges in their small forms (kSmallSeqlen).
  template <bool kLowerEnds = true, bool kSmall = false>
  FLASHATTN_HOST_DEVICE KeyBlocks key_blocks(int64_t row0, int rows, int block_n) const {
    const int64_t last = row0 + rows - 1;
    const auto blocks = [block_n](int keys) { return int(unsigned(keys) / unsigned(block_n)); };
    KeyBlocks b{};
    if constexpr (kLowerEnds) {
      b.begin = blocks(key_begin_of<kSmall>(row0));
      b.unmasked_begin = blocks(key_begin_of<kSmall>(last) + block_n - 1);
    }
    b.end = blocks(key_end_of<kSmall>(last) + block_n - 1);
    if (b.end < b.begin) b.end = b.begin;
    b.unmasked_end = blocks(key_end_of<kSmall>(row0));
    if (b.unmasked_end < b.unmasked_begin) b.unmasked_end = b.unmasked_begin;
    return b;
  }

  // The query rows that see some key of [key0, key0 + keys): those whose upper
  // end reaches key0 and whose lower end lies before key0 + keys.
  FLASHATTN_HOST_DEVICE RowRange rows_seeing(int key0, int keys) const {
    const int64_t key_hi = int64_t(key0) + keys < seqlen_k ? int64_t(key0) + keys : seqlen_k;
    int64_t first = bounded_above ? int64_t(key0) - upper_offset : 0;
    int64_t end = bounded_below ? key_hi - lower_offset : seqlen_q;
    if (first < 0) first = 0;
    if (end > seqlen_q) end = seqlen_q;
    // Selects, not an early return, so that a kernel asking it per tile keeps no branch.
    const bool none = keys <= 0 || key0 >= seqlen_k || first >= end;
    return none ? RowRange{0, 0} : RowRange{int(first), int(end)};
  }
};

FLASHATTN_HOST_DEVICE RowMask resolve(const MaskRule& rule, SequenceLengths seq) {
  RowMask m{};
  m.seqlen_q = seq.seqlen_q;
  m.seqlen_k = seq.seqlen_k;
  const int64_t off = rule.bottom_right ? int64_t(seq.seqlen_k) - seq.seqlen_q : 0;
  m.alignment = off;
  const int64_t right = rule.causal ? 0 : rule.window_right;
  const int64_t left = rule.window_left;
  // A side that cuts no row of [0, seqlen_q) is left open (row 0 reaches the
  // last key; the last row, key 0): a window wider than the sequence is the
  // plain rule and runs on the plain kernels. So a bounded side has
  // −seqlen_q <= upper_offset < seqlen_k − 1 and −seqlen_q < lower_offset <= seqlen_k.
  m.bounded_above = right >= 0 && off + right < int64_t(seq.seqlen_k) - 1;
  m.bounded_below = left >= 0 && (seq.seqlen_q - 1) + off - left > 0;
  m.upper_offset = m.bounded_above ? off + right : 0;
  m.lower_offset = m.bounded_below ? off - left : 0;
  // Row i sees a key iff i + upper_offset >= 0 (key_end > 0) and
  // i + lower_offset < seqlen_k (key_begin < seqlen_k); lower_offset <=
  // upper_offset, so then key_begin < key_end.
  if (seq.seqlen_k == 0) {
    m.first_nonempty_row = INT_MAX;
    m.end_nonempty_row = INT_MAX;
  } else {
    m.first_nonempty_row = m.bounded_above ? int(-m.upper_offset) : INT_MIN;
    const int64_t end = int64_t(seq.seqlen_k) - m.lower_offset;
    m.end_nonempty_row = m.bounded_below && end < INT_MAX ? int(end) : INT_MAX;
  }
  return m;
}

}  // namespace flashattn
