#include "standard.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/half.h"
#include "core/mask.h"
#include "core/parallel.h"

namespace flashattn::harness {
namespace {

float element(const AttnParams& p, const TensorRef& t, int b, int row, int h, int c) {
  return load_float(t.data, p.dtype,
                    b * t.batch_stride + int64_t(row) * t.row_stride + h * t.head_stride + c);
}

}  // namespace

std::vector<double> standard_rows_in_dtype(const AttnParams& p, const ScoreRule& rule,
                                           const std::vector<int>& rows) {
  const Sizes& s = p.sizes;
  const int64_t n = int64_t(rows.size());
  std::vector<double> out(size_t(s.batch) * n * s.heads_q * s.head_dim_v, 0.0);
  const int64_t items = int64_t(s.batch) * s.heads_q * n;
  parallel_for(items, [&](int64_t item, int) {
    const int r = int(item % n), hq = int(item / n % s.heads_q), b = int(item / n / s.heads_q);
    const int i = rows[r], hk = hq / s.group();
    const int key_begin = p.mask.key_begin(i), key_end = p.mask.key_end(i);
    std::vector<float> prob(s.seqlen_k, 0.0f);
    float m = -std::numeric_limits<float>::infinity();
    for (int j = key_begin; j < key_end; ++j) {
      float dot = 0.0f;
      for (int c = 0; c < s.head_dim; ++c)
        dot += element(p, p.q, b, i, hq, c) * element(p, p.k, b, j, hk, c);
      prob[j] = rule(round_to(p.dtype, dot) * p.softmax.scale, b, hq, i, j);
      m = std::max(m, prob[j]);
    }
    if (rule.empties(m)) return;  // output 0
    float sum = 0.0f;
    for (int j = key_begin; j < key_end; ++j) sum += (prob[j] = std::exp(prob[j] - m));
    double* o = out.data() + ((int64_t(b) * n + r) * s.heads_q + hq) * s.head_dim_v;
    for (int j = key_begin; j < key_end; ++j) {
      const float pj = round_to(p.dtype, prob[j] / sum) * float(rule.kept(b, hq, i, j));
      for (int c = 0; c < s.head_dim_v; ++c) o[c] += pj * element(p, p.v, b, j, hk, c);
    }
    for (int c = 0; c < s.head_dim_v; ++c) o[c] = round_to(p.dtype, float(o[c]));
  });
  return out;
}

std::vector<double> standard_rows_float64(const AttnParams& p, const ScoreRule& rule,
                                          const std::vector<int>& rows, std::vector<double>& lse) {
  const Sizes& s = p.sizes;
  const int64_t n = int64_t(rows.size());
  std::vector<double> out(size_t(s.batch) * n * s.heads_q * s.head_dim_v, 0.0);
  lse.assign(size_t(s.batch) * s.heads_q * n, 0.0);
  const int64_t items = int64_t(s.batch) * s.heads_q * n;
  parallel_for(items, [&](int64_t item, int) {
    const int r = int(item % n), hq = int(item / n % s.heads_q), b = int(item / n / s.heads_q);
    const int i = rows[r], hk = hq / s.group();
    const RowMask& mask = p.mask;  // dense problems only
    double* o = out.data() + ((int64_t(b) * n + r) * s.heads_q + hq) * s.head_dim_v;
    double& row_lse = lse[(int64_t(b) * s.heads_q + hq) * n + r];
    if (mask.empty(i)) {  // no key to see: 0 and −inf
      row_lse = -std::numeric_limits<double>::infinity();
      return;
    }
    // Pass 1: the scores of the keys the row sees, and their max (a NaN is kept).
    std::vector<double> score(s.seqlen_k);
    double m = -std::numeric_limits<double>::infinity();
    for (int j = mask.key_begin(i); j < mask.key_end(i); ++j) {
      double dot = 0.0;
      for (int c = 0; c < s.head_dim; ++c)
        dot += double(element(p, p.q, b, i, hq, c)) * element(p, p.k, b, j, hk, c);
      score[j] = rule(dot * p.softmax.scale, b, hq, i, j);
      m = std::isnan(m) || std::isnan(score[j]) ? std::nan("") : std::max(m, score[j]);
    }
    if (rule.empties(m)) {  // the bias masked every key it sees: 0 and −inf
      row_lse = -std::numeric_limits<double>::infinity();
      return;
    }
    // Pass 2: softmax weights and the weighted sum of values.
    double sum = 0.0;
    for (int j = mask.key_begin(i); j < mask.key_end(i); ++j) {
      const double w = std::exp(score[j] - m);
      sum += w;
      const double wz = w * rule.kept(b, hq, i, j);
      for (int c = 0; c < s.head_dim_v; ++c) o[c] += wz * element(p, p.v, b, j, hk, c);
    }
    for (int c = 0; c < s.head_dim_v; ++c) o[c] /= sum;
    row_lse = m + std::log(sum);
  });
  return out;
}

}  // namespace flashattn::harness
