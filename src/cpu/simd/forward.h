// The CPU forward on one instruction set. A work item is one (batch, q head,
// query tile of up to block_rows rows), or one key split of it for shapes with
// too few tiles to fill the threads (decode). It walks the key tiles of
// kBlockN keys that some row of the tile sees (core/mask.h) and keeps, per
// query row i, on scaled scores s_ij = (scale·q_i)·k_j (Q is pre-scaled, so any
// sign of scale works) changed by the score variants (score.h), with c = log2 e:
//   m_i = max of the scores seen so far, l_i = Σ 2^((s_ij − m_i)·c),
//   o_i = Σ 2^((s_ij − m_i)·c)·v_j, rescaled when m_i grows (core/softmax.h).
// The exponent is (s_ij − m_i)·c: the difference of two nearby floats is
// exact, so scores of 1e4 keep their differences of 1 exact, with or without
// a fused multiply-add (SSE2 has none).
// Per key tile, two matrix products on the register-blocked kernel (gemm.h):
//   Sᵀ = K·Qᵀ (keys × rows): the rows lie across the vector lanes, so the
//       softmax's per-row max, sum and rescale are lane-wise, with no
//       horizontal reduction, and only Q is ever transposed (once per item);
//   O = diag(alpha)·O + P·V, reading P out of Sᵀ by its strides.
// Tiles of few rows (decode) take dot products for S instead, keys across the
// lanes (few_rows.h).
// K and V tiles are addressed per run of keys at one stride (key_runs.h), so
// a paged KV cache's tiles, which may straddle pages, cost one block-table
// lookup per page they touch.
// Extra memory: a few tiles per thread, kept between calls, and where a head's
// keys are packed for several of its query tiles (forward_tiles.h,
// packs_keys) up to kMaxPackedKeyBytes of each of K and V per thread; a key
// split adds its partial rows (splits × the few rows that split).
// The kernels are instantiated per Variant (core/variant.h): NoVariant for
// plain attention, whose rows see keys from 0 and whose scores stay as they
// are, so its code is that of no variants at all; AnyVariant for windows'
// lower ends, softcap and ALiBi; BiasVariant adds a bias or boolean mask after
// them, and finishes a row whose every score was −inf as empty.
// No include guard (see vec.h).

namespace forward {

// Sᵀ[j][r] → its score after the variants, for query rows m0 + r.
inline void vary_scores(const Tiles& t, const ScoreVariants& variants, int lanes, int m0, int n0,
                        int cols) {
  for (int r = 0; r < lanes; r += kLanes) {
    const IVec row = lane_index() + (m0 + r);
    for (int j = 0; j < cols; ++j) {
      float* s = t.s + int64_t(j) * lanes + r;
      store(s, variants(load(s), row, splat_int(n0 + j)));
    }
  }
}

// Sᵀ[j][r] = −inf where row r does not see key n0 + j: past its end, or, with
// kLowerEnds, before its beginning.
template <bool kLowerEnds>
void mask_scores(const Tiles& t, int lanes, int n0, int cols) {
  const Vec minus_inf = splat(-INFINITY);
  for (int j = 0; j < cols; ++j) {
    const IVec key = splat_int(n0 + j);
    for (int r = 0; r < lanes; r += kLanes) {
      IVec end;
      __builtin_memcpy(&end, t.key_end + r, sizeof end);
      IVec seen = key < end;
      if constexpr (kLowerEnds) {
        IVec begin;
        __builtin_memcpy(&begin, t.key_begin + r, sizeof begin);
        seen &= key >= begin;
      }
      float* s = t.s + int64_t(j) * lanes + r;
      store(s, seen ? load(s) : minus_inf);
    }
  }
}

// The online softmax over one tile of Sᵀ: m, l and alpha per row, Sᵀ → Pᵀ.
inline void softmax_tile(const Tiles& t, int lanes, int cols) {
  const Vec minus_inf = splat(-INFINITY);
  for (int r = 0; r < lanes; r += kLanes) {
    const Vec m_old = load(t.m + r);
    Vec tile_max = minus_inf;
    for (int j = 0; j < cols; ++j) tile_max = max_nan_blind(tile_max, load(t.s + int64_t(j) * lanes + r));
    const Vec m_new = max_nan_blind(m_old, tile_max);
    const Vec c = splat(kLog2e);
    const Vec m_exp = m_new == minus_inf ? Vec{} : m_new;  // core's exponent_max
    const Vec alpha = exp2_nonpositive((m_old - m_exp) * c);
    Vec sum{};
    for (int j = 0; j < cols; ++j) {
      float* s = t.s + int64_t(j) * lanes + r;
      const Vec prob = exp2_nonpositive((load(s) - m_exp) * c);
      store(s, prob);
      sum += prob;
    }
    store(t.l + r, load(t.l + r) * alpha + sum);
    store(t.m + r, m_new);
    store(t.alpha + r, alpha);
  }
}

// Dropout (core/dropout.h): P(r, j) = 0 where element (m0 + r, n0 + j) is
// dropped, after the softmax has summed it into l; the kept ones take the
// dropout's scale with 1/l when the row finishes.
// P(r, j) is at s[r·row + j·key] (walk_keys' probs over its score tile).
inline void drop_probabilities(const DropoutRows& dropout, float* s, int64_t row, int64_t key,
                               int m0, int rows, int n0, int cols) {
  dropout.for_each(m0, rows, n0, cols, [&](int r, int j, bool kept) {
    if (!kept) s[r * row + j * key] = 0.0f;
  });
}

// O = diag(alpha)·O + P·V on a tile the mask cuts, each row adding only the
// keys it sees: a block of rows multiplies the keys all its rows see (from
// the latest beginning to the earliest end among them; a grouped tile's rows
// restart with each head, so they need not grow with the row) on the matrix
// kernel, then each row adds its few further keys on either side alone. So a
// NaN or Inf in v at a key a row does not see never reaches it as 0·v, as
// standard attention's rule has it (docs/guide.md, non-finite values).
// Without kLowerEnds every row's keys begin at 0.
// P(r, j) is probs.p[r·probs.row + j·probs.k]: Pᵀ's lanes or, for few rows,
// P's (few_rows.h). O and V are dp_v wide (head_dim_v, padded).
template <bool kLowerEnds>
void masked_update(const Tiles& t, MatA probs, int rows, int dp_v, int n0, int cols, MatB v) {
  auto add_keys = [&](int r, int from, int to) {
    float* o = t.o + int64_t(r) * dp_v;
    for (int j = from; j < to; ++j) {
      const Vec prob = splat(probs.p[r * probs.row + j * probs.k]);
      const float* vj = v.p + j * v.ld;
      for (int c = 0; c < dp_v; c += kLanes) store(o + c, load(o + c) + prob * load(vj + c));
    }
  };
  for (int r0 = 0; r0 < rows; r0 += kGemmRows) {
    const int block = std::min(kGemmRows, rows - r0);
    const int32_t* ends = t.key_end + r0;
    const int32_t* begins = t.key_begin + r0;
    const int shared_lo =
        kLowerEnds ? std::clamp(*std::max_element(begins, begins + block) - n0, 0, cols) : 0;
    const int shared_hi = std::clamp(*std::min_element(ends, ends + block) - n0, shared_lo, cols);
    gemm<Init::scale_rows>(block, dp_v, shared_hi - shared_lo,
                           {probs.p + r0 * probs.row + shared_lo * probs.k, probs.row, probs.k},
                           {v.p + int64_t(shared_lo) * v.ld, v.ld},
                           {t.o + int64_t(r0) * dp_v, dp_v}, t.alpha + r0);
    for (int r = r0; r < r0 + block; ++r) {
      const int hi = std::clamp(t.key_end[r] - n0, 0, cols);
      if constexpr (kLowerEnds) {
        const int lo = std::clamp(t.key_begin[r] - n0, 0, cols);
        add_keys(r, lo, std::min(shared_lo, hi));
        add_keys(r, std::max(shared_hi, lo), hi);
      } else {
        add_keys(r, shared_hi, hi);
      }
    }
  }
}

// A tile's query rows: rows [m0, m0 + per_head) of `heads` query heads from
// hq, one head's after another. One head, except in decode with grouped kv
// heads, where a group's heads share the tile, so that each K and V row is
// read once for the group rather than once per head.
struct TileRows {
  int hq, heads, m0, per_head;
  int count() const { return heads * per_head; }
  int row(int r) const { return m0 + r % per_head; }  // tile row r's query row
};

// Whether a group's query heads share the tile (TileRows): plain attention
// only (ALiBi's slopes, a bias and dropout differ per head), when the group's
// rows of the longest query sequence make a few-rows tile.
template <typename Variant>
bool heads_share_tiles(const Sizes& sz) {
  return std::is_same_v<Variant, NoVariant> && sz.group() > 1 &&
         few_rows(sz.group() * sz.seqlen_q);
}

// Walks keys [key_lo, key_hi) (key_lo a multiple of kBlockN) for the query
// rows `tr` of sequence b; leaves O unnormalised, m and l in the tiles. Rows
// and keys count from the sequence's first (seq.q_row0, k_row0). The variants,
// a bias and dropout take tile row r as query row m0 + r of head hq: tiles
// that hold several heads have none of them (heads_share_tiles).
template <typename Variant>
void walk_keys(const AttnParams& p, const Tiles& t, int b, const Sequence& seq, const TileRows& tr,
               int key_lo, int key_hi, const PackedKeys& packed = {}) {
  const Sizes& sz = p.sizes;
  const int hq = tr.hq, m0 = tr.m0, rows = tr.count();
  const int d = sz.head_dim, dp = padded(d), lanes = padded(rows), hk = hq / sz.group();
  const int d_v = sz.head_dim_v, dp_v = padded(d_v);
  const RowMask mask = row_mask(p, seq);
  const int q0 = int(seq.q_row0);
  // Q's rows, scaled: as they are for dot products, else transposed (lanes of
  // Qᵀ are rows; one head's).
  const bool dots = few_rows(rows);
  const MatA probs = dots ? MatA{t.s, kBlockN, 1} : MatA{t.s, 1, lanes};  // P(r, j)
  if (dots) {
    for (int g = 0; g < tr.heads; ++g)
      load_tile(p.dtype, p.q, d, b, hq + g, q0 + m0, tr.per_head,
                t.q_t + int64_t(g) * tr.per_head * dp, dp, p.softmax.scale);
  } else {
    load_transposed(p.dtype, p.q, d, b, hq, q0 + m0, rows, t.q_t, lanes, p.softmax.scale);
  }
  for (int r = 0; r < lanes; ++r) {
    const bool real = r < rows;
    t.m[r] = -INFINITY;
    t.l[r] = 0.0f;
    t.key_end[r] = real ? mask.key_end(tr.row(r)) : 0;
    t.key_begin[r] = real ? mask.key_begin(tr.row(r)) : 0;
  }
  const ScoreVariants variants = score_variants(p, hq, mask);
  const BiasRows<float> bias = Variant::Score::kBias ? scaled_bias(p, b, hq) : BiasRows<float>{};
  const DropoutRows dropout = dropout_rows(p.dropout, b, sz.heads_q, hq);
  std::fill(t.o, t.o + int64_t(rows) * dp_v, 0.0f);
  // K is the matrix kernel's A, read at any stride; the dot products load it
  // as vectors, which need rows padded to the lanes. fp32 tiles within one
  // run of keys (key_runs.h: the whole sequence, or one page of a paged cache)
  // are read where they lie.
  const bool k_in_place = p.dtype == DType::f32 && (!dots || d % kLanes == 0);
  const int k_ld = dots ? dp : d;
  const bool v_in_place = p.dtype == DType::f32 && d_v % kLanes == 0;
  // Few rows on a paged fp32 cache multiply a tile that straddles pages run
  // by run where its keys lie: with one query row the products are so cheap
  // that gathering K and V first added 10–15% to a decode step at pages of 16
  // keys (8192 keys, head_dim 128, two AVX-512 cores). Runs under a quarter
  // tile would pay a product call per few keys, and a tile the mask cuts
  // needs V as one matrix (masked_update): those gather.
  const bool runs_in_place = dots && k_in_place && v_in_place && p.seqs.cache.paged() &&
                             p.seqs.cache.page_size >= kBlockN / 4;
  const KeyBlocks blocks = mask.key_blocks(m0, tr.per_head, kBlockN);
  const int hi = std::min(key_hi, mask.key_end(m0 + tr.per_head - 1));
  for (int n0 = std::max(key_lo, blocks.first<Variant::kLowerEnds>() * kBlockN); n0 < hi;
       n0 += kBlockN) {
    const int cols = std::min(kBlockN, hi - n0);
    const bool cut = blocks.needs_mask<Variant::kLowerEnds>(n0 / kBlockN);
    const bool by_runs =
        runs_in_place && !cut && key_run(p, b, seq, n0, n0 + cols).count < cols;
    MatB v{};
    if (by_runs) {
      scores_by_runs(p, t, b, seq, hk, rows, dp, n0, cols);
    } else {
      const bool from_pack = packed.k && !dots;
      const MatB k = from_pack ? packed.k_rows(n0, d)
                               : key_tile(p, p.k, d, b, seq, hk, n0, cols, k_in_place, t.k, k_ld);
      v = from_pack ? packed.v_rows(n0, dp_v)
                    : key_tile(p, p.v, d_v, b, seq, hk, n0, cols, v_in_place, t.v, dp_v);
      if (dots) scores_by_dots(t.q_t, rows, dp, k, cols, t.s, kBlockN);
      else gemm<Init::zero>(cols, lanes, d, {k.p, k.ld, 1}, {t.q_t, lanes}, {t.s, lanes});
    }
    if (dots) {
      if constexpr (!Variant::Score::kIdentity)
        if (variants.any()) vary_score_rows(t, variants, rows, m0, n0, cols);
      if constexpr (Variant::Score::kBias)
        bias_tile<true>(bias, m0, rows, n0, cols, padded(cols), t.s, kBlockN);
      if (cut) mask_score_rows<Variant::kLowerEnds>(t, rows, n0, cols);
      softmax_rows(t, rows, cols);
    } else {
      if constexpr (!Variant::Score::kIdentity)
        if (variants.any()) vary_scores(t, variants, lanes, m0, n0, cols);
      if constexpr (Variant::Score::kBias)
        bias_tile_transposed<true>(bias, m0, lanes, n0, cols, t.s, lanes);
      if (cut) mask_scores<Variant::kLowerEnds>(t, lanes, n0, cols);
      softmax_tile(t, lanes, cols);
    }
    if constexpr (Variant::kDropout)
      if (p.dropout.on()) drop_probabilities(dropout, t.s, probs.row, probs.k, m0, rows, n0, cols);
    // The next tile's bias rows, requested while this tile's P·V runs.
    if constexpr (Variant::Score::kBias)
      prefetch_bias(bias, m0, rows, n0 + kBlockN, std::min(kBlockN, hi - n0 - kBlockN));
    if (by_runs) update_by_runs(p, t, b, seq, hk, rows, dp_v, n0, cols);
    else if (cut) masked_update<Variant::kLowerEnds>(t, probs, rows, dp_v, n0, cols, v);
    else gemm<Init::scale_rows>(rows, dp_v, cols, probs, v, {t.o, dp_v}, t.alpha);
  }
}

// The keys that query rows [row_begin, row_end) of sequence b see, from kv
// head hk, packed (PackedKeys): from the first key block a row there sees to
// the last row's end; none where they see no key.
template <typename Variant>
PackedKeys pack_keys(const AttnParams& p, int b, const Sequence& seq, const RowMask& mask, int hk,
                     int row_begin, int row_end) {
  const Sizes& sz = p.sizes;
  const int d = sz.head_dim, dp_v = padded(sz.head_dim_v);
  const int first = Variant::kLowerEnds ? mask.key_begin(row_begin) / kBlockN * kBlockN : 0;
  const int end = std::min(seq.seqlen_k, mask.key_end(row_end - 1));
  if (end <= first) return {};
  const int keys = end - first;
  float* k = packed_keys_buffer().reserve(size_t(keys) * size_t(d + dp_v));
  float* v = k + size_t(keys) * size_t(d);
  key_tile(p, p.k, d, b, seq, hk, first, keys, false, k, d);
  key_tile(p, p.v, sz.head_dim_v, b, seq, hk, first, keys, false, v, dp_v);
  return {k, v, first};
}

// Finishes the rows in the tiles: out = O·out_scale / l (out_scale: dropout's
// keep scale, or 1) and lse (natural units), or 0 and −inf where `empty` says
// the row saw no key or, with a bias (kZeroSumEmpty), where every score it saw
// was −inf (core/softmax.h, finished_empty). Writes rows of `out` (out's
// layout and dtype) and lse at lse[r·lse_stride] if lse is non-null. O's rows
// are d_v (head_dim_v) wide.
template <bool kZeroSumEmpty, typename Empty>
void finish_rows(const Tiles& t, int rows, int d_v, Empty empty, float* lse, int64_t lse_stride,
                 float out_scale) {
  const int dp_v = padded(d_v);
  for (int r = 0; r < rows; ++r) {
    const bool row_empty = finished_empty<kZeroSumEmpty>(empty(r), t.l[r]);
    const FinishedRow<float> row = finish_row(t.m[r], t.l[r], row_empty);
    if (row.empty) std::fill(t.o + int64_t(r) * dp_v, t.o + int64_t(r + 1) * dp_v, 0.0f);
    t.alpha[r] = row.inv_l * out_scale;  // reused as the output's row scale
    if (lse) lse[r * lse_stride] = row.lse;
  }
}

// Key splits for a problem of `tiles` query tiles over n_blocks key blocks:
// enough that every thread has work several times over, none below two blocks.
inline int key_splits(int64_t tiles, int n_blocks) {
  const int64_t want = 4 * int64_t(thread_count());
  if (tiles >= want || n_blocks < 4) return 1;
  return int(std::min<int64_t>((want + tiles - 1) / tiles, n_blocks / 2));
}

// The tiles' rows from row r0 on (per-row state and O, dp_v wide), as a
// tiles view.
inline Tiles rows_from(const Tiles& t, int r0, int dp_v) {
  Tiles view = t;
  view.o += int64_t(r0) * dp_v;
  view.m += r0;
  view.l += r0;
  view.alpha += r0;
  return view;
}

template <typename Variant>
void run_with(const AttnParams& p) {
  const Sizes& sz = p.sizes;
  // Tiles per (batch, q head) and query block, or, where a group's heads
  // share them, per (batch, kv head): one block holds all their rows then.
  const bool shared = heads_share_tiles<Variant>(sz);
  const int tile_heads = shared ? sz.group() : 1, head_tiles = sz.heads_q / tile_heads;
  const int d_v = sz.head_dim_v, dp_v = padded(d_v);  // out's
  const int bm = block_rows(p, int64_t(sz.batch) * head_tiles);
  const int m_blocks = shared ? 1 : (sz.seqlen_q + bm - 1) / bm;
  const int64_t query_tiles = int64_t(sz.batch) * head_tiles * m_blocks;
  const int n_blocks = (sz.seqlen_k + kBlockN - 1) / kBlockN;
  const int splits = key_splits(query_tiles, n_blocks);
  const int split_keys = (n_blocks + splits - 1) / splits * kBlockN;
  float* lse = p.softmax.lse;
  // The rows of query tile `tile` in sequence seq (none past its rows).
  auto tile_rows = [&](int64_t tile, const Sequence& seq) {
    const int m_block = int(tile % m_blocks), h = int(tile / m_blocks % head_tiles);
    const int m0 = m_block * bm;
    const int per_head = shared ? seq.seqlen_q : std::max(0, std::min(bm, seq.seqlen_q - m0));
    return TileRows{h * tile_heads, tile_heads, m0, per_head};
  };
  auto batch_of = [&](int64_t tile) { return int(tile / m_blocks / head_tiles); };

  if (splits == 1) {
    // An item is `group` neighbouring query tiles of one head, which read its
    // keys packed once where that pays (packs_keys), else one tile.
    const bool pack = !shared && packs_keys(p, bm);
    const int group = pack ? tiles_per_item(query_tiles, m_blocks) : 1;
    const int groups = (m_blocks + group - 1) / group;
    parallel_for(query_tiles / m_blocks * groups, [&](int64_t item, int) {
      const int64_t head_tile = item / groups;  // (batch, head) as the tiles count them
      const int first_block = int(item % groups) * group;
      const int last_block = std::min(m_blocks, first_block + group);
      const int b = batch_of(head_tile * m_blocks);
      const Sequence seq = sequence(p, b);
      const RowMask mask = row_mask(p, seq);
      PackedKeys packed;
      if (group > 1) {
        const TileRows last = tile_rows(head_tile * m_blocks + last_block - 1, seq);
        const int rows_end = std::min(seq.seqlen_q, last.m0 + last.per_head);
        if (rows_end > first_block * bm)
          packed = pack_keys<Variant>(p, b, seq, mask, last.hq / sz.group(), first_block * bm,
                                      rows_end);
      }
      for (int64_t tile = head_tile * m_blocks + first_block;
           tile < head_tile * m_blocks + last_block; ++tile) {
        const TileRows tr = tile_rows(tile, seq);
        if (tr.per_head == 0) return;  // past a shorter sequence of a packed batch
        const Tiles t = tiles(sz, shared ? tr.count() : bm);
        walk_keys<Variant>(p, t, b, seq, tr, 0, seq.seqlen_k, packed);
        for (int g = 0; g < tr.heads; ++g) {
          const int hq = tr.hq + g, m0 = tr.m0;
          const Tiles head = rows_from(t, g * tr.per_head, dp_v);
          finish_rows<Variant::Score::kBias>(
              head, tr.per_head, d_v, [&](int r) { return mask.empty(m0 + r); },
              lse ? lse + stats_row0(p, b, hq, seq) + m0 : nullptr, 1, p.dropout.keep_scale);
          store_tile(p.dtype, p.o, d_v, b, hq, int(seq.q_row0) + m0, tr.per_head, head.o, dp_v,
                     head.alpha);
        }
      }
    });
    return;
  }

  // Split: each (query tile, split) writes its rows' normalised partial output
  // and lse; a second pass merges them per row by their lse. Partial rows are
  // laid out as lse (stats_row0), over the tensors' own sizes.
  const Sizes stored = storage_sizes(p);
  const int64_t all_rows = int64_t(stored.batch) * sz.heads_q * stored.seqlen_q;
  thread_local AlignedBuffer partial_buffer;
  float* partial_out = partial_buffer.reserve(size_t(splits) * all_rows * (d_v + 1));
  float* partial_lse = partial_out + size_t(splits) * all_rows * d_v;
  parallel_for(query_tiles * splits, [&](int64_t item, int) {
    const int split = int(item % splits);
    const int64_t tile = item / splits;
    const int b = batch_of(tile);
    const Sequence seq = sequence(p, b);
    const TileRows tr = tile_rows(tile, seq);
    if (tr.per_head == 0) return;
    const int key_lo = split * split_keys, key_hi = std::min(seq.seqlen_k, key_lo + split_keys);
    const Tiles t = tiles(sz, shared ? tr.count() : bm);
    walk_keys<Variant>(p, t, b, seq, tr, key_lo, std::max(key_lo, key_hi));
    const RowMask mask = row_mask(p, seq);
    for (int g = 0; g < tr.heads; ++g) {
      const int hq = tr.hq + g, m0 = tr.m0;
      const Tiles head = rows_from(t, g * tr.per_head, dp_v);
      const int64_t row0 = stats_row0(p, b, hq, seq) + m0;
      // A partial whose keys the bias masked entirely finishes empty too: lse
      // −inf, weighed 0 by the merge.
      finish_rows<Variant::Score::kBias>(
          head, tr.per_head, d_v, [&](int r) { return !mask.sees_keys_in(m0 + r, key_lo, key_hi); },
          partial_lse + split * all_rows + row0, 1, p.dropout.keep_scale);
      // Partial (split, row): out at partial_out[(split·all_rows + row)·d_v].
      const TensorRef out{partial_out + (split * all_rows + row0) * d_v, 0, d_v, 0};
      store_tile(DType::f32, out, d_v, 0, 0, 0, tr.per_head, head.o, dp_v, head.alpha);
    }
  });
  parallel_for((all_rows + 63) / 64, [&](int64_t chunk, int) {
    thread_local AlignedBuffer merge_buffer;  // kept between calls, as the tiles
    float* merged = merge_buffer.reserve(size_t(d_v));
    for (int64_t row = chunk * 64; row < std::min(all_rows, (chunk + 1) * 64); ++row) {
      float lse_top = -INFINITY;
      for (int s = 0; s < splits; ++s) lse_top = lse_max(lse_top, partial_lse[s * all_rows + row]);
      float sum = 0.0f;
      std::fill(merged, merged + d_v, 0.0f);
      for (int s = 0; s < splits; ++s) {
        const float w = partial_weight(partial_lse[s * all_rows + row], lse_top);
        sum += w;
        const float* part = partial_out + (s * all_rows + row) * d_v;
        for (int c = 0; c < d_v; ++c) merged[c] += w * part[c];
      }
      const FinishedRow<float> fin = finish_row(lse_top, sum, lse_top == -INFINITY);
      const int i = int(row % stored.seqlen_q), hq = int(row / stored.seqlen_q % sz.heads_q);
      const int b = int(row / stored.seqlen_q / sz.heads_q);
      const int64_t base = row_index(p.o, b, hq, i);
      for (int c = 0; c < d_v; ++c) store_float(p.o.data, p.dtype, base + c, fin.out(merged[c]));
      if (lse) lse[row] = fin.lse;
    }
  });
}

inline void run(const AttnParams& p) {
  with_variant<AnyVariant, BiasVariant>(p, [&](auto variant) { run_with<decltype(variant)>(p); });
}

}  // namespace forward
