#include "standard_backward.h"

#include <cmath>
#include <limits>

#include "core/half.h"
#include "core/parallel.h"

namespace flashattn::harness {
namespace {

float round_float(DType dtype, float x) {
  switch (dtype) {
    case DType::f16: return f16_to_float(float_to_f16(x));
    case DType::bf16: return bf16_to_float(float_to_bf16(x));
    case DType::f32: return x;
  }
  return x;
}

// F: the arithmetic; round(x): what storing a product's result does.
template <typename F, typename Round>
HostGradients standard_backward(const HostProblem& p, Round round) {
  const Sizes& s = p.sizes;
  const int d = s.head_dim;
  auto at = [&](int b, int row, int heads, int h) {
    return ((size_t(b) * (heads == s.heads_q ? s.seqlen_q : s.seqlen_k) + row) * heads + h) * d;
  };
  HostGradients g;
  g.dq.assign(size_t(s.batch) * s.seqlen_q * s.heads_q * d, 0.0);
  g.dk.assign(size_t(s.batch) * s.seqlen_k * s.heads_kv * d, 0.0);
  g.dv.assign(g.dk.size(), 0.0);
  parallel_for(int64_t(s.batch) * s.heads_kv, [&](int64_t slice, int) {
    const int b = int(slice / s.heads_kv), hk = int(slice % s.heads_kv);
    std::vector<F> dk(size_t(s.seqlen_k) * d, F(0)), dv(dk.size(), F(0));
    std::vector<F> prob(s.seqlen_k), dp(s.seqlen_k);
    for (int g_ = 0; g_ < s.group(); ++g_) {
      const int hq = hk * s.group() + g_;
      for (int i = 0; i < s.seqlen_q; ++i) {
        const int key_begin = p.mask.key_begin(i), key_end = p.mask.key_end(i);
        if (key_begin >= key_end) continue;  // dq stays 0
        const float* q = &(*p.q)[at(b, i, s.heads_q, hq)];
        const float* dout = &(*p.dout)[at(b, i, s.heads_q, hq)];
        F m = -std::numeric_limits<F>::infinity();
        for (int j = key_begin; j < key_end; ++j) {
          const float* k = &(*p.k)[at(b, j, s.heads_kv, hk)];
          F dot = 0;
          for (int c = 0; c < d; ++c) dot += F(q[c]) * F(k[c]);
          prob[j] = F(round(dot)) * F(p.scale);
          m = std::isnan(m) || std::isnan(prob[j]) ? F(NAN) : std::max(m, prob[j]);
        }
        F sum = 0;
        for (int j = key_begin; j < key_end; ++j) sum += (prob[j] = std::exp(prob[j] - m));
        F row_dot = 0;  // rowsum(dP∘P)
        for (int j = key_begin; j < key_end; ++j) {
          prob[j] = F(round(prob[j] / sum));
          const float* v = &(*p.v)[at(b, j, s.heads_kv, hk)];
          F dot = 0;
          for (int c = 0; c < d; ++c) dot += F(dout[c]) * F(v[c]);
          dp[j] = F(round(dot));
          row_dot += dp[j] * prob[j];
        }
        double* dq = &g.dq[at(b, i, s.heads_q, hq)];
        std::vector<F> dq_row(d, F(0));
        for (int j = key_begin; j < key_end; ++j) {
          const F ds = F(round(prob[j] * (dp[j] - row_dot))) * F(p.scale);
          const float* k = &(*p.k)[at(b, j, s.heads_kv, hk)];
          for (int c = 0; c < d; ++c) {
            dq_row[c] += ds * F(k[c]);
            dk[size_t(j) * d + c] += ds * F(q[c]);
            dv[size_t(j) * d + c] += prob[j] * F(dout[c]);
          }
        }
        for (int c = 0; c < d; ++c) dq[c] = round(dq_row[c]);
      }
    }
    for (int j = 0; j < s.seqlen_k; ++j)
      for (int c = 0; c < d; ++c) {
        g.dk[at(b, j, s.heads_kv, hk) + c] = round(dk[size_t(j) * d + c]);
        g.dv[at(b, j, s.heads_kv, hk) + c] = round(dv[size_t(j) * d + c]);
      }
  });
  return g;
}

}  // namespace

HostGradients standard_backward_float64(const HostProblem& p) {
  return standard_backward<double>(p, [](double x) { return x; });
}

HostGradients standard_backward_in_dtype(const HostProblem& p, DType dtype) {
  return standard_backward<float>(p, [dtype](float x) { return round_float(dtype, x); });
}

}  // namespace flashattn::harness
