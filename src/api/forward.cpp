// forward(): validation, backend choice, launch.
#include <algorithm>
#include <array>
#include <cmath>

#include "api/fail.h"
#include "api/validate.h"
#include "cpu/backends.h"
#include "cuda/backends.h"

namespace flashattn {
namespace {

enum class Dtypes { all, f32_only, half_only };

struct BackendInfo {
  Backend backend;
  std::string_view name;
  DeviceKind device;
  Dtypes dtypes;
  int max_head_dim;  // 0: any
  int capability;    // 0: any GPU of kMinCapability or newer; else only this one
};

constexpr std::array<BackendInfo, 8> kBackends = {{
    {Backend::reference, "reference", DeviceKind::cpu, Dtypes::all, 0, 0},
    {Backend::cpu, "cpu", DeviceKind::cpu, Dtypes::all, 0, 0},
    {Backend::cuda_naive, "cuda_naive", DeviceKind::cuda, Dtypes::all, 0, 0},
    {Backend::cuda_tiled, "cuda_tiled", DeviceKind::cuda, Dtypes::all, 0, 0},
    {Backend::cuda_tf32x3, "cuda_tf32x3", DeviceKind::cuda, Dtypes::f32_only, 0, 0},
    {Backend::cuda_f16x3, "cuda_f16x3", DeviceKind::cuda, Dtypes::f32_only, cuda::kF16x3MaxHeadDim,
     0},
    {Backend::cuda_mma, "cuda_mma", DeviceKind::cuda, Dtypes::half_only, cuda::kMmaMaxHeadDim, 0},
    {Backend::cuda_wgmma, "cuda_wgmma", DeviceKind::cuda, Dtypes::half_only, cuda::kWgmmaMaxHeadDim,
     90},
}};

bool takes(const BackendInfo& info, DType dtype) {
  switch (info.dtypes) {
    case Dtypes::all: return true;
    case Dtypes::f32_only: return dtype == DType::f32;
    case Dtypes::half_only: return dtype != DType::f32;
  }
  return false;
}

const BackendInfo* find(Backend b) {
  for (const auto& info : kBackends)
    if (info.backend == b) return &info;
  return nullptr;
}

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
  cuda::require_device_pointer(p.q.data, index, "q");
  cuda::require_device_pointer(p.k.data, index, "k");
  cuda::require_device_pointer(p.v.data, index, "v");
  cuda::require_device_pointer(p.out.data, index, "out");
  if (p.lse) cuda::require_device_pointer(p.lse, index, "lse");
}

}  // namespace

std::string_view to_string(Backend backend) {
  if (backend == Backend::automatic) return "auto";
  const BackendInfo* info = find(backend);
  return info ? info->name : "unknown";
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
  for (const auto& info : kBackends)
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
  const BackendInfo* info = find(backend);
  return info != nullptr && takes(*info, dtype) &&
         (info->max_head_dim == 0 || head_dim <= info->max_head_dim);
}

std::vector<Backend> available_backends(DeviceKind device) {
  std::vector<Backend> out;
  if (device == DeviceKind::cuda && cuda::device_count() == 0) return out;
  for (const auto& info : kBackends)
    if (info.device == device &&
        (info.capability == 0 || cuda::compute_capability(0) == info.capability))
      out.push_back(info.backend);
  return out;
}

namespace {

struct Plan {
  Backend backend;
  AttnParams attn;
};

// Validates everything (arguments, device, backend) before any work.
Plan plan(const Params& p) {
  require(p.mask == Mask::none || p.mask == Mask::causal_top_left ||
              p.mask == Mask::causal_bottom_right,
          "mask: is not one of none, causal_top_left, causal_bottom_right");
  Plan out{p.backend, make_attn_params(p)};
  const DeviceKind device = p.q.device.kind;
  if (device == DeviceKind::cuda) check_cuda_device(p);
  if (p.backend == Backend::automatic) {
    // On the GPU, fp32 problems small enough to be all latency on cuda_tiled's
    // one-pass path (cuda::tiny_fits), larger ones on tensor cores: the scaled
    // fp16 split where it pays (cuda::f16x3_preferred), else the 3×TF32 split;
    // 16-bit through wgmma on Hopper where its head_dim and stride rules hold,
    // else mma.sync up to its head_dim limit, the tiled kernel beyond it.
    if (device == DeviceKind::cpu) out.backend = Backend::cpu;
    else if (p.q.dtype == DType::f32)
      out.backend = cuda::tiny_fits(out.attn)               ? Backend::cuda_tiled
                    : cuda::f16x3_preferred(out.attn.sizes) ? Backend::cuda_f16x3
                                                            : Backend::cuda_tf32x3;
    else if (backend_supports(Backend::cuda_wgmma, p.q.dtype, out.attn.sizes.head_dim) &&
             cuda::wgmma_unsupported(out.attn).empty())
      out.backend = Backend::cuda_wgmma;
    else if (backend_supports(Backend::cuda_mma, p.q.dtype, out.attn.sizes.head_dim))
      out.backend = Backend::cuda_mma;
    else out.backend = Backend::cuda_tiled;
    return out;
  }
  const BackendInfo* info = find(p.backend);
  require(info != nullptr, "backend: is not a known backend");
  if (info->device != device)
    fail(Status::unsupported, "backend: ", info->name, " runs on ",
         info->device == DeviceKind::cpu ? "cpu" : "cuda", " tensors, but q is on ",
         device == DeviceKind::cpu ? "cpu" : "cuda");
  if (!takes(*info, p.q.dtype))
    fail(Status::unsupported, "backend: ", info->name, " takes ",
         info->dtypes == Dtypes::f32_only ? "f32" : "f16 or bf16", " tensors only, but q is ",
         to_string(p.q.dtype));
  if (info->max_head_dim != 0 && out.attn.sizes.head_dim > info->max_head_dim)
    fail(Status::unsupported, "q: head_dim ", out.attn.sizes.head_dim, " exceeds ", info->name,
         "'s limit of ", info->max_head_dim, " (backend auto runs it on ",
         info->dtypes == Dtypes::f32_only                ? "cuda_tf32x3"
         : info->max_head_dim < cuda::kMmaMaxHeadDim ? "cuda_mma"
                                                     : "cuda_tiled",
         ")");
  if (p.backend == Backend::cuda_wgmma) {
    const std::string why = cuda::wgmma_unsupported(out.attn);
    if (!why.empty()) fail(Status::unsupported, why, " (backend auto runs it on cuda_mma)");
  }
  return out;
}

}  // namespace

Backend select_backend(const Params& p) { return plan(p).backend; }

void forward(const Params& params) {
  const Plan pl = plan(params);
  switch (pl.backend) {
    case Backend::reference: cpu::reference_forward(pl.attn); break;
    case Backend::cpu: cpu::flash_forward(pl.attn); break;
    case Backend::cuda_naive: cuda::naive_forward(pl.attn); break;
    case Backend::cuda_tiled: cuda::tiled_forward(pl.attn); break;
    case Backend::cuda_tf32x3: cuda::tf32x3_forward(pl.attn); break;
    case Backend::cuda_f16x3: cuda::f16x3_forward(pl.attn); break;
    case Backend::cuda_mma: cuda::mma_forward(pl.attn); break;
    case Backend::cuda_wgmma: cuda::wgmma_forward(pl.attn); break;
    case Backend::automatic: fail(Status::internal, "backend: automatic was not resolved");
  }
}

}  // namespace flashattn
