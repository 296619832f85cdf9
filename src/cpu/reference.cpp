// Reference attention: for each query row i, every score s_j = scale·(q_i·k_j)
// of a key the row sees (core/mask.h), changed by the score variants
// (core/variant.h), is computed in float64 and kept (the materialised row), then
//   m = max_j s_j,  l = Σ_j exp(s_j − m),  o_i = Σ_j exp(s_j − m)·v_j / l,
//   lse_i = m + ln l,
// in plain IEEE arithmetic: a NaN score makes m NaN, an infinite m makes
// s_j − m NaN, and either makes the row NaN, as standard attention does. Keys
// the row does not see take no part (not even a NaN of theirs); a row that
// sees no key gets o_i = 0, lse_i = −inf (core/softmax.h, finish_row), as does,
// with a bias or boolean mask, a row whose every score is −inf. Dropout
// (core/dropout.h) multiplies each exp(s_j − m) of o's sum by z_j, not l's.
#include <cmath>
#include <limits>
#include <vector>

#include "core/dropout.h"
#include "core/half.h"
#include "core/mask.h"
#include "core/parallel.h"
#include "core/softmax.h"
#include "core/variant.h"
#include "cpu/backends.h"

namespace flashattn::cpu {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// One (sequence, kv head) slice of K or V in float64, rows of `cols` (k's
// head_dim or v's).
std::vector<double> load_kv(const AttnParams& p, const TensorRef& t, int b, const Sequence& seq,
                            int h, int cols) {
  std::vector<double> out(size_t(seq.seqlen_k) * cols);
  for (int j = 0; j < seq.seqlen_k; ++j) {
    const int64_t base = key_offset(p, t, b, seq, j) + h * t.head_stride;
    for (int c = 0; c < cols; ++c) out[size_t(j) * cols + c] = load_float(t.data, p.dtype, base + c);
  }
  return out;
}

// Computes one query row into o (head_dim_v doubles); returns its lse.
double attend_row(const AttnParams& p, int b, const Sequence& seq, int hq, int i,
                  const std::vector<double>& k, const std::vector<double>& v,
                  std::vector<double>& scores, double* o) {
  const Sizes& s = p.sizes;
  const int d = s.head_dim, dv = s.head_dim_v;
  std::vector<double> q(d);
  const int64_t q_base = row_offset(p.q, b, seq.q_row0 + i) + hq * p.q.head_stride;
  for (int c = 0; c < d; ++c) q[c] = load_float(p.q.data, p.dtype, q_base + c);

  const RowMask mask = row_mask(p, seq);
  const int key_begin = mask.key_begin(i), key_end = mask.key_end(i);
  const double scale = p.softmax.scale;
  const SoftcapAlibiBias<double> variant =
      softcap_alibi_bias<double>(p.scores, scale, b, hq, mask.alignment);
  const DropoutRows dropout = dropout_rows(p.dropout, b, s.heads_q, hq);
  const double keep_scale = p.dropout.keep_scale_in<double>();
  double m = kNegInf;
  for (int j = key_begin; j < key_end; ++j) {
    double dot = 0.0;
    for (int c = 0; c < d; ++c) dot += q[c] * k[size_t(j) * d + c];
    scores[j] = variant(dot, i, j) * scale;
    m = std::isnan(scores[j]) || std::isnan(m) ? NAN : std::max(m, scores[j]);
  }
  // A bias or boolean mask that leaves the row only −inf scores empties it
  // (core/softmax.h, finished_empty).
  const bool emptied = p.scores.bias.data != nullptr && m == kNegInf;
  double l = 0.0;
  for (int c = 0; c < dv; ++c) o[c] = 0.0;
  for (int j = key_begin; j < key_end && !emptied; ++j) {
    const double pj = std::exp(scores[j] - m);
    l += pj;
    const double kept = !p.dropout.on() ? pj : dropout.keep(i, j) ? pj * keep_scale : 0.0;
    for (int c = 0; c < dv; ++c) o[c] += kept * v[size_t(j) * dv + c];
  }
  const FinishedRow<double> row = finish_row(m, l, mask.empty(i) || emptied);
  for (int c = 0; c < dv; ++c) o[c] = row.out(o[c]);
  return row.lse;
}

// Runs attend_row for rows[r] of every (sequence, q head), those the sequence
// has; emit(b, seq, hq, r, o, lse).
template <typename Emit>
void for_each_row(const AttnParams& p, const std::vector<int>& rows, Emit&& emit) {
  const Sizes& s = p.sizes;
  const int64_t slices = int64_t(s.batch) * s.heads_kv;
  // Parallel over (batch, kv head) slices when there are enough of them, else over rows.
  const bool by_slice = slices >= worker_count(slices + rows.size()) || rows.size() < 4;
  auto run_slice = [&](int64_t slice, int64_t row_begin, int64_t row_end) {
    const int b = int(slice / s.heads_kv), hk = int(slice % s.heads_kv);
    const Sequence seq = sequence(p, b);
    const std::vector<double> k = load_kv(p, p.k, b, seq, hk, s.head_dim);
    const std::vector<double> v = load_kv(p, p.v, b, seq, hk, s.head_dim_v);
    std::vector<double> scores(seq.seqlen_k), o(s.head_dim_v);
    for (int g = 0; g < s.group(); ++g) {
      const int hq = hk * s.group() + g;
      for (int64_t r = row_begin; r < row_end; ++r) {
        if (rows[r] >= seq.seqlen_q) continue;
        const double lse = attend_row(p, b, seq, hq, rows[r], k, v, scores, o.data());
        emit(b, seq, hq, r, o.data(), lse);
      }
    }
  };
  if (by_slice) {
    parallel_for(slices, [&](int64_t slice, int) { run_slice(slice, 0, int64_t(rows.size())); });
  } else {
    for (int64_t slice = 0; slice < slices; ++slice) {
      constexpr int64_t kChunk = 16;
      const int64_t chunks = (int64_t(rows.size()) + kChunk - 1) / kChunk;
      parallel_for(chunks, [&](int64_t c, int) {
        run_slice(slice, c * kChunk, std::min<int64_t>(rows.size(), (c + 1) * kChunk));
      });
    }
  }
}

}  // namespace

void reference_forward(const AttnParams& p) {
  const Sizes& s = p.sizes;
  std::vector<int> rows(s.seqlen_q);
  for (int i = 0; i < s.seqlen_q; ++i) rows[i] = i;
  for_each_row(p, rows, [&](int b, const Sequence& seq, int hq, int64_t i, const double* o,
                           double lse) {
    const int64_t base = row_offset(p.o, b, seq.q_row0 + i) + hq * p.o.head_stride;
    for (int c = 0; c < s.head_dim_v; ++c) store_float(p.o.data, p.dtype, base + c, float(o[c]));
    if (p.softmax.lse) p.softmax.lse[stats_row0(p, b, hq, seq) + i] = float(lse);
  });
}

std::vector<double> reference_rows(const AttnParams& p, const std::vector<int>& rows,
                                   std::vector<double>* lse) {
  const Sizes& s = p.sizes;
  const int64_t n = int64_t(rows.size());
  std::vector<double> out(size_t(s.batch) * n * s.heads_q * s.head_dim_v);
  if (lse) lse->assign(size_t(s.batch) * s.heads_q * n, 0.0);
  for_each_row(p, rows, [&](int b, const Sequence&, int hq, int64_t r, const double* o,
                           double row_lse) {
    double* dst = out.data() + ((int64_t(b) * n + r) * s.heads_q + hq) * s.head_dim_v;
    for (int c = 0; c < s.head_dim_v; ++c) dst[c] = o[c];
    if (lse) (*lse)[(int64_t(b) * s.heads_q + hq) * n + r] = row_lse;
  });
  return out;
}

}  // namespace flashattn::cpu
