// The CPU backward's pieces on one instruction set, from the forward's out
// and lse, and its two-pass schedule. With s_ij = scale·(q_i·k_j), x_ij its
// score after the variants (score.h) and p_ij = e^(x_ij − lse_i) (recomputed,
// never stored; 0 for keys row i does not see):
//   D_i = dO_i·O_i (along head_dim_v)               (a pass over rows)
//   dv_j = Σ_i p_ij·dO_i,  dk_j = scale·Σ_i ds_ij·q_i (items: key tiles)
//   dq_i = scale·Σ_j ds_ij·k_j                       (items: query tiles)
// with ds_ij = p_ij·(dO_i·v_j − D_i)·∂x_ij/∂s_ij (the softcap's 1 − tanh²; 1
// without); the kernels are instantiated per Variant, as the forward's.
// Dropout (core/dropout.h) multiplies dO_i·v_j by z_ij in ds_ij and p_ij by
// z_ij in dv_j, from a tile of the z_ij regenerated per block. Each
// gradient is summed by one item in a fixed order (a key tile walks its
// group's query heads and rows, a query tile its keys), so the result is the
// same on every run and no item writes another's rows: the deterministic
// option costs nothing here. The two passes recompute S and dP each: seven
// products of a tile's size, in exchange for parallelism over tiles instead
// of heads. Where (batch, kv head) items alone keep every thread busy, the
// one-pass schedule (backward_fused.h) computes each product once, five in
// all; backward_schedule.h chooses.
// Each pass transposes only its own item's tiles, once: a key item takes Kᵀ
// and Vᵀ (keys across the lanes) and multiplies row-major Q and dO tiles
// against them; a query item takes Qᵀ and dOᵀ (rows across the lanes), as the
// forward does. A row that sees no key adds nothing and gets dq 0; so does,
// with a bias or boolean mask (BiasVariant: x_ij gains bias_ij, whose
// derivative is 1), a row whose every score was −inf, which the forward
// finished with lse −inf.
// No include guard (see vec.h).

namespace backward {

constexpr int kBlockN = 64;  // keys per key item (a multiple of every lane count)
constexpr int kBlockM = 64;  // query rows per query tile

using forward::padded;

// Whether row (its lse at p.grad.lse[at]) has no probabilities: it sees no
// key, or its lse is −inf (a bias left it only −inf scores). Its gradients
// are 0.
inline bool without_probabilities(const BwdParams& p, const RowMask& mask, int64_t at, int row) {
  return mask.empty(row) || p.grad.lse[at] == -INFINITY;
}

// lse as the exponent's offset: +inf for a row without probabilities, so that
// they are e^(s − inf) = 0 (not e^(−inf + inf)) and it adds nothing.
inline float lse_offset(const BwdParams& p, const RowMask& mask, int64_t at, int row) {
  return without_probabilities(p, mask, at, row) ? INFINITY : p.grad.lse[at];
}

// D for every (batch, q head, row), laid out as lse: over the tensors' own
// sizes, which a packed batch's lse layout follows (core/params.h).
inline void row_dots(const BwdParams& p, float* dots) {
  const Sizes sz = storage_sizes(p);
  const int d_v = sz.head_dim_v, dp_v = padded(d_v);
  parallel_for(int64_t(sz.batch) * sz.heads_q, [&](int64_t slice, int) {
    const int b = int(slice / sz.heads_q), hq = int(slice % sz.heads_q);
    thread_local AlignedBuffer buffer;
    float* o = buffer.reserve(2 * size_t(kBlockM) * dp_v);
    float* dout = o + size_t(kBlockM) * dp_v;
    for (int m0 = 0; m0 < sz.seqlen_q; m0 += kBlockM) {
      const int rows = std::min(kBlockM, sz.seqlen_q - m0);
      load_tile(p.dtype, p.o, d_v, b, hq, m0, rows, o, dp_v);
      load_tile(p.dtype, p.grad.dout, d_v, b, hq, m0, rows, dout, dp_v);
      for (int r = 0; r < rows; ++r) {
        Vec sum{};
        for (int c = 0; c < dp_v; c += kLanes)
          sum += load(o + r * dp_v + c) * load(dout + r * dp_v + c);
        float dot = 0.0f;
        for (int l = 0; l < kLanes; ++l) dot += sum[l];
        dots[slice * sz.seqlen_q + m0 + r] = dot;
      }
    }
  });
}

// Rows [row0, row0 + rows) of a head of t (head_dim wide: head_dim_v for v
// and dO) as a row-major fp32 matrix with rows padded to a multiple of the
// lanes: read in place when fp32 and already so, else converted into `tile`.
inline MatB rows_of(const BwdParams& p, const TensorRef& t, int head_dim, int b, int h, int row0,
                    int rows, float* tile) {
  if (p.dtype == DType::f32 && head_dim % kLanes == 0)
    return {static_cast<const float*>(t.data) + row_index(t, b, h, row0), t.row_stride};
  load_tile(p.dtype, t, head_dim, b, h, row0, rows, tile, padded(head_dim));
  return {tile, padded(head_dim)};
}

// A one-pass item's copies of its group's Q and dO rows (backward_fused.h):
// head g's row r at q[(g·seqlen_q + r)·padded(head_dim)] and likewise in dout
// (padded(head_dim_v)). q null: no copies, the rows come from the tensors.
struct PackedRows {
  const float* q = nullptr;
  const float* dout = nullptr;
  int seqlen_q = 0;
};

// P = e^(x − lse) in place over a tile of lines × width scores S, with lse
// per line (the key pass: lines are rows) or per lane (the query pass: lanes
// are rows); score(s, line, lane0) first gives x from the scaled scores
// s = S·scale: the variants' score, −inf for keys a row does not see.
template <typename Score>
void probabilities(float* s, int lines, int width, const float* lse, bool lse_per_line,
                   float scale, Score score) {
  const Vec c = splat(kLog2e), sc = splat(scale);
  for (int x = 0; x < lines; ++x) {
    for (int y = 0; y < width; y += kLanes) {
      float* at = s + int64_t(x) * width + y;
      const Vec offset = lse_per_line ? splat(lse[x]) : load(lse + y);
      store(at, exp2_nonpositive((score(load(at) * sc, x, y) - offset) * c));
    }
  }
}

// dS = P ⊙ (dP ⊙ Z − D) in place of dP, times the variants' derivative (laid
// out as P) where the Variant changes scores; Z is dropout's factors (laid out
// as P; null: no dropout).
template <typename Variant>
void score_gradients(const float* prob, float* dp, int lines, int width, const float* dots,
                     bool dots_per_line, const float* derivative, const float* keep) {
  for (int x = 0; x < lines; ++x)
    for (int y = 0; y < width; y += kLanes) {
      const Vec dot = dots_per_line ? splat(dots[x]) : load(dots + y);
      const int64_t at = int64_t(x) * width + y;
      Vec dpz = load(dp + at);
      if (keep) dpz *= load(keep + at);
      Vec ds = load(prob + at) * (dpz - dot);
      if constexpr (!Variant::Score::kIdentity) ds *= load(derivative + at);
      store(dp + at, ds);
    }
}

// A key tile's transposed K and V, its dk and dv sums, and the tiles each
// block of query rows passes through, in one thread's buffer.
struct KeyTile {
  float* k_t;         // Kᵀ: head_dim × kBlockN, keys across the lanes
  float* v_t;         // Vᵀ: head_dim_v × kBlockN, as Kᵀ
  float* dk;          // kBlockN × padded(head_dim), unscaled
  float* dv;          // kBlockN × padded(head_dim_v)
  float* q_tile;      // a block's Q rows, where not read in place (rows_of)
  float* dout_tile;   // its dO rows (head_dim_v wide), likewise
  float* s;           // kBlockM × kBlockN: S, then P
  float* ds;          // kBlockM × kBlockN: dP, then dS
  float* derivative;  // kBlockM × kBlockN: ∂x/∂s where the Variant changes scores
  float* keep;        // kBlockM × kBlockN: dropout's z (keep scale or 0) where on
  float* lse;         // kBlockM: the block's exponent offsets (lse_offset)
  float* row_dot;     // kBlockM: the block's D
};

// A KeyTile laid out in `buffer`, grown to fit sz's head dims.
inline KeyTile key_tile_in(AlignedBuffer& buffer, const Sizes& sz) {
  const size_t dp = padded(sz.head_dim), dp_v = padded(sz.head_dim_v);
  const size_t tile = size_t(kBlockN) * dp, row_tile = size_t(kBlockM) * dp;
  const size_t tile_v = size_t(kBlockN) * dp_v, row_tile_v = size_t(kBlockM) * dp_v;
  const size_t square = size_t(kBlockM) * kBlockN;
  KeyTile t;
  t.k_t = buffer.reserve(2 * (tile + tile_v) + row_tile + row_tile_v + 4 * square + 2 * kBlockM);
  t.v_t = t.k_t + tile;
  t.dk = t.v_t + tile_v;
  t.dv = t.dk + tile;
  t.q_tile = t.dv + tile_v;
  t.dout_tile = t.q_tile + row_tile;
  t.s = t.dout_tile + row_tile_v;
  t.ds = t.s + square;
  t.derivative = t.ds + square;
  t.keep = t.derivative + square;
  t.lse = t.keep + square;
  t.row_dot = t.lse + kBlockM;
  return t;
}

// Kᵀ and Vᵀ of keys [n0, n0 + cols) of kv head hk, and dk = dv = 0.
inline void start_key_tile(const BwdParams& p, int b, const Sequence& seq, int hk, int n0, int cols,
                           const KeyTile& t) {
  const int d = p.sizes.head_dim, d_v = p.sizes.head_dim_v, k0 = int(seq.k_row0);
  load_transposed(p.dtype, p.k, d, b, hk, k0 + n0, cols, t.k_t, kBlockN);
  load_transposed(p.dtype, p.v, d_v, b, hk, k0 + n0, cols, t.v_t, kBlockN);
  std::fill(t.dk, t.dk + size_t(kBlockN) * padded(d), 0.0f);
  std::fill(t.dv, t.dv + size_t(kBlockN) * padded(d_v), 0.0f);
}

// Query rows [m0, m0 + rows) of head hq against the key tile at n0: dv and dk
// gain their terms, and t.ds is left holding the block's dS (rows × kBlockN)
// for a caller that also sums dq. Q and dO from `packed` where it holds them.
template <typename Variant>
void add_row_block(const BwdParams& p, const float* dots, int b, const Sequence& seq,
                   const RowMask& mask, int hq, const ScoreVariants& variants, int n0, int m0,
                   int rows, const KeyTile& t, const PackedRows& packed = {}) {
  const int d = p.sizes.head_dim, dp = padded(d), q0 = int(seq.q_row0);
  const int d_v = p.sizes.head_dim_v, dp_v = padded(d_v);
  const size_t packed_row = size_t(hq % p.sizes.group()) * packed.seqlen_q + m0;
  const MatB q = packed.q ? MatB{packed.q + packed_row * dp, dp}
                          : rows_of(p, p.q, d, b, hq, q0 + m0, rows, t.q_tile);
  const MatB dout = packed.q ? MatB{packed.dout + packed_row * dp_v, dp_v}
                             : rows_of(p, p.grad.dout, d_v, b, hq, q0 + m0, rows, t.dout_tile);
  const int64_t at = stats_row0(p, b, hq, seq) + m0;
  for (int r = 0; r < rows; ++r) {
    t.lse[r] = lse_offset(p, mask, at + r, m0 + r);
    t.row_dot[r] = dots[at + r];
  }
  // S = Q·Kᵀ (rows × keys); keys outside a row's range (or past the
  // sequence's end) hidden.
  gemm<Init::zero>(rows, kBlockN, d, {q.p, q.ld, 1}, {t.k_t, kBlockN}, {t.s, kBlockN});
  const bool cut = n0 + kBlockN > mask.key_end(m0) ||
                   (Variant::kLowerEnds && n0 < mask.key_begin(m0 + rows - 1));
  // A bias waits in dS's tile (rows × kBlockN, 0 past the sequence's keys)
  // until dP overwrites it; the next block of rows' bias is requested now.
  if constexpr (Variant::Score::kBias) {
    const BiasRows<float> bias = scaled_bias(p, b, hq);
    const int cols = std::min(kBlockN, seq.seqlen_k - n0);
    bias_tile<false>(bias, m0, rows, n0, cols, kBlockN, t.ds, kBlockN);
    prefetch_bias(bias, m0 + rows, std::min(kBlockM, seq.seqlen_q - m0 - rows), n0, cols);
  }
  const Vec minus_inf = splat(-INFINITY);
  const IVec lane = lane_index();
  probabilities(t.s, rows, kBlockN, t.lse, true, p.softmax.scale, [&](Vec x, int r, int y) {
    const IVec key = lane + (n0 + y);
    if constexpr (!Variant::Score::kIdentity) {
      Vec dx;
      x = variants(x, splat_int(m0 + r), key, dx);
      store(t.derivative + r * kBlockN + y, dx);
    }
    if constexpr (Variant::Score::kBias) x += load(t.ds + r * kBlockN + y);
    if (!cut) return x;
    IVec seen = key < splat_int(mask.key_end(m0 + r));
    if constexpr (Variant::kLowerEnds) seen &= key >= splat_int(mask.key_begin(m0 + r));
    return seen ? x : minus_inf;
  });
  // dV += Pᵀ·dO; dP = dO·Vᵀ; dS = P ⊙ (dP − D); dK += dSᵀ·Q. With dropout,
  // dS = P ⊙ (dP ⊙ Z − D) and then dV += (P ⊙ Z)ᵀ·dO, P ⊙ Z in P's place.
  const bool dropped = Variant::kDropout && p.dropout.on();
  if (dropped) {
    const DropoutRows dropout = dropout_rows(p.dropout, b, p.sizes.heads_q, hq);
    const float keep_scale = p.dropout.keep_scale;
    dropout.for_each(m0, rows, n0, kBlockN, [&](int r, int j, bool kept) {
      t.keep[r * kBlockN + j] = kept ? keep_scale : 0.0f;
    });
  } else {
    gemm<Init::add>(kBlockN, dp_v, rows, {t.s, 1, kBlockN}, dout, {t.dv, dp_v});
  }
  gemm<Init::zero>(rows, kBlockN, d_v, {dout.p, dout.ld, 1}, {t.v_t, kBlockN}, {t.ds, kBlockN});
  score_gradients<Variant>(t.s, t.ds, rows, kBlockN, t.row_dot, true, t.derivative,
                           dropped ? t.keep : nullptr);
  if (dropped) {
    for (int64_t at = 0; at < int64_t(rows) * kBlockN; at += kLanes)
      store(t.s + at, load(t.s + at) * load(t.keep + at));
    gemm<Init::add>(kBlockN, dp_v, rows, {t.s, 1, kBlockN}, dout, {t.dv, dp_v});
  }
  gemm<Init::add>(kBlockN, dp, rows, {t.ds, 1, kBlockN}, q, {t.dk, dp});
}

// dk = scale·Σ dSᵀ·Q and dv of keys [n0, n0 + cols), written out.
inline void finish_key_tile(const BwdParams& p, int b, const Sequence& seq, int hk, int n0,
                            int cols, const KeyTile& t) {
  const int d = p.sizes.head_dim, d_v = p.sizes.head_dim_v, k0 = int(seq.k_row0);
  store_tile(p.dtype, p.grad.dk, d, b, hk, k0 + n0, cols, t.dk, padded(d), nullptr,
             p.softmax.scale);
  store_tile(p.dtype, p.grad.dv, d_v, b, hk, k0 + n0, cols, t.dv, padded(d_v));
}

// dk and dv of keys [n0, n0 + cols) of kv head hk of sequence b.
template <typename Variant>
void key_item(const BwdParams& p, const float* dots, int b, const Sequence& seq, int hk, int n0,
              int cols) {
  const Sizes& sz = p.sizes;
  const RowMask mask = row_mask(p, seq);
  thread_local AlignedBuffer buffer;
  const KeyTile t = key_tile_in(buffer, sz);
  start_key_tile(p, b, seq, hk, n0, cols, t);
  const RowRange seeing = mask.rows_seeing(n0, cols);
  for (int g = 0; g < sz.group(); ++g) {
    const int hq = hk * sz.group() + g;
    const ScoreVariants variants = score_variants(p, hq, mask);
    for (int m0 = seeing.begin; m0 < seeing.end; m0 += kBlockM)
      add_row_block<Variant>(p, dots, b, seq, mask, hq, variants, n0, m0,
                             std::min(kBlockM, seeing.end - m0), t);
  }
  finish_key_tile(p, b, seq, hk, n0, cols, t);
}

// dq of rows [m0, m0 + rows) of query head hq of sequence b.
template <typename Variant>
void query_item(const BwdParams& p, const float* dots, int b, const Sequence& seq, int hq, int m0,
                int rows) {
  const Sizes& sz = p.sizes;
  const int d = sz.head_dim, dp = padded(d), lanes = padded(rows), hk = hq / sz.group();
  const int d_v = sz.head_dim_v, dp_v = padded(d_v);
  const RowMask mask = row_mask(p, seq);
  const int q0 = int(seq.q_row0), k0 = int(seq.k_row0);
  thread_local AlignedBuffer buffer;
  const size_t tile = size_t(kBlockM) * dp, key_tile = size_t(kBlockN) * dp;
  const size_t tile_v = size_t(kBlockM) * dp_v, key_tile_v = size_t(kBlockN) * dp_v;
  const size_t square = size_t(kBlockM) * kBlockN;
  float* q_t = buffer.reserve(2 * tile + tile_v + key_tile + key_tile_v + 4 * square + 4 * kBlockM);
  float* dout_t = q_t + tile;
  float* dq = dout_t + tile_v;
  float* k_tile = dq + tile;
  float* v_tile = k_tile + key_tile;
  float* s = v_tile + key_tile_v;
  float* ds = s + square;
  float* derivative = ds + square;
  float* keep = derivative + square;
  float* lse = keep + square;
  float* row_dot = lse + kBlockM;
  int32_t* key_end = reinterpret_cast<int32_t*>(row_dot + kBlockM);
  int32_t* key_begin = key_end + kBlockM;
  load_transposed(p.dtype, p.q, d, b, hq, q0 + m0, rows, q_t, lanes);
  load_transposed(p.dtype, p.grad.dout, d_v, b, hq, q0 + m0, rows, dout_t, lanes);
  const int64_t at = stats_row0(p, b, hq, seq) + m0;
  for (int r = 0; r < lanes; ++r) {
    const bool real = r < rows;
    lse[r] = real ? lse_offset(p, mask, at + r, m0 + r) : INFINITY;
    row_dot[r] = real ? dots[at + r] : 0.0f;
    key_end[r] = real ? mask.key_end(m0 + r) : 0;
    key_begin[r] = real ? mask.key_begin(m0 + r) : 0;
  }
  const ScoreVariants variants = score_variants(p, hq, mask);
  const DropoutRows dropout = dropout_rows(p.dropout, b, sz.heads_q, hq);
  std::fill(dq, dq + int64_t(rows) * dp, 0.0f);
  const KeyBlocks blocks = mask.key_blocks(m0, rows, kBlockN);
  const int hi = mask.key_end(m0 + rows - 1);
  const Vec minus_inf = splat(-INFINITY);
  for (int n0 = blocks.first<Variant::kLowerEnds>() * kBlockN; n0 < hi; n0 += kBlockN) {
    const int cols = std::min(kBlockN, hi - n0);
    const MatB k = rows_of(p, p.k, d, b, hk, k0 + n0, cols, k_tile);
    const MatB v = rows_of(p, p.v, d_v, b, hk, k0 + n0, cols, v_tile);
    // Sᵀ = K·Qᵀ (keys × rows); keys outside a row's range hidden.
    gemm<Init::zero>(cols, lanes, d, {k.p, k.ld, 1}, {q_t, lanes}, {s, lanes});
    const bool cut = blocks.needs_mask<Variant::kLowerEnds>(n0 / kBlockN);
    // A bias waits in dSᵀ's tile (cols × lanes) until dPᵀ overwrites it; the
    // next key tile's bias is requested now.
    if constexpr (Variant::Score::kBias) {
      const BiasRows<float> bias = scaled_bias(p, b, hq);
      bias_tile_transposed<false>(bias, m0, lanes, n0, cols, ds, lanes);
      prefetch_bias(bias, m0, rows, n0 + kBlockN, std::min(kBlockN, hi - n0 - kBlockN));
    }
    probabilities(s, cols, lanes, lse, false, p.softmax.scale, [&](Vec x, int j, int y) {
      const IVec key = splat_int(n0 + j);
      if constexpr (!Variant::Score::kIdentity) {
        Vec dx;
        x = variants(x, lane_index() + (m0 + y), key, dx);
        store(derivative + j * lanes + y, dx);
      }
      if constexpr (Variant::Score::kBias) x += load(ds + j * lanes + y);
      if (!cut) return x;
      IVec end;
      __builtin_memcpy(&end, key_end + y, sizeof end);
      IVec seen = key < end;
      if constexpr (Variant::kLowerEnds) {
        IVec begin;
        __builtin_memcpy(&begin, key_begin + y, sizeof begin);
        seen &= key >= begin;
      }
      return seen ? x : minus_inf;
    });
    // dPᵀ = V·dOᵀ; dSᵀ = Pᵀ ⊙ (dPᵀ ⊙ Zᵀ − D); dQ += dS·K.
    gemm<Init::zero>(cols, lanes, d_v, {v.p, v.ld, 1}, {dout_t, lanes}, {ds, lanes});
    const bool dropped = Variant::kDropout && p.dropout.on();
    if (dropped)
      dropout.for_each(m0, lanes, n0, cols, [&](int r, int j, bool kept) {
        keep[j * lanes + r] = kept ? p.dropout.keep_scale : 0.0f;
      });
    score_gradients<Variant>(s, ds, cols, lanes, row_dot, false, derivative,
                             dropped ? keep : nullptr);
    gemm<Init::add>(rows, dp, cols, {ds, 1, lanes}, k, {dq, dp});
  }
  for (int r = 0; r < rows; ++r)
    if (without_probabilities(p, mask, at + r, m0 + r))
      std::fill(dq + int64_t(r) * dp, dq + int64_t(r + 1) * dp, 0.0f);
  store_tile(p.dtype, p.grad.dq, d, b, hq, q0 + m0, rows, dq, dp, nullptr, p.softmax.scale);
}

// The two passes: dk and dv over (batch, kv head, key tile) items, then dq
// over (batch, q head, query tile) items.
template <typename Variant>
void two_passes(const BwdParams& p, const float* dots) {
  const Sizes& sz = p.sizes;
  // Tiles past a shorter sequence's end (a packed batch) have nothing to do.
  const int n_blocks = (sz.seqlen_k + kBlockN - 1) / kBlockN;
  const int m_blocks = (sz.seqlen_q + kBlockM - 1) / kBlockM;
  parallel_for(int64_t(sz.batch) * sz.heads_kv * n_blocks, [&](int64_t item, int) {
    const int n_block = int(item % n_blocks), hk = int(item / n_blocks % sz.heads_kv);
    const int b = int(item / n_blocks / sz.heads_kv), n0 = n_block * kBlockN;
    const Sequence seq = sequence(p, b);
    if (n0 < seq.seqlen_k)
      key_item<Variant>(p, dots, b, seq, hk, n0, std::min(kBlockN, seq.seqlen_k - n0));
  });
  parallel_for(int64_t(sz.batch) * sz.heads_q * m_blocks, [&](int64_t item, int) {
    const int m_block = int(item % m_blocks), hq = int(item / m_blocks % sz.heads_q);
    const int b = int(item / m_blocks / sz.heads_q), m0 = m_block * kBlockM;
    const Sequence seq = sequence(p, b);
    if (m0 < seq.seqlen_q)
      query_item<Variant>(p, dots, b, seq, hq, m0, std::min(kBlockM, seq.seqlen_q - m0));
  });
}

}  // namespace backward
