// flashattn: exact attention, softmax(Q·Kᵀ·scale)·V, computed without materialising
// the seqlen_q × seqlen_k score matrix.
//
// Tensors are views in the (batch, seqlen, heads, head_dim) layout with strides in
// elements; head_dim must be contiguous (stride 1). One call:
//
//   flashattn::Params p;
//   p.q = q; p.k = k; p.v = v; p.out = out;   // TensorView
//   p.mask = flashattn::Mask::causal_bottom_right;
//   flashattn::forward(p);                   // throws flashattn::Error on bad input
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace flashattn {

enum class DType { f32, f16, bf16 };
enum class DeviceKind { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;  // CUDA ordinal; ignored on the CPU
};

// A strided 4-d view: shape and strides are (batch, seqlen, heads, head_dim).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t shape[4] = {0, 0, 0, 0};
  int64_t stride[4] = {0, 0, 0, 0};
  Device device{};
};

// A contiguous (batch, seqlen, heads, head_dim) view of `data`.
TensorView contiguous_view(void* data, DType dtype, int64_t batch, int64_t seqlen,
                           int64_t heads, int64_t head_dim, Device device = {});

// Which keys a query row may see. With off = 0 (top-left, PyTorch's is_causal) or
// off = seqlen_k - seqlen_q (bottom-right, FlashAttention >= 2.1), key j is visible
// to query i iff j <= i + off. Bottom-right rows with i + off < 0 see no key: their
// output is 0 and their lse is -inf.
enum class Mask { none, causal_top_left, causal_bottom_right };

enum class Backend {
  automatic,  // chosen from the device, dtype and GPU architecture
  reference,  // CPU, float64, materialised scores: the test oracle
  cpu,        // CPU, tiled online softmax, multi-threaded
  cuda_naive, // one thread per query row
  cuda_tiled, // FlashAttention-1 style shared-memory tiles, any head_dim
  cuda_tf32x3,  // fp32 only: tensor cores at fp32 accuracy (3×TF32 split), sm_80+
  cuda_mma,     // f16/bf16 only, head_dim <= 512: tensor cores (mma.sync), sm_80+
  cuda_wgmma,   // f16/bf16 only, head_dim <= 256, Hopper (sm_90) only: TMA, wgmma, warp specialisation
  cuda_f16x3,   // fp32 only, head_dim <= 1024: fp32 accuracy from 3 fp16 mma.sync per product
                // on a scaled hi/lo split, sm_80+
};

struct Params {
  TensorView q, k, v, out;
  // Optional log-sum-exp of the scaled scores per row: float32, contiguous
  // (batch, heads_q, seqlen_q), on the same device as out. Natural log.
  float* lse = nullptr;
  std::optional<float> scale;  // default 1/sqrt(head_dim)
  Mask mask = Mask::none;
  void* stream = nullptr;  // cudaStream_t for CUDA tensors; nullptr is the default stream
  Backend backend = Backend::automatic;
};

enum class Status {
  ok = 0,
  invalid_argument = 1,
  unsupported = 2,
  cuda_error = 3,
  internal = 4,
};

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

// Checks every argument, then runs attention. Throws Error; nothing is written to
// out or lse when an argument is rejected.
void forward(const Params& params);

// The backend `forward` would run for these params (after validation).
Backend select_backend(const Params& params);

std::string_view to_string(Backend backend);
std::string_view to_string(DType dtype);
std::optional<Backend> backend_from_string(std::string_view name);
std::optional<DType> dtype_from_string(std::string_view name);
size_t dtype_size(DType dtype);

// Whether `backend` takes tensors of `dtype` and this head_dim (cuda_tf32x3 is
// fp32 only; cuda_f16x3 is fp32 only, with head_dim <= 1024; cuda_mma is f16/bf16
// only, with head_dim <= 512; cuda_wgmma is
// f16/bf16 only, with head_dim <= 256, and needs a Hopper GPU and TMA-describable
// strides besides).
bool backend_supports(Backend backend, DType dtype, int head_dim = 1);

// Backends compiled into this build that can run on tensors of `device`.
std::vector<Backend> available_backends(DeviceKind device);

// Number of CUDA devices visible to this build (0 without CUDA support or GPU).
int cuda_device_count();

}  // namespace flashattn
