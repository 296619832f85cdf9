// CPU flash attention. Each work item is one (batch, q head, query tile of kBlockM
// rows); it walks the key tiles of kBlockN rows that some row of the tile sees
// (core/mask.h) and keeps, per query row i (fp32, on scaled scores
// s_ij = scale·(q_i·k_j), so that any sign of scale works):
//   m_i = max of the scores seen so far,
//   l_i = Σ 2^((s_ij − m_i)·log2 e) over keys seen so far,
//   acc_i = Σ 2^((s_ij − m_i)·log2 e)·v_j over keys seen so far,
// rescaling l_i and acc_i whenever m_i grows (core/softmax.h, OnlineRow). The
// exponent is one fused multiply-add of s_ij, so a rounding error in m_i·log2 e
// is common to the whole row and cancels in acc_i / l_i. Output is acc_i / l_i;
// extra memory is a few tiles per thread, never seqlen_q × seqlen_k.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/half.h"
#include "core/mask.h"
#include "core/parallel.h"
#include "core/softmax.h"
#include "core/variant.h"
#include "cpu/backends.h"
#include "cpu/tile_io.h"

namespace flashattn::cpu {
namespace {

// 128 query rows share each K and V tile load (loading is as costly as a
// 32-row tile's arithmetic).
constexpr int kBlockM = 32;
constexpr int kBlockN = 64;

// Per-thread tiles, allocated once per call. K is kept transposed (head_dim ×
// kBlockN) so that a row of scores is a sum of contiguous axpys, which vectorise.
struct Workspace {
  std::vector<float> q, k_t, v, s, acc;
  std::vector<OnlineRow> rows;
  Workspace(int d)
      : q(size_t(kBlockM) * d), k_t(size_t(d) * kBlockN), v(size_t(kBlockN) * d),
        s(size_t(kBlockM) * kBlockN), acc(size_t(kBlockM) * d), rows(kBlockM) {}
};

// k_t[c][r] = K[row0 + r][c] for r < rows, 0 for rows <= r < kBlockN.
void load_tile_transposed(const AttnParams& p, const TensorRef& t, int b, int h, int row0,
                          int rows, float* k_t) {
  const int d = p.sizes.head_dim;
  std::fill(k_t, k_t + size_t(d) * kBlockN, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const int64_t base = b * t.batch_stride + int64_t(row0 + r) * t.row_stride + h * t.head_stride;
    if (p.dtype == DType::f32) {
      const float* src = static_cast<const float*>(t.data) + base;
      for (int c = 0; c < d; ++c) k_t[size_t(c) * kBlockN + r] = src[c];
    } else {
      for (int c = 0; c < d; ++c) k_t[size_t(c) * kBlockN + r] = load_float(t.data, p.dtype, base + c);
    }
  }
}

// 2^x for x <= 0 (−inf gives 0, NaN gives NaN), in plain arithmetic so a loop of
// it vectorises: x = n + f with n an integer and |f| <= 1/2, then
// 2^x = 2^n · e^(f·ln 2), the second factor by its Taylor series to degree 7
// (remainder below 6e-9 relative, under fp32 rounding). Below 2^-126 it gives 0.
inline float exp2_nonpositive(float x) {
  const float t = fmaxf(x, -127.0f);  // NaN-blind: the arithmetic below stays finite
  // Round to nearest by adding and subtracting 1.5·2^23 (exact for |t| < 2^22),
  // which vectorises where nearbyint would be a library call.
  constexpr float kRound = 12582912.0f;
  const float n = (t + kRound) - kRound;
  const float y = (t - n) * kLn2;
  float e = 1.0f / 5040;
  for (float k : {720.0f, 120.0f, 24.0f, 6.0f, 2.0f, 1.0f, 1.0f}) e = e * y + 1.0f / k;
  const float two_n = bits_float(uint32_t(int32_t(n) + 127) << 23);
  return x >= -126.0f ? e * two_n : (x < -126.0f ? 0.0f : x);
}

// Folds key tile [n0, n0 + cols) into the running state of query rows
// [m0, m0 + rows).
void update_tile(const AttnParams& p, const RowMask& mask, Workspace& w, int m0, int rows, int n0,
                 int cols) {
  const int d = p.sizes.head_dim;
  const float scale = p.softmax.scale;
  for (int r = 0; r < rows; ++r) {
    float* s = &w.s[size_t(r) * kBlockN];
    const int key_begin = mask.key_begin(m0 + r), key_end = mask.key_end(m0 + r);
    std::fill(s, s + kBlockN, 0.0f);
    for (int e = 0; e < d; ++e) {
      const float q = w.q[size_t(r) * d + e];
      const float* k_t = &w.k_t[size_t(e) * kBlockN];
#pragma omp simd
      for (int j = 0; j < kBlockN; ++j) s[j] += q * k_t[j];
    }
    float tile_max = -INFINITY;
    for (int j = 0; j < cols; ++j) {
      s[j] = IdentityScore{}(s[j], m0 + r, n0 + j) * scale;
      if (n0 + j < key_begin || n0 + j >= key_end) s[j] = -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    OnlineRow& row = w.rows[r];
    const float alpha = row.raise_max(tile_max, kLog2e);
    const float neg_max_c = row.neg_max_c(kLog2e);
    float* acc = &w.acc[size_t(r) * d];
    for (int e = 0; e < d; ++e) acc[e] *= alpha;
    float row_sum = 0.0f;
#pragma omp simd reduction(+ : row_sum)
    for (int j = 0; j < cols; ++j) {
      s[j] = exp2_nonpositive(fmaf(s[j], kLog2e, neg_max_c));
      row_sum += s[j];
    }
    // Keys the row does not see take no part, not even as 0·v (a NaN in v stays
    // out of rows that do not see it).
    const int j_begin = std::clamp(key_begin - n0, 0, cols);
    const int j_end = std::clamp(key_end - n0, j_begin, cols);
    for (int j = j_begin; j < j_end; ++j) {
      const float pj = s[j];
      const float* v = &w.v[size_t(j) * d];
#pragma omp simd
      for (int e = 0; e < d; ++e) acc[e] += pj * v[e];
    }
    row.l += row_sum;
  }
}

void write_tile(const AttnParams& p, const RowMask& mask, const Workspace& w, int b, int hq,
                int m0, int rows) {
  const Sizes& s = p.sizes;
  for (int r = 0; r < rows; ++r) {
    const OnlineRow& state = w.rows[r];
    const FinishedRow<float> row = finish_row(state.m, state.l, mask.empty(m0 + r));
    const int64_t base =
        b * p.o.batch_stride + int64_t(m0 + r) * p.o.row_stride + hq * p.o.head_stride;
    for (int c = 0; c < s.head_dim; ++c)
      store_float(p.o.data, p.dtype, base + c, row.out(w.acc[size_t(r) * s.head_dim + c]));
    if (p.softmax.lse) p.softmax.lse[(int64_t(b) * s.heads_q + hq) * s.seqlen_q + m0 + r] = row.lse;
  }
}

}  // namespace

void flash_forward(const AttnParams& p) {
  const Sizes& s = p.sizes;
  const int m_blocks = (s.seqlen_q + kBlockM - 1) / kBlockM;
  const int64_t items = int64_t(s.batch) * s.heads_q * m_blocks;
  std::vector<Workspace> workspaces;
  for (int t = 0; t < worker_count(items); ++t) workspaces.emplace_back(s.head_dim);

  parallel_for(items, [&](int64_t item, int worker) {
    Workspace& w = workspaces[worker];
    const int m_block = int(item % m_blocks);
    const int hq = int(item / m_blocks % s.heads_q);
    const int b = int(item / m_blocks / s.heads_q);
    const int hk = hq / s.group();
    const int m0 = m_block * kBlockM, rows = std::min(kBlockM, s.seqlen_q - m0);
    const RowMask& mask = row_mask(p, b);
    load_rows(p, p.q, b, hq, m0, rows, w.q.data());
    std::fill(w.acc.begin(), w.acc.end(), 0.0f);
    std::fill(w.rows.begin(), w.rows.end(), OnlineRow{});
    // Keys past the last row's range, or before the first row's, are seen by no
    // row of the tile.
    const int key_hi = mask.key_end(m0 + rows - 1);
    for (int n0 = mask.key_blocks(m0, rows, kBlockN).first() * kBlockN; n0 < key_hi; n0 += kBlockN) {
      const int cols = std::min(kBlockN, key_hi - n0);
      load_tile_transposed(p, p.k, b, hk, n0, cols, w.k_t.data());
      load_rows(p, p.v, b, hk, n0, cols, w.v.data());
      update_tile(p, mask, w, m0, rows, n0, cols);
    }
    write_tile(p, mask, w, b, hq, m0, rows);
  });
}

}  // namespace flashattn::cpu
