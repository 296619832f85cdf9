#include "grad_problem.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "buffer.h"
#include "core/half.h"
#include "standard_backward.h"

namespace flashattn::harness {
namespace {

// A tensor's elements as floats, contiguous (batch, seqlen, heads, head_dim).
std::vector<float> values(const Buffer& buf, DType dtype) {
  std::vector<float> out;
  out.reserve(size_t(buf.shape[0] * buf.shape[1] * buf.shape[2] * buf.shape[3]));
  for (int64_t b = 0; b < buf.shape[0]; ++b)
    for (int64_t i = 0; i < buf.shape[1]; ++i)
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

// baseline_error: the larger of standard attention's backward in the dtype (fp32
// arithmetic for f32) and the exact gradient with what a flash backward inherits
// from its forward, each against ref. fp32: within max(1e-5, 2·baseline) (where
// the softmax is sharp, no fp32 computation reaches 1e-5); 16-bit: within
// 2·baseline plus the output's own rounding. Both plus a floor of 2^-22 of the
// terms' magnitude (magnitude_norm) relative to ‖ref‖: where the terms cancel
// to a gradient near 0, fp32 rounding of the terms is all any computation has.
TensorAccuracy score(const std::vector<float>& got, const std::vector<double>& ref,
                     double baseline_error, double magnitude_norm, DType dtype) {
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
  acc.tolerance = (dtype == DType::f32 ? std::max(1e-5, 2 * baseline_error)
                                       : 2 * baseline_error + out_rounding) +
                  cancellation_floor;
  return acc;
}

}  // namespace

struct GradProblem::Storage {
  Buffer q, k, v, out, dout, dq, dk, dv;
  std::vector<float> lse;
  DeviceBuffer lse_device;
  SlopeBuffer slopes;
};

GradProblem::GradProblem(const Case& c, Device device, uint64_t seed)
    : case_(c), device_(device), storage_(std::make_unique<Storage>()) {
  const Shape& s = c.shape;
  Storage& st = *storage_;
  const int pad = c.strided_pad;
  for (Buffer* buf : {&st.q, &st.out, &st.dout, &st.dq})
    layout(*buf, c.dtype, s.batch, s.seqlen_q, s.heads_q, s.head_dim, c.strided, pad, false);
  for (Buffer* buf : {&st.k, &st.v, &st.dk, &st.dv})
    layout(*buf, c.dtype, s.batch, s.seqlen_k, s.heads_kv, s.head_dim, false, pad, c.strided);
  st.lse.assign(size_t(s.batch) * s.heads_q * s.seqlen_q, 0.0f);

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, c.input_std);
  fill({&st.q, &st.k, &st.v, &st.dout}, c.dtype, [&] { return normal(rng); });
  st.slopes = SlopeBuffer(c, device);
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
  p.variants = variants_of(case_, st.slopes.on(device_.kind));
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
    for (Buffer* buf : {&st.dq, &st.dk, &st.dv}) buf->device.download(buf->host.data());
  }
}

std::vector<uint8_t> GradProblem::gradient_bytes() const {
  const Storage& st = *storage_;
  std::vector<uint8_t> out;
  for (const Buffer* buf : {&st.dq, &st.dk, &st.dv})
    out.insert(out.end(), buf->host.begin(), buf->host.end());
  return out;
}

GradAccuracy GradProblem::evaluate(Backend backend) {
  const Storage& st = *storage_;
  const Shape& s = case_.shape;
  const std::vector<float> q = values(st.q, case_.dtype), k = values(st.k, case_.dtype),
                           v = values(st.v, case_.dtype), dout = values(st.dout, case_.dtype);
  const AttnParams shape_params = attn_params(forward_params(Backend::reference));
  const HostProblem host{shape_params.sizes, shape_params.mask, shape_params.softmax.scale,
                         score_rule(case_, st.slopes.host.data()), &q, &k, &v, &dout};
  const HostGradients independent = standard_backward_float64(host);
  HostGradients oracle;
  if (backend == Backend::reference) {
    oracle = independent;
  } else {
    // The library's reference on fp32 copies of the inputs (their values exactly),
    // its gradients kept in fp32: 6e-8 relative, far under every tolerance.
    std::vector<float> x[4] = {q, k, v, dout}, grads[3], out(q.size()), lse(st.lse.size());
    grads[0].resize(q.size());
    grads[1].resize(k.size());
    grads[2].resize(v.size());
    auto view = [&](std::vector<float>& data, int seqlen, int heads) {
      return contiguous_view(data.data(), DType::f32, s.batch, seqlen, heads, s.head_dim);
    };
    BackwardParams p;
    p.q = view(x[0], s.seqlen_q, s.heads_q);
    p.k = view(x[1], s.seqlen_k, s.heads_kv);
    p.v = view(x[2], s.seqlen_k, s.heads_kv);
    p.dout = view(x[3], s.seqlen_q, s.heads_q);
    p.out = view(out, s.seqlen_q, s.heads_q);
    p.lse = lse.data();
    p.dq = view(grads[0], s.seqlen_q, s.heads_q);
    p.dk = view(grads[1], s.seqlen_k, s.heads_kv);
    p.dv = view(grads[2], s.seqlen_k, s.heads_kv);
    p.scale = case_.scale;
    p.mask = case_.mask;
    p.variants = variants_of(case_, st.slopes.host.data());
    p.backend = Backend::reference;
    flashattn::backward(p);
    oracle.dq.assign(grads[0].begin(), grads[0].end());
    oracle.dk.assign(grads[1].begin(), grads[1].end());
    oracle.dv.assign(grads[2].begin(), grads[2].end());
  }
  const HostGradients standard = standard_backward_in_dtype(host, case_.dtype);
  const HostGradients flash = exact_backward_from_stored_output(host, case_.dtype);
  auto baseline = [&](const std::vector<double>& x, const std::vector<double>& y,
                      const std::vector<double>& ref) {
    return std::max(rel_error(x, ref), rel_error(y, ref));
  };
  GradAccuracy acc;
  acc.dq = score(values(st.dq, case_.dtype), oracle.dq, baseline(standard.dq, flash.dq, oracle.dq),
                 norm(independent.dq_mag), case_.dtype);
  acc.dk = score(values(st.dk, case_.dtype), oracle.dk, baseline(standard.dk, flash.dk, oracle.dk),
                 norm(independent.dk_mag), case_.dtype);
  acc.dv = score(values(st.dv, case_.dtype), oracle.dv, baseline(standard.dv, flash.dv, oracle.dv),
                 norm(independent.dv_mag), case_.dtype);
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
