#include "standard_backward.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/half.h"
#include "core/parallel.h"

namespace flashattn::harness {
namespace {

// The output element D takes: the modelled one (`modelled`, before its rounding
// to dtype) rounded, or the stored one where given and within two of dtype's
// ulps of it, so that a wrong forward cannot widen the baseline it sets.
double output_for_d(DType dtype, double modelled, const float* stored) {
  const double rounded = round_to(dtype, float(modelled));
  if (!stored) return rounded;
  const int mantissa = dtype == DType::bf16 ? 7 : dtype == DType::f16 ? 10 : 23;
  const double magnitude = std::max(std::fabs(modelled), 0x1p-100);
  const double ulp = std::ldexp(1.0, std::ilogb(magnitude) - mantissa);
  return std::fabs(*stored - modelled) <= 2 * ulp ? *stored : rounded;
}

double square(double x) { return x * x; }

// F: the arithmetic; round(x): what storing a product's result does. With
// d_from_output, what a flash backward inherits from its forward is modelled
// (standard_backward.h, exact_backward_from_stored_output); with stored_out
// too, D comes from that output instead of the modelled one
// (exact_backward_from_output).
template <typename F, typename Round>
HostGradients standard_backward(const HostProblem& p, Round round,
                                std::optional<DType> d_from_output = std::nullopt,
                                const std::vector<float>* stored_out = nullptr) {
  const Sizes& s = p.sizes;
  const int d = s.head_dim, dv_cols = s.head_dim_v;
  // Offsets of a row of q's or out's shape (q, dq: cols d; dout: dv_cols) and
  // of k's or v's (k, dk: d; v, dv: dv_cols).
  auto at_q = [&](int b, int row, int h, int cols) {
    return ((size_t(b) * s.seqlen_q + row) * s.heads_q + h) * cols;
  };
  auto at_k = [&](int b, int row, int h, int cols) {
    return ((size_t(b) * s.seqlen_k + row) * s.heads_kv + h) * cols;
  };
  HostGradients g;
  g.dq.assign(size_t(s.batch) * s.seqlen_q * s.heads_q * d, 0.0);
  g.dk.assign(size_t(s.batch) * s.seqlen_k * s.heads_kv * d, 0.0);
  g.dv.assign(size_t(s.batch) * s.seqlen_k * s.heads_kv * dv_cols, 0.0);
  g.dq_mag.assign(g.dq.size(), 0.0);
  g.dk_mag.assign(g.dk.size(), 0.0);
  g.dv_mag.assign(g.dv.size(), 0.0);
  g.dq_terms_sq.assign(g.dq.size(), 0.0);
  g.dk_terms_sq.assign(g.dk.size(), 0.0);
  g.dv_terms_sq.assign(g.dv.size(), 0.0);
  // Work items: (batch, kv head) slices, each cut into chunks of its rows
  // (query head by query head) where the slices are few (core/parallel.h,
  // sum_over_row_chunks); a chunk sums its rows' parts of dk, dv and their
  // magnitudes, and the chunks' sums are added in chunk order.
  struct KeySums {
    std::vector<F> dk, dv;
    std::vector<double> dk_mag, dv_mag, dk_terms_sq, dv_terms_sq;
  };
  // Key j of the slice: its dk and dv (rounded) and magnitudes, the chunks' sums added in order.
  const auto finish = [&](int64_t slice, int64_t j, const KeySums* parts, int64_t count) {
    const int b = int(slice / s.heads_kv), hk = int(slice % s.heads_kv);
    for (int c = 0; c < d; ++c) {
      const size_t at = size_t(j) * d + c;
      g.dk[at_k(b, j, hk, d) + c] = round(chunk_total(parts, count, &KeySums::dk, at));
      g.dk_mag[at_k(b, j, hk, d) + c] = chunk_total(parts, count, &KeySums::dk_mag, at);
      g.dk_terms_sq[at_k(b, j, hk, d) + c] = chunk_total(parts, count, &KeySums::dk_terms_sq, at);
    }
    for (int c = 0; c < dv_cols; ++c) {
      const size_t at = size_t(j) * dv_cols + c;
      g.dv[at_k(b, j, hk, dv_cols) + c] = round(chunk_total(parts, count, &KeySums::dv, at));
      g.dv_mag[at_k(b, j, hk, dv_cols) + c] = chunk_total(parts, count, &KeySums::dv_mag, at);
      g.dv_terms_sq[at_k(b, j, hk, dv_cols) + c] =
          chunk_total(parts, count, &KeySums::dv_terms_sq, at);
    }
  };
  const auto part = [&](int64_t slice, int64_t row_begin, int64_t row_end, KeySums& own) {
    const int b = int(slice / s.heads_kv), hk = int(slice % s.heads_kv);
    own.dk.assign(size_t(s.seqlen_k) * d, F(0));
    own.dv.assign(size_t(s.seqlen_k) * dv_cols, F(0));
    own.dk_mag.assign(own.dk.size(), 0.0);
    own.dv_mag.assign(own.dv.size(), 0.0);
    own.dk_terms_sq.assign(own.dk.size(), 0.0);
    own.dv_terms_sq.assign(own.dv.size(), 0.0);
    std::vector<F>& dk = own.dk;
    std::vector<F>& dv = own.dv;
    std::vector<F> prob(s.seqlen_k), dp(s.seqlen_k), derivative(s.seqlen_k), kept(s.seqlen_k);
    // Σ_c |dO_c·v_c| per key: the scale of dP's rounding, which a dot product
    // whose terms cancel keeps although |dP| is small.
    std::vector<double> dp_abs(s.seqlen_k);
    for (int64_t row = row_begin; row < row_end; ++row) {
      const int hq = hk * s.group() + int(row / s.seqlen_q), i = int(row % s.seqlen_q);
      const int key_begin = p.mask.key_begin(i), key_end = p.mask.key_end(i);
      if (key_begin >= key_end) continue;  // dq stays 0
      const float* q = &(*p.q)[at_q(b, i, hq, d)];
      const float* dout = &(*p.dout)[at_q(b, i, hq, dv_cols)];
      F m = -std::numeric_limits<F>::infinity();
      for (int j = key_begin; j < key_end; ++j) {
        const float* k = &(*p.k)[at_k(b, j, hk, d)];
        F dot = 0;
        for (int c = 0; c < d; ++c) dot += F(q[c]) * F(k[c]);
        prob[j] = F(round(dot)) * F(p.scale);
        if (d_from_output) {  // a flash kernel's score: an fp32 dot product
          float dot32 = 0.0f;
          for (int c = 0; c < d; ++c) dot32 += q[c] * k[c];
          prob[j] = F(dot32 * p.scale);
        }
        prob[j] = p.rule(prob[j], b, hq, i, j, derivative[j]);
        m = std::isnan(m) || std::isnan(prob[j]) ? F(NAN) : std::max(m, prob[j]);
      }
      if (p.rule.empties(m)) continue;  // the bias masked every key it sees: dq stays 0
      F sum = 0;
      for (int j = key_begin; j < key_end; ++j) sum += (prob[j] = std::exp(prob[j] - m));
      // A flash backward's P is e^(s − lse) with the forward's lse in fp32, from
      // its own fp32 scores (here: the dot products summed in the other order).
      // The forward's O, as a 16-bit flash forward computes it: each weight
      // e^(s − m) rounded to the dtype for the product with V, divided by the
      // fp32 sum of the unrounded weights. Where the softmax is sharp, these
      // roundings move the weights' sum off 1 by more than the size of dP − D,
      // and D = dO·O carries that into dS (standard attention's O, from P
      // rounded to the dtype, has the same error).
      F flash_factor = 0;
      std::vector<double> flash_out(d_from_output ? dv_cols : 0, 0.0);
      if (d_from_output) {
        float m32 = -INFINITY, l32 = 0.0f;
        std::vector<float> s32(key_end);
        for (int j = key_begin; j < key_end; ++j) {
          const float* k = &(*p.k)[at_k(b, j, hk, d)];
          float dot32 = 0.0f;
          for (int c = d - 1; c >= 0; --c) dot32 += q[c] * k[c];
          s32[j] = p.rule(dot32 * p.scale, b, hq, i, j);
          m32 = std::max(m32, s32[j]);
        }
        for (int j = key_begin; j < key_end; ++j) {
          const float weight = std::exp(s32[j] - m32);
          l32 += weight;
          const double stored = round_to(*d_from_output, weight) * p.rule.kept(b, hq, i, j);
          const float* v = &(*p.v)[at_k(b, j, hk, dv_cols)];
          for (int c = 0; c < dv_cols; ++c) flash_out[c] += stored * v[c];
        }
        for (double& o : flash_out) o /= l32;
        flash_factor = F(std::exp(m - F(m32 + std::log(l32))));
      }
      F row_dot = 0;  // rowsum(dP∘P)
      double row_dot_abs = 0;  // the scale of its rounding, as dp_abs
      for (int j = key_begin; j < key_end; ++j) {
        prob[j] = F(round(d_from_output ? prob[j] * flash_factor : prob[j] / sum));
        kept[j] = F(p.rule.kept(b, hq, i, j));
        const float* v = &(*p.v)[at_k(b, j, hk, dv_cols)];
        F dot = 0;
        dp_abs[j] = 0;
        for (int c = 0; c < dv_cols; ++c) {
          dot += F(dout[c]) * F(v[c]);
          dp_abs[j] += std::fabs(double(dout[c]) * v[c]);
        }
        dp[j] = F(round(dot)) * kept[j];
        dp_abs[j] *= std::fabs(double(kept[j]));
        row_dot += dp[j] * prob[j];
        row_dot_abs += dp_abs[j] * std::fabs(double(prob[j]));
      }
      if (d_from_output) {
        row_dot = 0;
        row_dot_abs = 0;
        for (int c = 0; c < dv_cols; ++c) {
          const F o = F(output_for_d(*d_from_output, flash_out[c],
                                     stored_out ? &(*stored_out)[at_q(b, i, hq, dv_cols) + c]
                                                : nullptr));
          row_dot += F(dout[c]) * o;
          row_dot_abs += std::fabs(double(dout[c]) * double(o));
        }
      }
      double* dq = &g.dq[at_q(b, i, hq, d)];
      double* dq_mag = &g.dq_mag[at_q(b, i, hq, d)];
      double* dq_terms_sq = &g.dq_terms_sq[at_q(b, i, hq, d)];
      std::vector<F> dq_row(d, F(0));
      for (int j = key_begin; j < key_end; ++j) {
        const F ds = F(round(prob[j] * (dp[j] - row_dot) * derivative[j])) * F(p.scale);
        const double ds_mag = std::fabs(double(prob[j]) * p.scale * derivative[j]) *
                              (dp_abs[j] + row_dot_abs);
        const float* k = &(*p.k)[at_k(b, j, hk, d)];
        double* dk_mag = &own.dk_mag[size_t(j) * d];
        double* dv_mag = &own.dv_mag[size_t(j) * dv_cols];
        double* dk_terms_sq = &own.dk_terms_sq[size_t(j) * d];
        double* dv_terms_sq = &own.dv_terms_sq[size_t(j) * dv_cols];
        for (int c = 0; c < d; ++c) {
          dq_row[c] += ds * F(k[c]);
          dk[size_t(j) * d + c] += ds * F(q[c]);
          dq_mag[c] += ds_mag * std::fabs(k[c]);
          dk_mag[c] += ds_mag * std::fabs(q[c]);
          dq_terms_sq[c] += square(double(ds) * k[c]);
          dk_terms_sq[c] += square(double(ds) * q[c]);
        }
        for (int c = 0; c < dv_cols; ++c) {
          dv[size_t(j) * dv_cols + c] += prob[j] * kept[j] * F(dout[c]);
          dv_mag[c] += std::fabs(double(prob[j] * kept[j]) * dout[c]);
          dv_terms_sq[c] += square(double(prob[j] * kept[j]) * dout[c]);
        }
      }
      for (int c = 0; c < d; ++c) dq[c] = round(dq_row[c]);
    }
  };
  const int64_t sums_bytes =
      int64_t(s.seqlen_k) * (d + dv_cols) * int64_t(sizeof(F) + sizeof(double));
  sum_over_row_chunks<KeySums>(int64_t(s.batch) * s.heads_kv, int64_t(s.group()) * s.seqlen_q,
                               s.seqlen_k, sums_bytes, part, finish);
  return g;
}

}  // namespace

HostGradients standard_backward_float64(const HostProblem& p) {
  return standard_backward<double>(p, [](double x) { return x; });
}

HostGradients standard_backward_in_dtype(const HostProblem& p, DType dtype) {
  return standard_backward<float>(p, [dtype](float x) { return round_to(dtype, x); });
}

HostGradients exact_backward_from_stored_output(const HostProblem& p, DType dtype) {
  return standard_backward<double>(p, [](double x) { return x; }, dtype);
}

HostGradients exact_backward_from_output(const HostProblem& p, DType dtype,
                                         const std::vector<float>& out) {
  return standard_backward<double>(p, [](double x) { return x; }, dtype, &out);
}

}  // namespace flashattn::harness
