// forward(): validation, backend choice (the registry), launch; and the public
// helpers around them.
#include <algorithm>

#include "api/registry.h"
#include "api/validate.h"
#include "core/error.h"
#include "cpu/backends.h"
#include "cuda/backends.h"

namespace flashattn {
namespace {

// The lowest compute capability our CUDA kernels are built for.
constexpr int kMinCapability = 80;

void check_cuda_device(const Params& p) {
  const int index = p.q.device.index;
  const int count = cuda::device_count();
  if (count == 0) fail(Status::unsupported, "q: device is cuda but no CUDA device is available");
  require(index >= 0 && index < count, "q: cuda device index ", index, " is out of range [0, ",
          count, ")");
  const int cc = cuda::compute_capability(index);
  if (cc < kMinCapability)
    fail(Status::unsupported, "q: cuda device ", index, " has compute capability ", cc / 10, ".",
         cc % 10, "; flashattn's CUDA kernels need 8.0 or newer");
  const struct {
    const TensorView& t;
    const char* name;
  } tensors[] = {{p.q, "q"}, {p.k, "k"}, {p.v, "v"}, {p.out, "out"}};
  for (const auto& [t, name] : tensors)
    if (has_elements(t)) cuda::require_device_pointer(t.data, index, name);
  if (p.lse && has_elements(p.q)) cuda::require_device_pointer(p.lse, index, "lse");
}

struct Plan {
  const BackendEntry* backend;
  DeviceKind device;
  AttnParams attn;
};

// Validates everything (arguments, device, backend) before any work.
Plan plan(const Params& p) {
  const AttnParams attn = make_attn_params(p);
  const DeviceKind device = p.q.device.kind;
  if (device == DeviceKind::cuda) check_cuda_device(p);
  const Backend backend =
      p.backend == Backend::automatic ? automatic_backend(attn, device) : p.backend;
  const std::string why = unsupported(backend, attn, device);
  if (!why.empty())
    fail(find_backend(backend) == nullptr ? Status::invalid_argument : Status::unsupported, why);
  return {find_backend(backend), device, attn};
}

}  // namespace

std::string_view to_string(Backend backend) {
  if (backend == Backend::automatic) return "auto";
  const BackendEntry* entry = find_backend(backend);
  return entry ? entry->info.name : "unknown";
}

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "unknown";
}

std::optional<Backend> backend_from_string(std::string_view name) {
  if (name == "auto") return Backend::automatic;
  for (const BackendInfo& info : backends())
    if (info.name == name) return info.backend;
  return std::nullopt;
}

std::optional<DType> dtype_from_string(std::string_view name) {
  for (DType d : {DType::f32, DType::f16, DType::bf16})
    if (to_string(d) == name) return d;
  if (name == "float32" || name == "fp32") return DType::f32;
  if (name == "float16" || name == "fp16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  return std::nullopt;
}

size_t dtype_size(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

TensorView contiguous_view(void* data, DType dtype, int64_t batch, int64_t seqlen, int64_t heads,
                           int64_t head_dim, Device device) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  const int64_t shape[4] = {batch, seqlen, heads, head_dim};
  const int64_t stride[4] = {seqlen * heads * head_dim, heads * head_dim, head_dim, 1};
  std::copy(shape, shape + 4, t.shape);
  std::copy(stride, stride + 4, t.stride);
  return t;
}

int cuda_device_count() { return cuda::device_count(); }

bool backend_supports(Backend backend, DType dtype, int head_dim) {
  if (backend == Backend::automatic) return true;
  const BackendEntry* entry = find_backend(backend);
  return entry != nullptr && entry->info.takes(dtype) && entry->info.takes_head_dim(head_dim);
}

std::vector<Backend> available_backends(DeviceKind device) {
  std::vector<Backend> out;
  if (device == DeviceKind::cuda && cuda::device_count() == 0) return out;
  for (const BackendInfo& info : backends())
    if (info.device == device &&
        (info.compute_capability == 0 || cuda::compute_capability(0) == info.compute_capability))
      out.push_back(info.backend);
  return out;
}

Backend select_backend(const Params& p) { return plan(p).backend->info.backend; }

void forward(const Params& params) {
  const Plan pl = plan(params);
  const Sizes& s = pl.attn.sizes;
  if (s.batch == 0 || s.seqlen_q == 0) return;  // no row to write: nothing runs
  if (pl.device == DeviceKind::cuda) cuda::run_forward(pl.backend->forward, pl.attn);
  else pl.backend->forward(pl.attn);
}

std::vector<double> reference_rows(const Params& params, const std::vector<int>& rows,
                                   std::vector<double>* lse) {
  const AttnParams attn = make_attn_params(params);
  require(params.q.device.kind == DeviceKind::cpu,
          "q: reference_rows reads host tensors, but q is on cuda");
  for (int r : rows)
    require(r >= 0 && r < attn.sizes.seqlen_q, "rows: row ", r, " is outside [0, ",
            attn.sizes.seqlen_q, ")");
  return cpu::reference_rows(attn, rows, lse);
}

}  // namespace flashattn
