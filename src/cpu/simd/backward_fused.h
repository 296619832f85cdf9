// The CPU backward's one-pass schedule (backward.h states the sums): one item
// per (batch, kv head), which walks the key tiles and, for each, the rows of
// every query head of the group that see it, as a key item does, and adds
// dq_i += ds_ij·k_j from the same dS: five products of a tile's size, each
// once. dq of the item's rows is summed in a per-thread fp32 buffer (group ×
// seqlen_q × padded head_dim) and written when the last key tile has passed;
// the item's Q, dO and K rows are copied once into contiguous rows first
// (item_copies), up to kMaxPackedBytes each.
// Every sum keeps a fixed order (dk and dv: heads, then rows; dq: key tiles),
// so the result is the same on every run. backward_schedule.h chooses between
// this and the two passes. No include guard (see vec.h).

namespace backward {

// The most bytes an item's dq sums may take: beyond, the two passes run. A
// thread holds one item's buffer at a time, so those in use add up to at most
// dq's own size; the bound caps what each thread keeps between calls after a
// long sequence: 8 MiB is seqlen 16384 at head_dim 128, one q head per kv head.
constexpr size_t kMaxDqBytes = size_t(8) << 20;

// Floats of an item's dq sums at the batch's longest query sequence.
inline size_t item_dq_floats(const Sizes& sz) {
  return size_t(sz.group()) * size_t(sz.seqlen_q) * size_t(padded(sz.head_dim));
}

// The most bytes of each of Q, dO and K an item copies into contiguous fp32
// rows before its key tiles (beyond, each tile reads the tensors, as the two
// passes do). 2 MiB: seqlen 4096 at head_dim 128 per head.
constexpr size_t kMaxPackedBytes = size_t(2) << 20;

// Whether a head's rows of head_dim floats, row_stride floats apart, fall into
// fewer of L1's sets than contiguous rows would. L1 indexes 64 sets of 64-byte
// lines (x86 and the common Arm cores), so rows a multiple of 4 KiB apart (8
// heads of 128) put every row's lines in the same few sets, and the one
// pass's operands, re-read for every key tile, keep missing.
inline bool rows_crowd_l1_sets(int64_t row_stride, int head_dim) {
  constexpr int64_t kSetSpan = 4096, kLine = 64;
  const int64_t apart = std::abs(row_stride) * int64_t(sizeof(float)) % kSetSpan;
  const int64_t starts = kSetSpan / std::gcd(apart == 0 ? kSetSpan : apart, kSetSpan);
  const int64_t lines = (int64_t(head_dim) * int64_t(sizeof(float)) + kLine - 1) / kLine;
  return starts * lines < kSetSpan / kLine;
}

// Whether an item copies its operands once: where the tiles would otherwise
// convert them again for every key tile (16-bit inputs, unpadded rows) or
// read them in place from crowded sets (two cores of an Intel Xeon: 8 heads
// of 128 1.01–1.20× faster with the copies; 7 heads, whose rows spread over
// every set, level).
inline bool copies_pay(const BwdParams& p) {
  const Sizes& sz = p.sizes;
  if (p.dtype != DType::f32 || sz.head_dim % kLanes || sz.head_dim_v % kLanes) return true;
  return rows_crowd_l1_sets(p.q.row_stride, sz.head_dim) ||
         rows_crowd_l1_sets(p.grad.dout.row_stride, sz.head_dim_v) ||
         rows_crowd_l1_sets(p.k.row_stride, sz.head_dim);
}

// An item's copies of its group's Q and dO rows and its K rows, in `buffer`;
// k null (and rows.q null) where they would pass kMaxPackedBytes.
struct ItemCopies {
  PackedRows rows;
  const float* k = nullptr;
};

inline ItemCopies item_copies(AlignedBuffer& buffer, const BwdParams& p, int b,
                              const Sequence& seq, int hk) {
  const Sizes& sz = p.sizes;
  const int group = sz.group(), dp = padded(sz.head_dim), dp_v = padded(sz.head_dim_v);
  const size_t q_floats = size_t(group) * seq.seqlen_q * dp;
  const size_t dout_floats = size_t(group) * seq.seqlen_q * dp_v;
  const size_t k_floats = size_t(seq.seqlen_k) * dp;
  if (std::max({q_floats, dout_floats, k_floats}) * sizeof(float) > kMaxPackedBytes) return {};
  float* q = buffer.reserve(q_floats + dout_floats + k_floats);
  float* dout = q + q_floats;
  float* k = dout + dout_floats;
  for (int g = 0; g < group; ++g) {
    const int hq = hk * group + g;
    load_tile(p.dtype, p.q, sz.head_dim, b, hq, int(seq.q_row0), seq.seqlen_q,
              q + size_t(g) * seq.seqlen_q * dp, dp);
    load_tile(p.dtype, p.grad.dout, sz.head_dim_v, b, hq, int(seq.q_row0), seq.seqlen_q,
              dout + size_t(g) * seq.seqlen_q * dp_v, dp_v);
  }
  load_tile(p.dtype, p.k, sz.head_dim, b, hk, int(seq.k_row0), seq.seqlen_k, k, dp);
  return {{q, dout, seq.seqlen_q}, k};
}

// dq, dk and dv of kv head hk of sequence b and its group's query heads;
// `copy`: the call's copies_pay.
template <typename Variant>
void kv_head_item(const BwdParams& p, const float* dots, int b, const Sequence& seq, int hk,
                  bool copy) {
  const Sizes& sz = p.sizes;
  const int d = sz.head_dim, dp = padded(d), group = sz.group();
  const RowMask mask = row_mask(p, seq);
  thread_local AlignedBuffer buffer, k_buffer, dq_buffer, copies_buffer;
  const KeyTile t = key_tile_in(buffer, sz);
  float* k_tile = k_buffer.reserve(size_t(kBlockN) * dp);
  const size_t head_dq = size_t(seq.seqlen_q) * dp;
  float* dq = dq_buffer.reserve(group * head_dq);
  std::fill(dq, dq + group * head_dq, 0.0f);
  const ItemCopies copies = copy ? item_copies(copies_buffer, p, b, seq, hk) : ItemCopies{};
  for (int n0 = 0; n0 < seq.seqlen_k; n0 += kBlockN) {
    const int cols = std::min(kBlockN, seq.seqlen_k - n0);
    start_key_tile(p, b, seq, hk, n0, cols, t);
    const MatB k = copies.k ? MatB{copies.k + size_t(n0) * dp, dp}
                            : rows_of(p, p.k, d, b, hk, int(seq.k_row0) + n0, cols, k_tile);
    const RowRange seeing = mask.rows_seeing(n0, cols);
    for (int g = 0; g < group; ++g) {
      const int hq = hk * group + g;
      const ScoreVariants variants = score_variants(p, hq, mask);
      for (int m0 = seeing.begin; m0 < seeing.end; m0 += kBlockM) {
        const int rows = std::min(kBlockM, seeing.end - m0);
        add_row_block<Variant>(p, dots, b, seq, mask, hq, variants, n0, m0, rows, t, copies.rows);
        // dQ += dS·K over the tile's real keys only.
        float* dq_rows = dq + g * head_dq + size_t(m0) * dp;
        gemm<Init::add>(rows, dp, cols, {t.ds, kBlockN, 1}, k, {dq_rows, dp});
      }
    }
    finish_key_tile(p, b, seq, hk, n0, cols, t);
  }
  for (int g = 0; g < group; ++g) {
    const int hq = hk * group + g;
    float* head = dq + g * head_dq;
    const int64_t at = stats_row0(p, b, hq, seq);
    for (int r = 0; r < seq.seqlen_q; ++r)
      if (without_probabilities(p, mask, at + r, r))
        std::fill(head + size_t(r) * dp, head + size_t(r + 1) * dp, 0.0f);
    store_tile(p.dtype, p.grad.dq, d, b, hq, int(seq.q_row0), seq.seqlen_q, head, dp, nullptr,
               p.softmax.scale);
  }
}

template <typename Variant>
void one_pass(const BwdParams& p, const float* dots) {
  const Sizes& sz = p.sizes;
  const bool copy = copies_pay(p);
  parallel_for(int64_t(sz.batch) * sz.heads_kv, [&](int64_t item, int) {
    const int b = int(item / sz.heads_kv), hk = int(item % sz.heads_kv);
    kv_head_item<Variant>(p, dots, b, sequence(p, b), hk, copy);
  });
}

}  // namespace backward
