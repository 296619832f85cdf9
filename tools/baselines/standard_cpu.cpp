// Three passes over one (batch, q head) at a time, as an unfused implementation
// runs them:
//   S = scale·Q·Kᵀ       seqlen_q × seqlen_k in fp32 (visible keys only: masked
//                        scores would be −inf and contribute nothing)
//   P = softmax_rows(S)  in place
//   O = P·V
// Each pass walks the whole matrix, so the timing includes the memory traffic
// that materialising it costs. The matrix is reused across heads: peak extra
// memory is one score matrix plus fp32 copies of the head's Q, K and V.
#include "standard_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/half.h"
#include "core/mask.h"
#include "core/parallel.h"

namespace flashattn::baselines {
namespace {

constexpr int kRowsPerItem = 16;  // query rows per parallel work item
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows [0, rows) of head h of t as contiguous fp32 rows of head_dim.
std::vector<float> load_head(const AttnParams& p, const TensorRef& t, int b, int h, int rows) {
  const int d = p.sizes.head_dim;
  std::vector<float> out(size_t(rows) * d);
  for (int j = 0; j < rows; ++j) {
    const int64_t base = b * t.batch_stride + int64_t(j) * t.row_stride + h * t.head_stride;
    for (int c = 0; c < d; ++c) out[size_t(j) * d + c] = load_float(t.data, p.dtype, base + c);
  }
  return out;
}

// s[j] = scale·q·k_j for the visible keys j < key_end.
void score_row(const float* q, const float* k, int d, int key_end, float scale, float* s) {
  for (int j = 0; j < key_end; ++j) {
    const float* kj = k + size_t(j) * d;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < d; ++c) dot += q[c] * kj[c];
    s[j] = dot * scale;
  }
}

// Softmax of s[0, key_end) in place; returns the row's lse, −inf when no key is visible.
float softmax_row(float* s, int key_end) {
  if (key_end == 0) return kNegInf;
  float m = kNegInf;
  for (int j = 0; j < key_end; ++j) m = std::max(m, s[j]);
  float sum = 0.0f;
  for (int j = 0; j < key_end; ++j) sum += (s[j] = std::exp(s[j] - m));
  const float inv_sum = 1.0f / sum;
  for (int j = 0; j < key_end; ++j) s[j] *= inv_sum;
  return m + std::log(sum);
}

// o = Σ_j prob[j]·v_j over the visible keys (all zero when none is).
void weighted_sum_row(const float* prob, const float* v, int d, int key_end, float* o) {
  std::fill(o, o + d, 0.0f);
  for (int j = 0; j < key_end; ++j) {
    const float pj = prob[j];
    const float* vj = v + size_t(j) * d;
#pragma omp simd
    for (int c = 0; c < d; ++c) o[c] += pj * vj[c];
  }
}

// Runs body(first_row, end_row) over blocks of query rows on all threads.
template <typename Body>
void for_row_blocks(int seqlen_q, Body&& body) {
  const int64_t blocks = (seqlen_q + kRowsPerItem - 1) / kRowsPerItem;
  parallel_for(blocks, [&](int64_t block, int) {
    const int first = int(block) * kRowsPerItem;
    body(first, std::min(seqlen_q, first + kRowsPerItem));
  });
}

}  // namespace

size_t standard_cpu_score_bytes(const Sizes& s) {
  return size_t(s.seqlen_q) * size_t(s.seqlen_k) * sizeof(float);
}

void standard_cpu_forward(const AttnParams& p) {
  const Sizes& s = p.sizes;
  const int d = s.head_dim;
  const size_t ld = size_t(s.seqlen_k);
  std::vector<float> scores(size_t(s.seqlen_q) * ld);
  for (int b = 0; b < s.batch; ++b)
    for (int hk = 0; hk < s.heads_kv; ++hk) {
      const RowMask& mask = p.mask;  // dense problems only
      const std::vector<float> k = load_head(p, p.k, b, hk, s.seqlen_k);
      const std::vector<float> v = load_head(p, p.v, b, hk, s.seqlen_k);
      for (int hq = hk * s.group(); hq < (hk + 1) * s.group(); ++hq) {
        const std::vector<float> q = load_head(p, p.q, b, hq, s.seqlen_q);
        for_row_blocks(s.seqlen_q, [&](int first, int end) {
          for (int i = first; i < end; ++i)
            score_row(&q[size_t(i) * d], k.data(), d, mask.key_end(i),
                      p.softmax.scale, &scores[i * ld]);
        });
        std::vector<float> lse(s.seqlen_q);
        for_row_blocks(s.seqlen_q, [&](int first, int end) {
          for (int i = first; i < end; ++i)
            lse[i] = softmax_row(&scores[i * ld], mask.key_end(i));
        });
        for_row_blocks(s.seqlen_q, [&](int first, int end) {
          std::vector<float> o(d);
          for (int i = first; i < end; ++i) {
            weighted_sum_row(&scores[i * ld], v.data(), d, mask.key_end(i),
                             o.data());
            const int64_t base =
                b * p.o.batch_stride + int64_t(i) * p.o.row_stride + hq * p.o.head_stride;
            for (int c = 0; c < d; ++c) store_float(p.o.data, p.dtype, base + c, o[c]);
          }
        });
        if (p.softmax.lse)
          std::copy(lse.begin(), lse.end(),
                    p.softmax.lse + (int64_t(b) * s.heads_q + hq) * s.seqlen_q);
      }
    }
}

}  // namespace flashattn::baselines
