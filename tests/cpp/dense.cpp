#include "dense.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "device_memory.h"
#include "grad_problem.h"

namespace flashattn::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<uint8_t> encode(const Dense& t, DType dtype) {
  std::vector<uint8_t> bytes(t.values.size() * dtype_size(dtype));
  for (size_t e = 0; e < t.values.size(); ++e)
    store_float(bytes.data(), dtype, int64_t(e), t.values[e]);
  return bytes;
}

// Host bytes, and on a GPU their device copy: the pointer the library gets.
struct Placed {
  std::vector<uint8_t>& host;
  harness::DeviceBuffer device;

  Placed(std::vector<uint8_t>& bytes, Device where) : host(bytes) {
    if (where.kind != DeviceKind::cuda) return;
    device = harness::DeviceBuffer(bytes.size(), where.index);
    device.upload(bytes.data());
  }
  void* data() { return device.data() ? device.data() : host.data(); }
  void fetch() {
    if (device.data()) device.download(host.data());
  }
};

template <typename E>
std::vector<uint8_t> bytes_of(const std::vector<E>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(E));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// The problem's variants, with its slopes where they were placed.
Variants variants(const DenseProblem& p, Placed& slopes) {
  Variants v;
  v.window_left = p.window_left;
  v.window_right = p.window_right;
  v.softcap = p.softcap;
  if (!p.alibi_slopes.empty()) v.alibi_slopes = static_cast<const float*>(slopes.data());
  return v;
}

}  // namespace

Dense::Dense(int b, int s, int h, int d)
    : batch(b), seqlen(s), heads(h), head_dim(d), values(size_t(b) * s * h * d, 0.0f) {}

float& Dense::at(int b, int s, int h, int c) {
  return values[((size_t(b) * seqlen + s) * heads + h) * head_dim + c];
}
float Dense::at(int b, int s, int h, int c) const {
  return values[((size_t(b) * seqlen + s) * heads + h) * head_dim + c];
}

float DenseResult::lse_at(int b, int h, int i) const {
  return lse[(size_t(b) * out.heads + h) * out.seqlen + i];
}

DeviceKind device_of(Backend backend) {
  for (const BackendInfo& info : backends())
    if (info.backend == backend) return info.device;
  return DeviceKind::cpu;
}

std::vector<std::tuple<Backend, DType>> backend_dtypes() {
  std::vector<std::tuple<Backend, DType>> out;
  for (const BackendInfo& info : backends())
    for (DType d : {DType::f32, DType::f16, DType::bf16})
      if (info.takes(d)) out.emplace_back(info.backend, d);
  return out;
}

std::string backend_dtype_name(const testing::TestParamInfo<std::tuple<Backend, DType>>& info) {
  return std::string(to_string(std::get<0>(info.param))) + "_" +
         std::string(to_string(std::get<1>(info.param)));
}

std::string skip_reason(Backend backend) {
  if (device_of(backend) != DeviceKind::cuda) return {};
  if (cuda_device_count() == 0)
    return "no CUDA device: " + std::string(to_string(backend)) +
           " needs a GPU, and cuda_device_count() is 0 (no GPU or driver, or a build without "
           "CUDA)";
  const std::vector<Backend> here = available_backends(DeviceKind::cuda);
  if (std::find(here.begin(), here.end(), backend) == here.end())
    return std::string(to_string(backend)) + " does not run on this GPU (compute capability)";
  return {};
}

void round_inputs(DenseProblem& problem) {
  for (Dense* t : {&problem.q, &problem.k, &problem.v})
    for (float& x : t->values) x = round_to(problem.dtype, x);
}

DenseResult run_dense(const DenseProblem& p, Backend backend) {
  const Device device{device_of(backend), 0};
  const DType dtype = p.dtype;
  DenseResult result{Dense(p.q.batch, p.q.seqlen, p.q.heads, p.v.head_dim), {}};
  std::fill(result.out.values.begin(), result.out.values.end(), kNaN);
  result.lse.assign(size_t(p.q.batch) * p.q.heads * p.q.seqlen, kNaN);

  std::vector<uint8_t> q = encode(p.q, dtype), k = encode(p.k, dtype), v = encode(p.v, dtype),
                       out = encode(result.out, dtype);
  std::vector<uint8_t> lse(result.lse.size() * sizeof(float));
  std::memcpy(lse.data(), result.lse.data(), lse.size());
  std::vector<uint8_t> slopes = bytes_of(p.alibi_slopes), cu_q = bytes_of(p.cu_seqlens_q),
                       cu_k = bytes_of(p.cu_seqlens_k);
  Placed q_at(q, device), k_at(k, device), v_at(v, device), out_at(out, device),
      lse_at(lse, device), slopes_at(slopes, device), cu_q_at(cu_q, device),
      cu_k_at(cu_k, device);

  auto view = [&](Placed& placed, const Dense& t) {
    return contiguous_view(placed.data(), dtype, t.batch, t.seqlen, t.heads, t.head_dim, device);
  };
  Params params;
  params.q = view(q_at, p.q);
  params.k = view(k_at, p.k);
  params.v = view(v_at, p.v);
  params.out = view(out_at, result.out);
  params.lse = static_cast<float*>(lse_at.data());
  params.scale = p.scale;
  params.mask = p.mask;
  params.variants = variants(p, slopes_at);
  if (!p.cu_seqlens_q.empty())
    params.sequences = {static_cast<const int32_t*>(cu_q_at.data()),
                        static_cast<const int32_t*>(cu_k_at.data()),
                        int(p.cu_seqlens_q.size()) - 1};
  params.backend = backend;
  forward(params);
  if (device.kind == DeviceKind::cuda) harness::device_synchronize(device.index);

  out_at.fetch();
  lse_at.fetch();
  for (size_t e = 0; e < result.out.values.size(); ++e)
    result.out.values[e] = load_float(out.data(), dtype, int64_t(e));
  std::memcpy(result.lse.data(), lse.data(), lse.size());
  return result;
}

DenseGradients run_dense_backward(const DenseProblem& p, const std::vector<float>& dout_values,
                                  Backend backend) {
  const Device device{device_of(backend), 0};
  const DType dtype = p.dtype;
  DenseGradients g{Dense(p.q.batch, p.q.seqlen, p.q.heads, p.q.head_dim),
                   Dense(p.k.batch, p.k.seqlen, p.k.heads, p.k.head_dim),
                   Dense(p.v.batch, p.v.seqlen, p.v.heads, p.v.head_dim)};
  Dense out(p.q.batch, p.q.seqlen, p.q.heads, p.v.head_dim), dout = out;
  dout.values = dout_values;
  for (Dense* t : {&g.dq, &g.dk, &g.dv}) std::fill(t->values.begin(), t->values.end(), kNaN);
  std::vector<uint8_t> q = encode(p.q, dtype), k = encode(p.k, dtype), v = encode(p.v, dtype),
                       o = encode(out, dtype), d_o = encode(dout, dtype), dq = encode(g.dq, dtype),
                       dk = encode(g.dk, dtype), dv = encode(g.dv, dtype);
  std::vector<uint8_t> lse(size_t(p.q.batch) * p.q.heads * p.q.seqlen * sizeof(float));
  std::vector<uint8_t> slopes = bytes_of(p.alibi_slopes), cu_q = bytes_of(p.cu_seqlens_q),
                       cu_k = bytes_of(p.cu_seqlens_k);
  Placed q_at(q, device), k_at(k, device), v_at(v, device), o_at(o, device), do_at(d_o, device),
      dq_at(dq, device), dk_at(dk, device), dv_at(dv, device), lse_at(lse, device),
      slopes_at(slopes, device), cu_q_at(cu_q, device), cu_k_at(cu_k, device);
  auto view = [&](Placed& placed, const Dense& t) {
    return contiguous_view(placed.data(), dtype, t.batch, t.seqlen, t.heads, t.head_dim, device);
  };
  Params fwd;
  fwd.q = view(q_at, p.q);
  fwd.k = view(k_at, p.k);
  fwd.v = view(v_at, p.v);
  fwd.out = view(o_at, out);
  fwd.lse = static_cast<float*>(lse_at.data());
  fwd.scale = p.scale;
  fwd.mask = p.mask;
  fwd.variants = variants(p, slopes_at);
  if (!p.cu_seqlens_q.empty())
    fwd.sequences = {static_cast<const int32_t*>(cu_q_at.data()),
                     static_cast<const int32_t*>(cu_k_at.data()),
                     int(p.cu_seqlens_q.size()) - 1};
  fwd.backend = backend;
  forward(fwd);
  BackwardParams bwd = harness::backward_of(fwd);
  bwd.dout = view(do_at, dout);
  bwd.dq = view(dq_at, g.dq);
  bwd.dk = view(dk_at, g.dk);
  bwd.dv = view(dv_at, g.dv);
  backward(bwd);
  if (device.kind == DeviceKind::cuda) harness::device_synchronize(device.index);
  const struct {
    Placed& placed;
    std::vector<uint8_t>& bytes;
    Dense& t;
  } grads[] = {{dq_at, dq, g.dq}, {dk_at, dk, g.dk}, {dv_at, dv, g.dv}};
  for (const auto& [placed, bytes, t] : grads) {
    placed.fetch();
    for (size_t e = 0; e < t.values.size(); ++e) t.values[e] = load_float(bytes.data(), dtype, int64_t(e));
  }
  return g;
}

}  // namespace flashattn::test
