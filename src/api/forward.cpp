// forward(): validation, backend choice (the registry), launch; and the public
// helpers around them.
#include <algorithm>

#include "api/device_check.h"
#include "api/registry.h"
#include "api/validate.h"
#include "core/error.h"
#include "cpu/backends.h"
#include "cuda/backends.h"

namespace flashattn {
namespace {

struct Plan {
  const BackendEntry* backend;
  DeviceKind device;
  AttnParams attn;
};

// Validates everything (arguments, device, backend) before any work.
Plan plan(const Params& p) {
  AttnParams attn = make_attn_params(p);
  const DeviceKind device = p.q.device.kind;
  if (device == DeviceKind::cuda)
    check_cuda_device(p.q.device.index, {{"q", p.q.data, has_elements(p.q)},
                                         {"k", p.k.data, has_elements(p.k)},
                                         {"v", p.v.data, has_elements(p.v)},
                                         {"out", p.out.data, has_elements(p.out)},
                                         {"lse", p.lse, p.lse && has_elements(p.q)},
                                         {"variants.alibi_slopes", p.variants.alibi_slopes,
                                          p.variants.alibi_slopes != nullptr},
                                         {"variants.bias", p.variants.bias.data,
                                          p.variants.bias.data != nullptr && has_elements(p.q) &&
                                              p.k.shape[1] > 0},
                                         {"sequences.cu_seqlens_q", p.sequences.cu_seqlens_q,
                                          attn.seqs.packed()},
                                         {"sequences.cu_seqlens_k", p.sequences.cu_seqlens_k,
                                          attn.seqs.packed()},
                                         {"kv_cache.seqlens", p.kv_cache.seqlens,
                                          attn.seqs.cache.present() && p.q.shape[0] > 0},
                                         {"kv_cache.block_table", p.kv_cache.block_table,
                                          attn.seqs.cache.paged() && p.q.shape[0] > 0},
                                         {"kv_cache.k_new", p.kv_cache.k_new.data,
                                          attn.new_keys.rows > 0 && has_elements(p.kv_cache.k_new)},
                                         {"kv_cache.v_new", p.kv_cache.v_new.data,
                                          attn.new_keys.rows > 0 && has_elements(p.kv_cache.v_new)}});
  read_sequences(attn, p.sequences, device);
  read_kv_cache(attn, device);
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
  return backend_supports(backend, dtype, head_dim, head_dim);
}

bool backend_supports(Backend backend, DType dtype, int head_dim, int head_dim_v) {
  if (backend == Backend::automatic) return true;
  const BackendEntry* entry = find_backend(backend);
  return entry != nullptr && entry->info.takes(dtype) &&
         entry->info.takes_head_dims(head_dim, head_dim_v);
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
  const bool rows = s.batch > 0 && s.seqlen_q > 0;
  // A KV cache's new keys go into it first, whether or not any row attends,
  // unless the forward's own kernel writes them as it reads them.
  if (pl.attn.new_keys.rows > 0 && s.batch > 0) {
    if (pl.device == DeviceKind::cpu) cpu::append_to_cache(pl.attn);
    else if (!rows || !cuda::forward_appends(pl.backend->forward, pl.attn))
      cuda::append_to_cache(pl.attn);
  }
  if (!rows) return;  // no row to write: nothing runs
  if (pl.device == DeviceKind::cuda) cuda::run_forward(pl.backend->forward, pl.attn);
  else pl.backend->forward(pl.attn);
}

std::vector<double> reference_rows(const Params& params, const std::vector<int>& rows,
                                   std::vector<double>* lse) {
  const AttnParams attn = make_attn_params(params);
  require(params.q.device.kind == DeviceKind::cpu,
          "q: reference_rows reads host tensors, but q is on cuda");
  require(!attn.seqs.ragged(), "sequences: reference_rows takes dense batches without a KV cache only");
  for (int r : rows)
    require(r >= 0 && r < attn.sizes.seqlen_q, "rows: row ", r, " is outside [0, ",
            attn.sizes.seqlen_q, ")");
  return cpu::reference_rows(attn, rows, lse);
}

}  // namespace flashattn
