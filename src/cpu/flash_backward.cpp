// CPU backward, fp32 arithmetic, from the forward's out and lse. With
// s_ij = scale·(q_i·k_j) and p_ij = e^(s_ij − lse_i) (P recomputed, never
// stored; 0 for keys row i does not see):
//   D_i = Σ_c dO_ic·O_ic                                    (one pass over rows)
//   dv_j = Σ_i p_ij·dO_i,  dk_j = scale·Σ_i ds_ij·q_i        (items: key tiles)
//   dq_i = scale·Σ_j ds_ij·k_j                               (items: query tiles)
// with ds_ij = p_ij·(dO_i·v_j − D_i). Each gradient is summed by one work item in
// a fixed order (a key tile walks its group's query heads and rows; a query
// tile walks its keys), so the result is the same on every run and no item
// writes another's rows; P and dS are recomputed by both passes. A row that
// sees no key is skipped: dq 0, nothing added to dk and dv. Extra memory: D
// (batch·heads_q·seqlen_q floats) and a few tiles per thread.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/mask.h"
#include "core/parallel.h"
#include "core/variant.h"
#include "cpu/backends.h"
#include "cpu/tile_io.h"

namespace flashattn::cpu {
namespace {

constexpr int kBlockN = 64;  // keys per dk/dv item
constexpr int kBlockM = 32;  // query rows per dq item

float dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < n; ++c) sum += a[c] * b[c];
  return sum;
}

void axpy(float a, const float* x, float* y, int n) {
#pragma omp simd
  for (int c = 0; c < n; ++c) y[c] += a * x[c];
}

// D for every (batch, q head, row), laid out as lse.
std::vector<float> row_dots(const BwdParams& p) {
  const Sizes& s = p.sizes;
  std::vector<float> dots(size_t(s.batch) * s.heads_q * s.seqlen_q);
  parallel_for(int64_t(s.batch) * s.heads_q, [&](int64_t slice, int) {
    const int b = int(slice / s.heads_q), hq = int(slice % s.heads_q);
    std::vector<float> o(s.head_dim), dout(s.head_dim);
    for (int i = 0; i < s.seqlen_q; ++i) {
      load_rows(p, p.o, b, hq, i, 1, o.data());
      load_rows(p, p.grad.dout, b, hq, i, 1, dout.data());
      dots[size_t(slice) * s.seqlen_q + i] = dot(o.data(), dout.data(), s.head_dim);
    }
  });
  return dots;
}

// A query row's constants: where its q, dO, lse and D are, and its key range.
struct Row {
  int key_begin, key_end;
  float lse, row_dot;
};

Row row_of(const BwdParams& p, const std::vector<float>& dots, int b, int hq, int i) {
  const Sizes& s = p.sizes;
  const RowMask& mask = row_mask(p, b);
  const size_t at = (size_t(b) * s.heads_q + hq) * s.seqlen_q + i;
  return {mask.key_begin(i), mask.key_end(i), p.grad.lse[at], dots[at]};
}

// p_ij and ds_ij of one visible key.
struct Probability {
  float p, ds;
};

Probability probability(const BwdParams& p, const Row& row, const float* q, const float* dout,
                        const float* k, const float* v, int i, int j) {
  const int d = p.sizes.head_dim;
  const float s = IdentityScore{}(dot(q, k, d), i, j) * p.softmax.scale;
  const float p_ij = std::exp(s - row.lse);
  return {p_ij, p_ij * (dot(dout, v, d) - row.row_dot)};
}

// dk and dv of keys [n0, n0 + keys) of kv head hk: every query row of the group
// that sees one of them.
void key_tile(const BwdParams& p, const std::vector<float>& dots, int b, int hk, int n0, int keys,
              std::vector<float>& work) {
  const Sizes& s = p.sizes;
  const int d = s.head_dim;
  float* k = work.data();
  float* v = k + size_t(kBlockN) * d;
  float* dk = v + size_t(kBlockN) * d;
  float* dv = dk + size_t(kBlockN) * d;
  float* q = dv + size_t(kBlockN) * d;
  float* dout = q + d;
  load_rows(p, p.k, b, hk, n0, keys, k);
  load_rows(p, p.v, b, hk, n0, keys, v);
  std::fill(dk, dk + size_t(keys) * d, 0.0f);
  std::fill(dv, dv + size_t(keys) * d, 0.0f);
  const RowRange rows = row_mask(p, b).rows_seeing(n0, keys);
  for (int g = 0; g < s.group(); ++g) {
    const int hq = hk * s.group() + g;
    for (int i = rows.begin; i < rows.end; ++i) {
      const Row row = row_of(p, dots, b, hq, i);
      const int j_begin = std::max(row.key_begin, n0), j_end = std::min(row.key_end, n0 + keys);
      if (j_begin >= j_end) continue;
      load_rows(p, p.q, b, hq, i, 1, q);
      load_rows(p, p.grad.dout, b, hq, i, 1, dout);
      for (int j = j_begin; j < j_end; ++j) {
        const size_t at = size_t(j - n0) * d;
        const Probability pr = probability(p, row, q, dout, k + at, v + at, i, j);
        axpy(pr.p, dout, dv + at, d);
        axpy(pr.ds, q, dk + at, d);
      }
    }
  }
  for (size_t e = 0; e < size_t(keys) * d; ++e) dk[e] *= p.softmax.scale;
  store_rows(p, p.grad.dk, b, hk, n0, keys, dk);
  store_rows(p, p.grad.dv, b, hk, n0, keys, dv);
}

// dq of rows [m0, m0 + rows) of query head hq.
void query_tile(const BwdParams& p, const std::vector<float>& dots, int b, int hq, int m0,
                int rows, std::vector<float>& work) {
  const Sizes& s = p.sizes;
  const int d = s.head_dim, hk = hq / s.group();
  float* q = work.data();
  float* dout = q + size_t(kBlockM) * d;
  float* dq = dout + size_t(kBlockM) * d;
  float* k = dq + size_t(kBlockM) * d;
  float* v = k + d;
  load_rows(p, p.q, b, hq, m0, rows, q);
  load_rows(p, p.grad.dout, b, hq, m0, rows, dout);
  std::fill(dq, dq + size_t(rows) * d, 0.0f);
  Row tile_rows[kBlockM];
  for (int r = 0; r < rows; ++r) tile_rows[r] = row_of(p, dots, b, hq, m0 + r);
  const RowMask& mask = row_mask(p, b);
  const int key_hi = mask.key_end(m0 + rows - 1);
  for (int j = mask.key_begin(m0); j < key_hi; ++j) {
    load_rows(p, p.k, b, hk, j, 1, k);
    load_rows(p, p.v, b, hk, j, 1, v);
    for (int r = 0; r < rows; ++r) {
      const Row& row = tile_rows[r];
      if (j < row.key_begin || j >= row.key_end) continue;
      const size_t at = size_t(r) * d;
      const Probability pr = probability(p, row, q + at, dout + at, k, v, m0 + r, j);
      axpy(pr.ds, k, dq + at, d);
    }
  }
  for (size_t e = 0; e < size_t(rows) * d; ++e) dq[e] *= p.softmax.scale;
  store_rows(p, p.grad.dq, b, hq, m0, rows, dq);
}

}  // namespace

void flash_backward(const BwdParams& p) {
  const Sizes& s = p.sizes;
  const int d = s.head_dim;
  const std::vector<float> dots = row_dots(p);
  const int n_blocks = (s.seqlen_k + kBlockN - 1) / kBlockN;
  const int m_blocks = (s.seqlen_q + kBlockM - 1) / kBlockM;
  const int64_t key_items = int64_t(s.batch) * s.heads_kv * n_blocks;
  const int64_t query_items = int64_t(s.batch) * s.heads_q * m_blocks;
  // One workspace per worker of the larger of the two loops.
  std::vector<std::vector<float>> work(worker_count(std::max(key_items, query_items)));

  parallel_for(key_items, [&](int64_t item, int worker) {
    const int n_block = int(item % n_blocks), hk = int(item / n_blocks % s.heads_kv);
    const int b = int(item / n_blocks / s.heads_kv), n0 = n_block * kBlockN;
    work[worker].resize(size_t(4 * kBlockN + 2) * d);
    key_tile(p, dots, b, hk, n0, std::min(kBlockN, s.seqlen_k - n0), work[worker]);
  });

  parallel_for(query_items, [&](int64_t item, int worker) {
    const int m_block = int(item % m_blocks), hq = int(item / m_blocks % s.heads_q);
    const int b = int(item / m_blocks / s.heads_q), m0 = m_block * kBlockM;
    work[worker].resize(size_t(3 * kBlockM + 2) * d);
    query_tile(p, dots, b, hq, m0, std::min(kBlockM, s.seqlen_q - m0), work[worker]);
  });
}

}  // namespace flashattn::cpu
