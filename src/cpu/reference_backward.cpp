// Reference gradients in float64. For each query row i, the scores of the keys
// the row sees (core/mask.h) are computed and kept, then, with p_j the row's
// softmax (as the reference forward computes it, plain IEEE arithmetic):
//   o_i = Σ_j p_j·v_j,  dp_j = dO_i·v_j,  D_i = Σ_j p_j·dp_j (= dO_i·o_i),
//   ds_j = p_j·(dp_j − D_i)·r'_j,
//   dq_i = scale·Σ_j ds_j·k_j,  dk_j += scale·ds_j·q_i,  dv_j += p_j·dO_i,
// with r'_j the derivative of the score variant's raw score by the raw score
// (core/variant.h; 1 without softcap). Dropout (core/dropout.h) multiplies the
// row's dp_j by z_j (in D_i and ds_j) and p_j by z_j in dv.
// The reference computes its own softmax and output and ignores the forward's
// out and lse: it is the exact gradient of the forward it defines. Keys a row
// does not see take no part; a row that sees no key adds nothing and gets dq 0.
// Work is split over (batch, kv head) slices, and where they are few (one
// sequence, one kv head) over chunks of a slice's rows too (core/parallel.h,
// sum_over_row_chunks): each chunk sums its rows' parts of dk and dv, and the chunks'
// sums are added in chunk order, so the bits do not depend on the threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dropout.h"
#include "core/half.h"
#include "core/mask.h"
#include "core/parallel.h"
#include "core/variant.h"
#include "cpu/backends.h"

namespace flashattn::cpu {
namespace {

// Row r (along the tensor's seqlen) of batch index b, head h of t, `cols` wide
// (head_dim for q, k and their gradients; head_dim_v for v, dout and dv), in float64.
void load_row(const AttnParams& p, const TensorRef& t, int b, int h, int64_t r, int cols,
              double* dst) {
  const int64_t base = row_offset(t, b, r) + h * t.head_stride;
  for (int c = 0; c < cols; ++c) dst[c] = load_float(t.data, p.dtype, base + c);
}

void store_row(const AttnParams& p, const TensorRef& t, int b, int h, int64_t r, int cols,
               const double* src) {
  const int64_t base = row_offset(t, b, r) + h * t.head_stride;
  for (int c = 0; c < cols; ++c) store_float(t.data, p.dtype, base + c, float(src[c]));
}

// The sums over a slice's rows that one chunk of them keeps: dk (unscaled) and dv.
struct KeySums {
  std::vector<double> dk, dv;
};

// Rows [row_begin, row_end) of the (sequence, kv head) slice, its group's query
// heads one after another: their dq, and their parts of dk and dv into `sums`.
void backward_rows(const BwdParams& p, int b, int hk, int64_t row_begin, int64_t row_end,
                   KeySums& sums) {
  const Sizes& s = p.sizes;
  const int d = s.head_dim, dv_cols = s.head_dim_v;
  const double scale = p.softmax.scale;
  const Sequence seq = sequence(p, b);
  const int64_t q0 = seq.q_row0, k0 = seq.k_row0;
  std::vector<double> k(size_t(seq.seqlen_k) * d), v(size_t(seq.seqlen_k) * dv_cols);
  for (int j = 0; j < seq.seqlen_k; ++j) {
    load_row(p, p.k, b, hk, k0 + j, d, &k[size_t(j) * d]);
    load_row(p, p.v, b, hk, k0 + j, dv_cols, &v[size_t(j) * dv_cols]);
  }
  std::vector<double>& dk = sums.dk;
  std::vector<double>& dv = sums.dv;
  dk.assign(k.size(), 0.0);
  dv.assign(v.size(), 0.0);
  if (row_begin >= row_end) return;  // no rows (seqlen_q 0): dk and dv are 0
  std::vector<double> q(d), dout(dv_cols), dq(d), scores(seq.seqlen_k), dp(seq.seqlen_k);
  std::vector<double> dscore(seq.seqlen_k);
  const RowMask mask = row_mask(p, seq);

  const double keep_scale = p.dropout.keep_scale_in<double>();
  std::vector<double> kept(seq.seqlen_k, 1.0);  // z_j
  // Row r is row r % seqlen_q of the group's query head r / seqlen_q; a
  // shorter sequence of a packed batch has none past its own seqlen_q.
  for (int64_t head_row0 = row_begin - row_begin % s.seqlen_q; head_row0 < row_end;
       head_row0 += s.seqlen_q) {
    const int hq = hk * s.group() + int(head_row0 / s.seqlen_q);
    const SoftcapAlibiBias<double> variant =
        softcap_alibi_bias<double>(p.scores, scale, b, hq, mask.alignment);
    const DropoutRows dropout = dropout_rows(p.dropout, b, s.heads_q, hq);
    const int i_end = int(std::min<int64_t>(seq.seqlen_q, row_end - head_row0));
    for (int i = int(std::max<int64_t>(0, row_begin - head_row0)); i < i_end; ++i) {
      std::fill(dq.begin(), dq.end(), 0.0);
      const int key_begin = mask.key_begin(i), key_end = mask.key_end(i);
      if (key_begin < key_end) {
        load_row(p, p.q, b, hq, q0 + i, d, q.data());
        load_row(p, p.grad.dout, b, hq, q0 + i, dv_cols, dout.data());
        double m = -std::numeric_limits<double>::infinity();
        for (int j = key_begin; j < key_end; ++j) {
          double dot = 0.0;
          for (int c = 0; c < d; ++c) dot += q[c] * k[size_t(j) * d + c];
          scores[j] = variant(dot, i, j, dscore[j]) * scale;
          m = std::isnan(scores[j]) || std::isnan(m) ? NAN : std::max(m, scores[j]);
        }
        // A row a bias or boolean mask leaves only −inf scores is empty: its
        // gradients are 0, as those of a row the mask leaves without keys.
        if (p.scores.bias.data != nullptr && m == -std::numeric_limits<double>::infinity()) {
          store_row(p, p.grad.dq, b, hq, q0 + i, d, dq.data());
          continue;
        }
        double l = 0.0;
        for (int j = key_begin; j < key_end; ++j) l += std::exp(scores[j] - m);
        double row_dot = 0.0;  // D_i = Σ_j p_j·dp_j
        for (int j = key_begin; j < key_end; ++j) {
          scores[j] = std::exp(scores[j] - m) / l;  // now p_j
          double dot = 0.0;
          for (int c = 0; c < dv_cols; ++c) dot += dout[c] * v[size_t(j) * dv_cols + c];
          if (p.dropout.on()) kept[j] = dropout.keep(i, j) ? keep_scale : 0.0;
          dp[j] = dot * kept[j];
          row_dot += scores[j] * dp[j];
        }
        for (int j = key_begin; j < key_end; ++j) {
          const double p_j = scores[j], ds_j = p_j * (dp[j] - row_dot) * dscore[j];
          for (int c = 0; c < d; ++c) {
            dq[c] += ds_j * k[size_t(j) * d + c];
            dk[size_t(j) * d + c] += ds_j * q[c];
          }
          for (int c = 0; c < dv_cols; ++c) dv[size_t(j) * dv_cols + c] += p_j * kept[j] * dout[c];
        }
        for (int c = 0; c < d; ++c) dq[c] *= scale;
      }
      store_row(p, p.grad.dq, b, hq, q0 + i, d, dq.data());
    }
  }
}

}  // namespace

void reference_backward(const BwdParams& p) {
  const Sizes& s = p.sizes;
  const auto part = [&](int64_t slice, int64_t row_begin, int64_t row_end, KeySums& sums) {
    backward_rows(p, int(slice / s.heads_kv), int(slice % s.heads_kv), row_begin, row_end, sums);
  };
  // Key j of the slice: its dk (scaled) and dv, the chunks' sums added in chunk order.
  const auto finish = [&](int64_t slice, int64_t j, const KeySums* parts, int64_t count) {
    const int b = int(slice / s.heads_kv), hk = int(slice % s.heads_kv);
    const Sequence seq = sequence(p, b);
    if (j >= seq.seqlen_k) return;  // past a shorter sequence of a packed batch
    std::vector<double> dk(s.head_dim), dv(s.head_dim_v);
    for (int c = 0; c < s.head_dim; ++c)
      dk[c] = chunk_total(parts, count, &KeySums::dk, size_t(j) * s.head_dim + c) * p.softmax.scale;
    for (int c = 0; c < s.head_dim_v; ++c)
      dv[c] = chunk_total(parts, count, &KeySums::dv, size_t(j) * s.head_dim_v + c);
    store_row(p, p.grad.dk, b, hk, seq.k_row0 + j, s.head_dim, dk.data());
    store_row(p, p.grad.dv, b, hk, seq.k_row0 + j, s.head_dim_v, dv.data());
  };
  sum_over_row_chunks<KeySums>(
      int64_t(s.batch) * s.heads_kv, int64_t(s.group()) * s.seqlen_q, s.seqlen_k,
      int64_t(s.seqlen_k) * (s.head_dim + s.head_dim_v) * int64_t(sizeof(double)), part, finish);
}

}  // namespace flashattn::cpu
