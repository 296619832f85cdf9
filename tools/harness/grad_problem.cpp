#include "grad_problem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "bias.h"
#include "buffer.h"
#include "core/half.h"
#include "normal.h"
#include "standard_backward.h"

namespace flashattn::harness {
namespace {

// A tensor's elements as floats, contiguous (batch, seqlen, heads, head_dim);
// rows [row0, row0 + rows) of each batch index where rows >= 0.
std::vector<float> values(const Buffer& buf, DType dtype, int64_t row0 = 0, int64_t rows = -1) {
  if (rows < 0) rows = buf.shape[1];
  std::vector<float> out;
  out.reserve(size_t(buf.shape[0] * rows * buf.shape[2] * buf.shape[3]));
  for (int64_t b = 0; b < buf.shape[0]; ++b)
    for (int64_t i = row0; i < row0 + rows; ++i)
      for (int64_t h = 0; h < buf.shape[2]; ++h)
        for (int64_t c = 0; c < buf.shape[3]; ++c)
          out.push_back(load_float(buf.host.data(), dtype, offset(buf, b, i, h, c)));
  return out;
}

// The error of each baseline computation against ref, relative to ‖ref‖.
double rel_error(const std::vector<double>& x, const std::vector<double>& ref) {
  double err2 = 0, ref2 = 0;
  for (size_t e = 0; e < x.size(); ++e) {
    err2 += (x[e] - ref[e]) * (x[e] - ref[e]);
    ref2 += ref[e] * ref[e];
  }
  return std::sqrt(err2) / (ref2 > 0 ? std::sqrt(ref2) : 1.0);
}

double norm(const std::vector<double>& x) {
  double sum = 0;
  for (double e : x) sum += e * e;
  return std::sqrt(sum);
}

// The terms of every element's sum (their squares' sums per element, T_e):
// their l2 norm, and the number of elements they effectively sit on,
// (Σ T_e)² / Σ T_e² (n elements of equal weight give n).
struct TermSpread {
  double norm = 0;
  double elements = 0;
};

TermSpread term_spread(const std::vector<double>& terms_sq) {
  double sum = 0, sum_sq = 0;
  for (double e : terms_sq) {
    sum += e;
    sum_sq += e * e;
  }
  return {std::sqrt(sum), sum_sq > 0 ? sum * sum / sum_sq : 0.0};
}

// baseline_error: the larger of standard attention's backward in the dtype (fp32
// arithmetic for f32) and the exact gradient with what a flash backward inherits
// from its forward (a modelled forward's output, and the backend's own forward's
// where within two ulps of it: standard_backward.h), each against ref. fp32:
// within max(1e-5, 2·baseline) (where the softmax is sharp, no fp32 computation
// reaches 1e-5); 16-bit: within 2·baseline plus the output's own rounding (a
// quarter ulp at 1). Where the terms sit on 8 elements or fewer (head dim 1, a
// few rows with few keys), the baseline's error is one draw of a handful of
// roundings, lucky or not: a two-element dq, f16 or bf16, failed on that draw
// alone for 4 to 6 seeds in 100. There the tolerance is at least the most that
// rounding can move such a tensor where each element's sum has up to four terms
// (ds·k, ds·q, p·dO; a 16-bit backward rounds ds and p to the dtype): half an
// ulp of each term and of the result, 2·half ulp·‖terms‖ + half ulp·‖ref‖
// (Cauchy-Schwarz), relative to ‖ref‖. In an emulation of that case (fp32
// products, ds and the result rounded) 1 seed in 80,000 failed.
// Both plus a floor of 2^-22 of the terms' magnitude (magnitude_norm) relative
// to ‖ref‖: where the terms cancel to a gradient near 0, fp32 rounding of the
// terms is all any computation has.
// The magnitude counts dS's terms before their own cancellation (dP and D as
// Σ|dO·v| and Σ|dO·O|, standard_backward.cpp): with one key, P ≡ 1 and dS is
// the rounding of dO·v − dO·O, which Σ|dO·v| sets, not |dP|.
TensorAccuracy score(const std::vector<float>& got, const std::vector<double>& ref,
                     double baseline_error, double magnitude_norm, const TermSpread& terms,
                     DType dtype) {
  TensorAccuracy acc;
  double err2 = 0, ref2 = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    acc.unwritten += std::isnan(got[e]);
    const double diff = got[e] - ref[e];
    err2 += diff * diff;
    ref2 += ref[e] * ref[e];
  }
  const double ref_norm = ref2 > 0 ? std::sqrt(ref2) : 1.0;
  acc.rel_l2 = std::sqrt(err2) / ref_norm;
  if (std::isnan(acc.rel_l2)) acc.rel_l2 = INFINITY;
  acc.standard_rel_l2 = baseline_error;
  // As the forward's rule (problem.cpp): the output's own rounding, a quarter ulp at 1.
  const double out_rounding = dtype == DType::bf16 ? 0x1p-9 : 0x1p-12;
  const double cancellation_floor = 0x1p-22 * magnitude_norm / ref_norm;
  const double half_ulp = dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
  const bool few_elements = terms.elements > 0 && terms.elements <= 8;
  const double rounding_bound = few_elements ? half_ulp * (2 * terms.norm / ref_norm + 1) : 0.0;
  acc.tolerance = (dtype == DType::f32 ? std::max(1e-5, 2 * baseline_error)
                                       : std::max(2 * baseline_error + out_rounding,
                                                  rounding_bound)) +
                  cancellation_floor;
  return acc;
}

}  // namespace

struct GradProblem::Storage {
  Buffer q, k, v, out, dout, dq, dk, dv;
  std::vector<float> lse;
  DeviceBuffer lse_device;
  SlopeBuffer slopes;
  BiasBuffer bias;
  SequenceBuffer sequences;
};

GradProblem::GradProblem(const Case& c, Device device, uint64_t seed)
    : case_(c), device_(device), storage_(std::make_unique<Storage>()) {
  const Shape& s = c.shape;
  Storage& st = *storage_;
  const int pad = c.strided_pad;
  const int batch = is_packed(c) ? 1 : s.batch;  // packed: one batch index of every sequence
  const int nq = int(total_q(c)), nk = int(total_k(c));
  for (Buffer* buf : {&st.q, &st.dq})
    layout(*buf, c.dtype, batch, nq, s.heads_q, s.head_dim, c.strided, pad, false);
  for (Buffer* buf : {&st.out, &st.dout})
    layout(*buf, c.dtype, batch, nq, s.heads_q, value_head_dim(s), c.strided, pad, false);
  for (Buffer* buf : {&st.k, &st.dk})
    layout(*buf, c.dtype, batch, nk, s.heads_kv, s.head_dim, false, pad, c.strided);
  for (Buffer* buf : {&st.v, &st.dv})
    layout(*buf, c.dtype, batch, nk, s.heads_kv, value_head_dim(s), false, pad, c.strided);
  st.lse.assign(size_t(batch) * s.heads_q * nq, 0.0f);
  st.sequences = SequenceBuffer(c, device);

  std::mt19937_64 rng(seed);
  fill_normal({&st.q, &st.k, &st.v, &st.dout}, c.dtype, c.input_std, seed);
  case_ = with_dropout_seed(case_, rng);
  st.slopes = SlopeBuffer(c, device);
  st.bias = BiasBuffer(c, device, rng);
  if (device.kind == DeviceKind::cuda) {
    for (Buffer* buf : {&st.q, &st.k, &st.v, &st.out, &st.dout, &st.dq, &st.dk, &st.dv}) {
      buf->device = DeviceBuffer(buf->host.size(), device.index);
      buf->device.upload(buf->host.data());
    }
    st.lse_device = DeviceBuffer(st.lse.size() * sizeof(float), device.index);
  }
  poison_gradients();
}

GradProblem::~GradProblem() = default;

Params GradProblem::forward_params(Backend backend) const {
  const Storage& st = *storage_;
  Params p;
  p.q = view_of(st.q, case_.dtype, device_);
  p.k = view_of(st.k, case_.dtype, device_);
  p.v = view_of(st.v, case_.dtype, device_);
  p.out = view_of(st.out, case_.dtype, device_);
  p.lse = device_.kind == DeviceKind::cuda ? static_cast<float*>(st.lse_device.data())
                                           : const_cast<float*>(st.lse.data());
  p.scale = case_.scale;
  p.mask = case_.mask;
  p.variants = variants_of(case_, st.slopes.on(device_.kind), st.bias.on(device_.kind));
  p.sequences = st.sequences.on(device_.kind);
  p.backend = backend;
  return p;
}

BackwardParams backward_of(const Params& f) {
  BackwardParams p;
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.out = f.out;
  p.lse = f.lse;
  p.scale = f.scale;
  p.mask = f.mask;
  p.variants = f.variants;
  p.sequences = f.sequences;
  p.backend = f.backend;
  p.stream = f.stream;
  return p;
}

BackwardParams GradProblem::backward_params(Backend backend, bool deterministic) const {
  const Storage& st = *storage_;
  BackwardParams p = backward_of(forward_params(backend));
  p.dout = view_of(st.dout, case_.dtype, device_);
  p.dq = view_of(st.dq, case_.dtype, device_);
  p.dk = view_of(st.dk, case_.dtype, device_);
  p.dv = view_of(st.dv, case_.dtype, device_);
  p.deterministic = deterministic;
  return p;
}

void GradProblem::poison_gradients() {
  Storage& st = *storage_;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Buffer* buf : {&st.dq, &st.dk, &st.dv}) {
    const size_t elems = buf->host.size() / dtype_size(case_.dtype);
    for (size_t e = 0; e < elems; ++e) store_float(buf->host.data(), case_.dtype, int64_t(e), nan);
    if (device_.kind == DeviceKind::cuda) buf->device.upload(buf->host.data());
  }
}

void GradProblem::run(Backend backend, bool deterministic) {
  poison_gradients();
  forward(forward_params(backend));
  backward(backward_params(backend, deterministic));
  if (device_.kind == DeviceKind::cuda) {
    device_synchronize(device_.index);
    Storage& st = *storage_;
    for (Buffer* buf : {&st.out, &st.dq, &st.dk, &st.dv}) buf->device.download(buf->host.data());
  }
}

std::vector<uint8_t> GradProblem::gradient_bytes() const {
  const Storage& st = *storage_;
  std::vector<uint8_t> out;
  for (const Buffer* buf : {&st.dq, &st.dk, &st.dv})
    out.insert(out.end(), buf->host.begin(), buf->host.end());
  return out;
}

namespace {

// The gradients of one problem the oracles compute on their own (the whole
// dense batch, or one sequence of a packed batch as a dense batch of one):
// the oracle, the harness's float64 standard backward and the three baselines.
struct PartGradients {
  HostGradients oracle, independent, standard, flash, from_output;
};

// The part of case c whose inputs are q, k, v and dout (its values,
// contiguous); sizes and mask are the part's own; `bias` the whole (dense)
// case's, on the host (packed cases take none); `out` the part's output as the
// backend's forward stored it.
PartGradients part_gradients(const Case& c, const float* slopes, const BiasBuffer& bias,
                             Backend backend, Sizes sizes, const std::vector<float> (&x)[4],
                             const std::vector<float>& out) {
  const ScoreBias host_bias = bias.on(DeviceKind::cpu);
  const AttnParams shape = [&] {
    Params p;
    p.q = contiguous_view(nullptr, DType::f32, sizes.batch, sizes.seqlen_q, sizes.heads_q, sizes.head_dim);
    p.k = contiguous_view(nullptr, DType::f32, sizes.batch, sizes.seqlen_k, sizes.heads_kv, sizes.head_dim);
    p.v = contiguous_view(nullptr, DType::f32, sizes.batch, sizes.seqlen_k, sizes.heads_kv, sizes.head_dim_v);
    p.out = contiguous_view(nullptr, DType::f32, sizes.batch, sizes.seqlen_q, sizes.heads_q, sizes.head_dim_v);
    p.scale = c.scale;
    p.mask = c.mask;
    p.variants = variants_of(c, slopes, host_bias);
    return attn_params(p);
  }();
  const HostProblem host{shape.sizes, shape.mask, shape.softmax.scale,
                         score_rule(c, slopes, bias.addends()), &x[0], &x[1], &x[2], &x[3]};
  PartGradients g;
  g.independent = standard_backward_float64(host);
  if (backend == Backend::reference) {
    g.oracle = g.independent;
  } else {
    // The library's reference on fp32 copies of the inputs (their values exactly),
    // its gradients kept in fp32: 6e-8 relative, far under every tolerance.
    std::vector<float> in[4] = {x[0], x[1], x[2], x[3]}, grads[3], out(x[3].size());
    std::vector<float> lse(size_t(sizes.batch) * sizes.heads_q * sizes.seqlen_q);
    grads[0].resize(x[0].size());
    grads[1].resize(x[1].size());
    grads[2].resize(x[2].size());
    auto view = [&](std::vector<float>& data, int seqlen, int heads, int cols) {
      return contiguous_view(data.data(), DType::f32, sizes.batch, seqlen, heads, cols);
    };
    const int d = sizes.head_dim, dv = sizes.head_dim_v;
    BackwardParams p;
    p.q = view(in[0], sizes.seqlen_q, sizes.heads_q, d);
    p.k = view(in[1], sizes.seqlen_k, sizes.heads_kv, d);
    p.v = view(in[2], sizes.seqlen_k, sizes.heads_kv, dv);
    p.dout = view(in[3], sizes.seqlen_q, sizes.heads_q, dv);
    p.out = view(out, sizes.seqlen_q, sizes.heads_q, dv);
    p.lse = lse.data();
    p.dq = view(grads[0], sizes.seqlen_q, sizes.heads_q, d);
    p.dk = view(grads[1], sizes.seqlen_k, sizes.heads_kv, d);
    p.dv = view(grads[2], sizes.seqlen_k, sizes.heads_kv, dv);
    p.scale = c.scale;
    p.mask = c.mask;
    p.variants = variants_of(c, slopes, host_bias);
    p.backend = Backend::reference;
    flashattn::backward(p);
    g.oracle.dq.assign(grads[0].begin(), grads[0].end());
    g.oracle.dk.assign(grads[1].begin(), grads[1].end());
    g.oracle.dv.assign(grads[2].begin(), grads[2].end());
  }
  g.standard = standard_backward_in_dtype(host, c.dtype);
  g.flash = exact_backward_from_stored_output(host, c.dtype);
  g.from_output = exact_backward_from_output(host, c.dtype, out);
  return g;
}

void append(HostGradients& to, const HostGradients& from) {
  const auto cat = [](std::vector<double>& a, const std::vector<double>& b) {
    a.insert(a.end(), b.begin(), b.end());
  };
  cat(to.dq, from.dq);
  cat(to.dk, from.dk);
  cat(to.dv, from.dv);
  cat(to.dq_mag, from.dq_mag);
  cat(to.dk_mag, from.dk_mag);
  cat(to.dv_mag, from.dv_mag);
  cat(to.dq_terms_sq, from.dq_terms_sq);
  cat(to.dk_terms_sq, from.dk_terms_sq);
  cat(to.dv_terms_sq, from.dv_terms_sq);
}

}  // namespace

GradAccuracy GradProblem::evaluate(Backend backend) {
  const Storage& st = *storage_;
  const Shape& s = case_.shape;
  const float* slopes = st.slopes.host.data();
  // Dense: one part, the whole batch. Packed: each sequence, in the packed
  // order, so that the parts' gradients laid end to end are the tensors'.
  PartGradients all;
  const int parts = is_packed(case_) ? s.batch : 1;
  for (int b = 0; b < parts; ++b) {
    const Case part = is_packed(case_) ? sequence_case(case_, b) : case_;
    const int64_t q0 = is_packed(case_) ? st.sequences.cu_q[b] : 0;
    const int64_t k0 = is_packed(case_) ? st.sequences.cu_k[b] : 0;
    const Shape& ps = part.shape;
    const std::vector<float> x[4] = {values(st.q, case_.dtype, q0, ps.seqlen_q),
                                     values(st.k, case_.dtype, k0, ps.seqlen_k),
                                     values(st.v, case_.dtype, k0, ps.seqlen_k),
                                     values(st.dout, case_.dtype, q0, ps.seqlen_q)};
    const Sizes sizes{ps.batch,   ps.seqlen_q, ps.seqlen_k,        ps.heads_q,
                      ps.heads_kv, ps.head_dim, value_head_dim(ps)};
    const PartGradients g = part_gradients(part, slopes, st.bias, backend, sizes, x,
                                           values(st.out, case_.dtype, q0, ps.seqlen_q));
    append(all.oracle, g.oracle);
    append(all.independent, g.independent);
    append(all.standard, g.standard);
    append(all.flash, g.flash);
    append(all.from_output, g.from_output);
  }
  auto baseline = [&](const std::vector<double>& standard, const std::vector<double>& flash,
                      const std::vector<double>& from_output, const std::vector<double>& ref) {
    return std::max({rel_error(standard, ref), rel_error(flash, ref), rel_error(from_output, ref)});
  };
  const HostGradients& oracle = all.oracle;
  GradAccuracy acc;
  acc.dq = score(values(st.dq, case_.dtype), oracle.dq,
                 baseline(all.standard.dq, all.flash.dq, all.from_output.dq, oracle.dq),
                 norm(all.independent.dq_mag), term_spread(all.independent.dq_terms_sq),
                 case_.dtype);
  acc.dk = score(values(st.dk, case_.dtype), oracle.dk,
                 baseline(all.standard.dk, all.flash.dk, all.from_output.dk, oracle.dk),
                 norm(all.independent.dk_mag), term_spread(all.independent.dk_terms_sq),
                 case_.dtype);
  acc.dv = score(values(st.dv, case_.dtype), oracle.dv,
                 baseline(all.standard.dv, all.flash.dv, all.from_output.dv, oracle.dv),
                 norm(all.independent.dv_mag), term_spread(all.independent.dv_terms_sq),
                 case_.dtype);
  return acc;
}

std::string GradAccuracy::summary() const {
  std::ostringstream out;
  const struct {
    const char* name;
    const TensorAccuracy& t;
  } tensors[] = {{"dq", dq}, {"dk", dk}, {"dv", dv}};
  for (const auto& [name, t] : tensors) {
    out << name << ": rel_l2 " << t.rel_l2 << " (tolerance " << t.tolerance;
    out << ", baseline " << t.standard_rel_l2;
    out << "), unwritten " << t.unwritten << (t.passed() ? "; " : " FAILED; ");
  }
  return out.str();
}

}  // namespace flashattn::harness
