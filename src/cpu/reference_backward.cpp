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
// Work is split over (batch, kv head) slices, each summing its group's query
// heads into dk and dv in a fixed order.
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

// One (sequence, kv head) slice: dq of its group's rows, and its dk and dv.
void backward_slice(const BwdParams& p, int b, int hk) {
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
  std::vector<double> dk(k.size(), 0.0), dv(v.size(), 0.0);
  std::vector<double> q(d), dout(dv_cols), dq(d), scores(seq.seqlen_k), dp(seq.seqlen_k);
  std::vector<double> dscore(seq.seqlen_k);
  const RowMask mask = row_mask(p, seq);

  for (int g = 0; g < s.group(); ++g) {
    const int hq = hk * s.group() + g;
    const SoftcapAlibiBias<double> variant =
        softcap_alibi_bias<double>(p.scores, scale, b, hq, mask.alignment);
    const DropoutRows dropout = dropout_rows(p.dropout, b, s.heads_q, hq);
    const double keep_scale = p.dropout.keep_scale_in<double>();
    std::vector<double> kept(seq.seqlen_k, 1.0);  // z_j
    for (int i = 0; i < seq.seqlen_q; ++i) {
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
  for (int j = 0; j < seq.seqlen_k; ++j) {
    for (int c = 0; c < d; ++c) dk[size_t(j) * d + c] *= scale;
    store_row(p, p.grad.dk, b, hk, k0 + j, d, &dk[size_t(j) * d]);
    store_row(p, p.grad.dv, b, hk, k0 + j, dv_cols, &dv[size_t(j) * dv_cols]);
  }
}

}  // namespace

void reference_backward(const BwdParams& p) {
  const Sizes& s = p.sizes;
  parallel_for(int64_t(s.batch) * s.heads_kv, [&](int64_t slice, int) {
    backward_slice(p, int(slice / s.heads_kv), int(slice % s.heads_kv));
  });
}

}  // namespace flashattn::cpu
