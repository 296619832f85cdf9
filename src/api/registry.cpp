#include "api/registry.h"

#include <vector>

#include "core/error.h"
#include "cpu/backends.h"
#include "cuda/backends.h"

namespace flashattn {
namespace {

constexpr uint32_t bit(DType d) { return 1u << int(d); }
constexpr uint32_t kAll = bit(DType::f32) | bit(DType::f16) | bit(DType::bf16);
constexpr uint32_t kF32 = bit(DType::f32);
constexpr uint32_t kHalf = bit(DType::f16) | bit(DType::bf16);

// In enum order. Head-dim limits come from the kernels' own constants.
const std::vector<BackendEntry>& table() {
  static const std::vector<BackendEntry> entries = {
      {{Backend::reference, "reference", DeviceKind::cpu, kAll, 0, 0,
        "float64 with each score row materialised: the oracle the tests compare with", 0, true,
        true, true, true, true, true},
       cpu::reference_forward, cpu::reference_backward},
      {{Backend::cpu, "cpu", DeviceKind::cpu, kAll, 0, 0,
        "tiled online softmax in fp32 on vector matrix kernels (AVX-512, AVX2 or baseline, chosen at run time), threads over (batch, head, query tile)", 0, true, true, true, true, true, true},
       cpu::flash_forward, cpu::flash_backward},
      {{Backend::cuda_naive, "cuda_naive", DeviceKind::cuda, kAll, 0, 0,
        "one thread per query row, scores recomputed: simple enough to be obviously right", -1,
        true, true, true, false, true},
       cuda::naive_forward},
      {{Backend::cuda_tiled, "cuda_tiled", DeviceKind::cuda, kAll, 0, 0,
        "FlashAttention-1 style shared-memory tiles in fp32, any head_dim; tiny fp32 "
        "problems in one round of loads", 0, true, true, false, true, true, true},
       cuda::tiled_forward, cuda::tiled_backward},
      {{Backend::cuda_tf32x3, "cuda_tf32x3", DeviceKind::cuda, kF32, 0, 0,
        "tensor cores at fp32 accuracy through a 3xTF32 split (mma.sync)"},
       cuda::tf32x3_forward},
      {{Backend::cuda_mma, "cuda_mma", DeviceKind::cuda, kHalf, cuda::kMmaMaxHeadDim, 0,
        "FlashAttention-2 style tensor-core kernel on mma.sync; KV-cache decode with split-KV and "
        "a GQA group's query heads in one tile", cuda::kMmaBackwardMaxHeadDim, true, true, true,
        true, true, true},
       cuda::mma_forward, cuda::mma_backward},
      {{Backend::cuda_wgmma, "cuda_wgmma", DeviceKind::cuda, kHalf, cuda::kWgmmaMaxHeadDim, 90,
        "Hopper: TMA into an mbarrier ring, wgmma, warp specialisation; head_dim a multiple "
        "of 8 and 16-byte strides", cuda::kWgmmaBackwardMaxHeadDim, true, false, false, true,
        true, true},
       cuda::wgmma_forward, cuda::wgmma_backward},
      {{Backend::cuda_f16x3, "cuda_f16x3", DeviceKind::cuda, kF32, cuda::kF16x3MaxHeadDim, 0,
        "fp32 accuracy from three fp16 mma.sync per product on a scaled hi/lo split"},
       cuda::f16x3_forward},
  };
  return entries;
}

// Whether automatic runs fp32 on cuda_f16x3 rather than cuda_tf32x3. cuda_f16x3
// splits K and V once per call, in a kernel and a scratch buffer of its own, and
// that pays where enough query rows read each key (rows times the GQA group):
// up to head_dim 128, four 64-row query tiles (below, the ~10 µs of host time it
// adds exceeded its gain on the H100: equal at 200 rows); above, where
// cuda_tf32x3 recomputes the scores for each 128-column slice of the output, two
// 32-row tiles (on the H100 at head_dim 256 to 1024, cuda_f16x3 took 1.3–1.5×
// cuda_tf32x3's time at 32 rows and 0.4–0.8× at 100).
bool f16x3_preferred(const Sizes& s) {
  const int64_t rows = int64_t(s.seqlen_q) * s.group();
  if (s.head_dim <= 128) return rows >= 256;
  return s.head_dim <= cuda::kF16x3MaxHeadDim && rows >= 64;
}

bool takes_head_dims(const BackendInfo& info, const Sizes& s, bool backward = false) {
  return backward ? info.takes_backward_head_dims(s.head_dim, s.head_dim_v)
                  : info.takes_head_dims(s.head_dim, s.head_dim_v);
}

// Why info's forward (or backward) cannot take s's head dims; empty where it can.
std::string head_dims_unsupported(const BackendInfo& info, const Sizes& s, bool backward) {
  if (takes_head_dims(info, s, backward)) return {};
  const std::string name = std::string(info.name) + (backward ? "'s backward" : "");
  if (s.head_dim_v != s.head_dim &&
      !(backward ? info.takes_backward_head_dim_v : info.takes_head_dim_v))
    return "v: head_dim " + std::to_string(s.head_dim_v) + " differs from q's and k's (" +
           std::to_string(s.head_dim) + "), which " + name + " does not take";
  const int limit = backward ? info.backward_max_head_dim : info.max_head_dim;
  const std::string which = s.head_dim >= s.head_dim_v ? "q" : "v";
  return which + ": head_dim " + std::to_string(s.widest_head_dim()) +
         (backward ? " exceeds the limit of " + name + ", " + std::to_string(limit)
                   : " exceeds " + name + "'s limit of " + std::to_string(limit));
}

std::string_view device_name(DeviceKind d) { return d == DeviceKind::cpu ? "cpu" : "cuda"; }

// A variable-length batch's forward on the GPU: the backends that take one
// (their table rows say). 16-bit: on wgmma where its rules hold (Hopper,
// head_dim and strides, no bias or dropout), else on mma.sync up to its
// head_dim limit; cuda_tiled otherwise. (The backward's policy is the dense
// one: every backend it picks takes packed batches.)
Backend packed_backend(const AttnParams& p) {
  if (p.dtype == DType::f32) return Backend::cuda_tiled;
  if (takes_head_dims(find_backend(Backend::cuda_wgmma)->info, p.sizes) &&
      cuda::wgmma_unsupported(p).empty())
    return Backend::cuda_wgmma;
  const bool fits = takes_head_dims(find_backend(Backend::cuda_mma)->info, p.sizes);
  return fits ? Backend::cuda_mma : Backend::cuda_tiled;
}

// A KV cache: on the GPU, 16-bit on cuda_mma (its decode kernel) up to its
// head_dim limit (v's head_dim other than q's: contiguous caches only, on its
// forward kernel); otherwise contiguous on cuda_tiled, paged on cuda_naive. On
// the host: cpu, contiguous or paged.
Backend cache_backend(const AttnParams& p, DeviceKind device) {
  if (device == DeviceKind::cpu) return Backend::cpu;
  const bool paged = p.seqs.cache.paged();
  const int decode_limit = paged || !p.seqs.cache.checked ? cuda::kMmaDecodeMaxHeadDim
                                                          : cuda::kMmaMaxHeadDim;
  const bool one_head_dim = p.sizes.head_dim_v == p.sizes.head_dim;
  if (p.dtype != DType::f32 && p.sizes.widest_head_dim() <= decode_limit && (one_head_dim || !paged))
    return Backend::cuda_mma;
  return paged ? Backend::cuda_naive : Backend::cuda_tiled;
}

}  // namespace

const std::vector<BackendInfo>& backends() {
  static const std::vector<BackendInfo> infos = [] {
    std::vector<BackendInfo> out;
    for (const BackendEntry& e : table()) out.push_back(e.info);
    return out;
  }();
  return infos;
}

const BackendEntry* find_backend(Backend backend) {
  for (const BackendEntry& e : table())
    if (e.info.backend == backend) return &e;
  return nullptr;
}

std::string dtype_list(const BackendInfo& info) {
  std::vector<std::string_view> names;
  for (DType d : {DType::f32, DType::f16, DType::bf16})
    if (info.takes(d)) names.push_back(to_string(d));
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += std::string(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
  return out;
}

// The policy. Host tensors: cpu. fp32 on the GPU: problems small enough to be
// all latency on cuda_tiled's one-pass path (cuda::tiny_fits), larger ones on
// tensor cores: the scaled fp16 split where it pays (f16x3_preferred), else the
// 3×TF32 split. 16-bit: wgmma on Hopper where its head_dim and stride rules
// hold, else mma.sync up to its head_dim limit, cuda_tiled beyond it.
Backend automatic_backend(const AttnParams& p, DeviceKind device) {
  if (p.seqs.cache.present()) return cache_backend(p, device);
  if (device == DeviceKind::cpu) return Backend::cpu;
  if (p.seqs.packed()) return packed_backend(p);
  if (p.dtype == DType::f32)
    return cuda::tiny_fits(p) || p.sizes.head_dim_v != p.sizes.head_dim ? Backend::cuda_tiled
           : f16x3_preferred(p.sizes)                                 ? Backend::cuda_f16x3
                                                                      : Backend::cuda_tf32x3;
  if (takes_head_dims(find_backend(Backend::cuda_wgmma)->info, p.sizes) &&
      cuda::wgmma_unsupported(p).empty())
    return Backend::cuda_wgmma;
  if (takes_head_dims(find_backend(Backend::cuda_mma)->info, p.sizes)) return Backend::cuda_mma;
  return Backend::cuda_tiled;
}

// The backward's policy. Host tensors: cpu. fp32 on the GPU: cuda_tiled (exact,
// any head_dim). 16-bit: wgmma on Hopper where its head_dim and stride rules
// hold, else the mma.sync backward up to its head_dim limit, cuda_tiled beyond it.
Backend automatic_backward_backend(const BwdParams& p, DeviceKind device) {
  if (device == DeviceKind::cpu) return Backend::cpu;
  if (p.dtype == DType::f32) return Backend::cuda_tiled;
  if (takes_head_dims(find_backend(Backend::cuda_wgmma)->info, p.sizes, true) &&
      cuda::wgmma_backward_unsupported(p).empty())
    return Backend::cuda_wgmma;
  if (takes_head_dims(find_backend(Backend::cuda_mma)->info, p.sizes, true))
    return Backend::cuda_mma;
  return Backend::cuda_tiled;
}

namespace {

std::string no_sequences(const BackendInfo& info, const char* pass = "") {
  return "sequences: " + std::string(info.name) + pass + " does not take variable-length batches";
}

// Why `info` cannot run p's KV cache; empty where it can.
std::string cache_unsupported(const BackendInfo& info, const AttnParams& p) {
  const KeyCache& c = p.seqs.cache;
  if (!c.present()) return {};
  if (!info.takes_kv_cache)
    return "kv_cache: " + std::string(info.name) + " does not take KV-cache calls";
  if (c.paged() && !info.takes_paged_kv)
    return "kv_cache.block_table: " + std::string(info.name) + " does not take paged caches";
  if (!c.checked && info.backend != Backend::cuda_mma)
    return "kv_cache.checked: false (device-side checks) is taken by cuda_mma only, not " +
           std::string(info.name);
  if (info.backend == Backend::cuda_mma && (c.paged() || !c.checked) &&
      p.sizes.head_dim_v != p.sizes.head_dim)
    return "v: head_dim " + std::to_string(p.sizes.head_dim_v) + " differs from q's and k's (" +
           std::to_string(p.sizes.head_dim) + "), which cuda_mma's decode kernel, which paged "
           "and unchecked caches take, does not take";
  if (info.backend == Backend::cuda_mma && (c.paged() || !c.checked) &&
      p.sizes.widest_head_dim() > cuda::kMmaDecodeMaxHeadDim)
    return "q: head_dim " + std::to_string(p.sizes.widest_head_dim()) +
           " exceeds the limit of cuda_mma's decode kernel, which paged and unchecked caches "
           "take, " + std::to_string(cuda::kMmaDecodeMaxHeadDim);
  return {};
}

}  // namespace

std::string backward_unsupported(Backend backend, const BwdParams& p, DeviceKind device) {
  const BackendEntry* entry = find_backend(backend);
  if (entry == nullptr) return "backend: is not a known backend";
  const BackendInfo& info = entry->info;
  const auto instead = [&] {
    return " (backend auto runs it on " +
           std::string(to_string(automatic_backward_backend(p, device))) + ")";
  };
  if (info.device != device)
    return "backend: " + std::string(info.name) + " runs on " + std::string(device_name(info.device)) +
           " tensors, but q is on " + std::string(device_name(device));
  if (!info.has_backward()) return "backend: " + std::string(info.name) + " has no backward" + instead();
  if (!info.takes(p.dtype))
    return "backend: " + std::string(info.name) + " takes " + dtype_list(info) +
           " tensors only, but q is " + std::string(to_string(p.dtype)) + instead();
  if (const std::string why = head_dims_unsupported(info, p.sizes, true); !why.empty())
    return why + instead();
  if (p.seqs.packed() && !info.takes_backward_sequences)
    return no_sequences(info, "'s backward") + instead();
  const Sizes& s = p.sizes;
  if (backend == Backend::cuda_wgmma && s.batch > 0 && s.seqlen_q > 0 && s.seqlen_k > 0) {
    const std::string why = cuda::wgmma_backward_unsupported(p);
    if (!why.empty()) return why + instead();
  }
  return {};
}

std::string unsupported(Backend backend, const AttnParams& p, DeviceKind device) {
  const BackendEntry* entry = find_backend(backend);
  if (entry == nullptr) return "backend: is not a known backend";
  const BackendInfo& info = entry->info;
  // Asked only when the backend cannot run p: it may query the device.
  const auto instead = [&] {
    return " (backend auto runs it on " + std::string(to_string(automatic_backend(p, device))) + ")";
  };
  if (info.device != device)
    return "backend: " + std::string(info.name) + " runs on " + std::string(device_name(info.device)) +
           " tensors, but q is on " + std::string(device_name(device));
  if (!info.takes(p.dtype))
    return "backend: " + std::string(info.name) + " takes " + dtype_list(info) +
           " tensors only, but q is " + std::string(to_string(p.dtype)) + instead();
  if (const std::string why = head_dims_unsupported(info, p.sizes, false); !why.empty())
    return why + instead();
  if (p.seqs.packed() && !info.takes_sequences) return no_sequences(info) + instead();
  if (const std::string why = cache_unsupported(info, p); !why.empty()) return why + instead();
  // cuda_wgmma's layout rules (TMA-describable strides) concern its kernel; a
  // problem without work runs no kernel of it.
  const Sizes& s = p.sizes;
  if (backend == Backend::cuda_wgmma && s.batch > 0 && s.seqlen_q > 0 && s.seqlen_k > 0) {
    const std::string why = cuda::wgmma_unsupported(p);
    if (!why.empty()) return why + instead();
  }
  return {};
}

}  // namespace flashattn
