// CPU flash attention. Each work item is one (batch, q head, query tile of kBlockM
// rows); it walks the visible key tiles of kBlockN rows and keeps, per query row i
// (fp32):
//   m_i = max of the scaled scores seen so far,
//   l_i = Σ exp(s_ij − m_i) over keys seen so far,
//   acc_i = Σ exp(s_ij − m_i)·v_j over keys seen so far,
// rescaling l_i and acc_i by exp(m_old − m_new) whenever m_i grows. Output is
// acc_i / l_i; extra memory is a few tiles per thread, never seqlen_q × seqlen_k.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/half.h"
#include "cpu/backends.h"
#include "cpu/parallel.h"

namespace flashattn::cpu {
namespace {

// 128 query rows share each K and V tile load (loading is as costly as a
// 32-row tile's arithmetic).
constexpr int kBlockM = 32;
constexpr int kBlockN = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Per-thread tiles, allocated once per call. K is kept transposed (head_dim ×
// kBlockN) so that a row of scores is a sum of contiguous axpys, which vectorise.
struct Workspace {
  std::vector<float> q, k_t, v, s, acc, m, l;
  Workspace(int d)
      : q(size_t(kBlockM) * d), k_t(size_t(d) * kBlockN), v(size_t(kBlockN) * d),
        s(size_t(kBlockM) * kBlockN), acc(size_t(kBlockM) * d), m(kBlockM), l(kBlockM) {}
};

// Copies rows [row0, row0 + rows) of one head of t into dst as fp32, head_dim apart.
void load_tile(const AttnParams& p, const TensorRef& t, int b, int h, int row0, int rows,
               float* dst) {
  const int d = p.sizes.head_dim;
  for (int r = 0; r < rows; ++r) {
    const int64_t base = b * t.batch_stride + int64_t(row0 + r) * t.row_stride + h * t.head_stride;
    if (p.dtype == DType::f32) {
      std::copy_n(static_cast<const float*>(t.data) + base, d, dst + size_t(r) * d);
    } else {
      for (int c = 0; c < d; ++c) dst[size_t(r) * d + c] = load_float(t.data, p.dtype, base + c);
    }
  }
}

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

// exp(x) for x <= 0 (x = −inf gives 0), in plain arithmetic so a loop of it
// vectorises: x·log2(e) = n + f with n an integer and |f| <= 1/2, then
// exp(x) = 2^n · e^(f·ln 2), the second factor by its Taylor series to degree 7
// (remainder below 6e-9 relative, under fp32 rounding).
inline float exp_nonpositive(float x) {
  const float t = std::max(x * 1.44269504088896341f, -126.0f);
  // Round to nearest by adding and subtracting 1.5·2^23 (exact for |t| < 2^22),
  // which vectorises where nearbyint would be a library call.
  constexpr float kRound = 12582912.0f;
  const float n = (t + kRound) - kRound;
  const float y = (t - n) * 0.69314718055994531f;
  float e = 1.0f / 5040;
  for (float k : {720.0f, 120.0f, 24.0f, 6.0f, 2.0f, 1.0f, 1.0f}) e = e * y + 1.0f / k;
  const float two_n = bits_float(uint32_t(int32_t(n) + 127) << 23);
  return t > -126.0f ? e * two_n : 0.0f;
}

// Folds key tile [n0, n0 + cols) into the running (m, l, acc) of query rows
// [m0, m0 + rows).
void update_tile(const AttnParams& p, Workspace& w, int m0, int rows, int n0, int cols) {
  const int d = p.sizes.head_dim;
  const float scale = p.softmax.scale;
  for (int r = 0; r < rows; ++r) {
    float* s = &w.s[size_t(r) * kBlockN];
    const int key_end = p.mask.key_end(m0 + r, p.sizes.seqlen_k);
    std::fill(s, s + kBlockN, 0.0f);
    for (int e = 0; e < d; ++e) {
      const float q = w.q[size_t(r) * d + e] * scale;
      const float* k_t = &w.k_t[size_t(e) * kBlockN];
#pragma omp simd
      for (int c = 0; c < kBlockN; ++c) s[c] += q * k_t[c];
    }
    float tile_max = kNegInf;
    for (int c = 0; c < cols; ++c) {
      if (n0 + c >= key_end) s[c] = kNegInf;
      tile_max = std::max(tile_max, s[c]);
    }
    const float m_new = std::max(w.m[r], tile_max);
    if (m_new == kNegInf) continue;  // nothing visible yet: keep m = −inf, l = 0, acc = 0
    const float alpha = std::exp(w.m[r] - m_new);  // exp(−inf) = 0 on the first visible tile
    float* acc = &w.acc[size_t(r) * d];
    for (int c = 0; c < d; ++c) acc[c] *= alpha;
    float row_sum = 0.0f;
#pragma omp simd reduction(+ : row_sum)
    for (int c = 0; c < cols; ++c) {
      s[c] = exp_nonpositive(s[c] - m_new);
      row_sum += s[c];
    }
    for (int c = 0; c < cols; ++c) {
      const float pc = s[c];
      const float* v = &w.v[size_t(c) * d];
#pragma omp simd
      for (int e = 0; e < d; ++e) acc[e] += pc * v[e];
    }
    w.l[r] = w.l[r] * alpha + row_sum;
    w.m[r] = m_new;
  }
}

void write_tile(const AttnParams& p, const Workspace& w, int b, int hq, int m0, int rows) {
  const Sizes& s = p.sizes;
  for (int r = 0; r < rows; ++r) {
    const float inv_l = w.l[r] > 0.0f ? 1.0f / w.l[r] : 0.0f;
    const int64_t base =
        b * p.o.batch_stride + int64_t(m0 + r) * p.o.row_stride + hq * p.o.head_stride;
    for (int c = 0; c < s.head_dim; ++c)
      store_float(p.o.data, p.dtype, base + c, w.acc[size_t(r) * s.head_dim + c] * inv_l);
    if (p.softmax.lse)
      p.softmax.lse[(int64_t(b) * s.heads_q + hq) * s.seqlen_q + m0 + r] =
          w.l[r] > 0.0f ? w.m[r] + std::log(w.l[r]) : kNegInf;
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
    load_tile(p, p.q, b, hq, m0, rows, w.q.data());
    std::fill(w.acc.begin(), w.acc.end(), 0.0f);
    std::fill(w.m.begin(), w.m.end(), kNegInf);
    std::fill(w.l.begin(), w.l.end(), 0.0f);
    // Keys past the last row's diagonal are invisible to the whole tile.
    const int n_end = p.mask.key_end(m0 + rows - 1, s.seqlen_k);
    for (int n0 = 0; n0 < n_end; n0 += kBlockN) {
      const int cols = std::min(kBlockN, n_end - n0);
      load_tile_transposed(p, p.k, b, hk, n0, cols, w.k_t.data());
      load_tile(p, p.v, b, hk, n0, cols, w.v.data());
      update_tile(p, w, m0, rows, n0, cols);
    }
    write_tile(p, w, b, hq, m0, rows);
  });
}

}  // namespace flashattn::cpu
