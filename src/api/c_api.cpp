// The C ABI: converts flashattn_params to Params and every exception to a code.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "api/registry.h"
#include "core/error.h"
#include "flashattn/flashattn.h"
#include "flashattn/flashattn.hpp"

namespace {

thread_local std::string g_last_error;

flashattn::TensorView to_view(const flashattn_tensor& t, const char* name) {
  using flashattn::require;
  require(t.dtype >= FLASHATTN_F32 && t.dtype <= FLASHATTN_BF16, name, ": dtype ", t.dtype,
          " is not one of FLASHATTN_F32, FLASHATTN_F16, FLASHATTN_BF16");
  require(t.device == FLASHATTN_CPU || t.device == FLASHATTN_CUDA, name, ": device ", t.device,
          " is not FLASHATTN_CPU or FLASHATTN_CUDA");
  flashattn::TensorView v;
  v.data = t.data;
  v.dtype = static_cast<flashattn::DType>(t.dtype);
  v.device = {t.device == FLASHATTN_CUDA ? flashattn::DeviceKind::cuda : flashattn::DeviceKind::cpu,
              t.device_index};
  for (int d = 0; d < 4; ++d) {
    v.shape[d] = t.shape[d];
    v.stride[d] = t.strides[d];
  }
  return v;
}

flashattn::Mask to_mask(int32_t mask) {
  flashattn::require(mask >= FLASHATTN_MASK_NONE && mask <= FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT,
                     "mask: ", mask, " is not a flashattn_mask value");
  return static_cast<flashattn::Mask>(mask);
}

flashattn::Backend to_backend(int32_t backend) {
  flashattn::require(backend == FLASHATTN_BACKEND_AUTO ||
                         flashattn::find_backend(static_cast<flashattn::Backend>(backend)) != nullptr,
                     "backend: ", backend, " is not a flashattn_backend value");
  return static_cast<flashattn::Backend>(backend);
}

// The first generation of flashattn_variants ends at alibi_slopes.
constexpr size_t kVariantsV1 = offsetof(flashattn_variants, alibi_slopes) + sizeof(const float*);

flashattn::Variants to_variants(const flashattn_variants* caller) {
  using flashattn::require;
  if (caller == nullptr) return {};
  require(caller->struct_size >= kVariantsV1, "variants: struct_size is ", caller->struct_size,
          ", must be at least ", kVariantsV1, " (start from flashattn_variants_defaults())");
  flashattn_variants c = flashattn_variants_defaults();
  std::memcpy(&c, caller, std::min<size_t>(caller->struct_size, sizeof c));
  flashattn::Variants v;
  v.window_left = c.window_left;
  v.window_right = c.window_right;
  v.softcap = c.softcap;
  v.alibi_slopes = c.alibi_slopes;
  v.dropout = {c.dropout_p, c.dropout_seed, c.dropout_offset};
  if (c.bias != nullptr) {
    require(c.bias_type >= FLASHATTN_BIAS_F32 && c.bias_type <= FLASHATTN_BIAS_BOOL,
            "variants.bias_type: ", c.bias_type, " is not a flashattn_bias_type value");
    v.bias.data = c.bias;
    v.bias.type = static_cast<flashattn::BiasType>(c.bias_type);
    for (int d = 0; d < 4; ++d) {
      v.bias.shape[d] = c.bias_shape[d];
      v.bias.stride[d] = c.bias_strides[d];
    }
  }
  return v;
}

// The first generation of flashattn_sequences ends at batch.
constexpr size_t kSequencesV1 = offsetof(flashattn_sequences, batch) + sizeof(int32_t);

flashattn::Sequences to_sequences(const flashattn_sequences* caller) {
  using flashattn::require;
  if (caller == nullptr) return {};
  require(caller->struct_size >= kSequencesV1, "sequences: struct_size is ", caller->struct_size,
          ", must be at least ", kSequencesV1, " (start from flashattn_sequences_defaults())");
  flashattn_sequences c = flashattn_sequences_defaults();
  std::memcpy(&c, caller, std::min<size_t>(caller->struct_size, sizeof c));
  return {c.cu_seqlens_q, c.cu_seqlens_k, c.batch, c.max_seqlen_q, c.max_seqlen_k, c.checked != 0};
}

// The first generation of flashattn_kv_cache ends at key_splits.
constexpr size_t kKVCacheV1 = offsetof(flashattn_kv_cache, key_splits) + sizeof(int32_t);

flashattn::KVCache to_kv_cache(const flashattn_kv_cache* caller) {
  using flashattn::require;
  if (caller == nullptr) return {};
  require(caller->struct_size >= kKVCacheV1, "kv_cache: struct_size is ", caller->struct_size,
          ", must be at least ", kKVCacheV1, " (start from flashattn_kv_cache_defaults())");
  flashattn_kv_cache c = flashattn_kv_cache_defaults();
  std::memcpy(&c, caller, std::min<size_t>(caller->struct_size, sizeof c));
  flashattn::KVCache k;
  k.seqlens = c.seqlens;
  if (c.k_new.data != nullptr || c.v_new.data != nullptr) {
    k.k_new = to_view(c.k_new, "kv_cache.k_new");
    k.v_new = to_view(c.v_new, "kv_cache.v_new");
  }
  k.block_table = c.block_table;
  k.pages_per_sequence = c.pages_per_sequence;
  k.checked = c.checked != 0;
  k.key_splits = c.key_splits;
  return k;
}

// The first generation of flashattn_forward_options ends at sequences.
constexpr size_t kForwardOptionsV1 =
    offsetof(flashattn_forward_options, sequences) + sizeof(const flashattn_sequences*);

flashattn::Params to_params(const flashattn_params& c) {
  using flashattn::require;
  flashattn::Params p;
  p.q = to_view(c.q, "q");
  p.k = to_view(c.k, "k");
  p.v = to_view(c.v, "v");
  p.out = to_view(c.out, "out");
  p.lse = c.lse;
  if (c.has_scale) p.scale = c.scale;
  p.mask = to_mask(c.mask);
  p.backend = to_backend(c.backend);
  p.stream = c.stream;
  return p;
}

// The first generation of flashattn_backward_params ends at `stream`; a caller's
// struct_size must cover it. Fields past the caller's size keep their defaults.
constexpr size_t kBackwardParamsV1 =
    offsetof(flashattn_backward_params, stream) + sizeof(void*);

flashattn::BackwardParams to_backward_params(const flashattn_backward_params* caller) {
  using flashattn::require;
  require(caller->struct_size >= kBackwardParamsV1, "params: struct_size is ",
          caller->struct_size, ", must be at least ", kBackwardParamsV1,
          " (start from flashattn_backward_defaults())");
  flashattn_backward_params c = flashattn_backward_defaults();
  std::memcpy(&c, caller, std::min<size_t>(caller->struct_size, sizeof c));
  flashattn::BackwardParams p;
  p.q = to_view(c.q, "q");
  p.k = to_view(c.k, "k");
  p.v = to_view(c.v, "v");
  p.out = to_view(c.out, "out");
  p.dout = to_view(c.dout, "dout");
  p.lse = c.lse;
  p.dq = to_view(c.dq, "dq");
  p.dk = to_view(c.dk, "dk");
  p.dv = to_view(c.dv, "dv");
  if (c.has_scale) p.scale = c.scale;
  p.mask = to_mask(c.mask);
  p.backend = to_backend(c.backend);
  p.deterministic = c.deterministic != 0;
  p.stream = c.stream;
  p.variants = to_variants(c.variants);
  p.sequences = to_sequences(c.sequences);
  return p;
}

// Runs body, turning every exception into a status and flashattn_last_error()'s message.
template <typename Body>
flashattn_status guarded(Body&& body) {
  g_last_error.clear();
  try {
    body();
    return FLASHATTN_OK;
  } catch (const flashattn::Error& e) {
    g_last_error = e.what();
    return static_cast<flashattn_status>(e.status());
  } catch (const std::bad_alloc&) {
    g_last_error = "out of host memory";
    return FLASHATTN_ERR_INTERNAL;
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return FLASHATTN_ERR_INTERNAL;
  }
}

}  // namespace

extern "C" {

flashattn_tensor flashattn_contiguous(void* data, flashattn_dtype dtype, int64_t batch,
                                      int64_t seqlen, int64_t heads, int64_t head_dim,
                                      flashattn_device device, int32_t device_index) {
  flashattn_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.device_index = device_index;
  const int64_t shape[4] = {batch, seqlen, heads, head_dim};
  const int64_t strides[4] = {seqlen * heads * head_dim, heads * head_dim, head_dim, 1};
  for (int d = 0; d < 4; ++d) {
    t.shape[d] = shape[d];
    t.strides[d] = strides[d];
  }
  return t;
}

flashattn_params flashattn_default_params(flashattn_tensor q, flashattn_tensor k,
                                          flashattn_tensor v, flashattn_tensor out) {
  flashattn_params p{};
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = out;
  return p;
}

flashattn_status flashattn_forward(const flashattn_params* params) {
  return guarded([&] {
    flashattn::require(params != nullptr, "params: pointer is null");
    flashattn::forward(to_params(*params));
  });
}

flashattn_status flashattn_forward_variants(const flashattn_params* params,
                                            const flashattn_variants* variants) {
  return guarded([&] {
    flashattn::require(params != nullptr, "params: pointer is null");
    flashattn::Params p = to_params(*params);
    p.variants = to_variants(variants);
    flashattn::forward(p);
  });
}

flashattn_status flashattn_forward_with(const flashattn_params* params,
                                        const flashattn_forward_options* options) {
  return guarded([&] {
    using flashattn::require;
    require(params != nullptr, "params: pointer is null");
    flashattn::Params p = to_params(*params);
    if (options != nullptr) {
      require(options->struct_size >= kForwardOptionsV1, "options: struct_size is ",
              options->struct_size, ", must be at least ", kForwardOptionsV1,
              " (start from flashattn_forward_options_defaults())");
      flashattn_forward_options o = flashattn_forward_options_defaults();
      std::memcpy(&o, options, std::min<size_t>(options->struct_size, sizeof o));
      p.variants = to_variants(o.variants);
      p.sequences = to_sequences(o.sequences);
      p.kv_cache = to_kv_cache(o.kv_cache);
    }
    flashattn::forward(p);
  });
}

flashattn_status flashattn_backward(const flashattn_backward_params* params) {
  return guarded([&] {
    flashattn::require(params != nullptr, "params: pointer is null");
    flashattn::backward(to_backward_params(params));
  });
}

flashattn_status flashattn_dropout_keep_mask(float dropout_p, uint64_t seed, uint64_t offset,
                                             int32_t batch, int32_t heads_q, int32_t seqlen_q,
                                             int32_t seqlen_k, uint8_t* keep) {
  return guarded([&] {
    const std::vector<uint8_t> mask =
        flashattn::dropout_keep_mask({dropout_p, seed, offset}, batch, heads_q, seqlen_q, seqlen_k);
    flashattn::require(keep != nullptr || mask.empty(), "keep: pointer is null");
    std::copy(mask.begin(), mask.end(), keep);
  });
}

int32_t flashattn_backend_count(void) { return int32_t(flashattn::backends().size()); }

flashattn_status flashattn_get_backend_info(int32_t index, flashattn_backend_info* info) {
  return guarded([&] {
    using flashattn::require;
    require(info != nullptr, "info: pointer is null");
    const auto& all = flashattn::backends();
    require(index >= 0 && size_t(index) < all.size(), "index: is ", index, ", must be in [0, ",
            all.size(), ")");
    require(info->struct_size >= sizeof(uint32_t), "info: struct_size is ", info->struct_size,
            ", must be sizeof(flashattn_backend_info)");
    const flashattn::BackendInfo& b = all[size_t(index)];
    flashattn_backend_info full{};
    full.struct_size = info->struct_size;
    full.backend = int32_t(b.backend);
    full.name = b.name.data();
    full.device = b.device == flashattn::DeviceKind::cuda ? FLASHATTN_CUDA : FLASHATTN_CPU;
    full.dtypes = b.dtypes;
    full.max_head_dim = b.max_head_dim;
    full.compute_capability = b.compute_capability;
    full.summary = b.summary.data();
    full.backward_max_head_dim = b.backward_max_head_dim;
    full.takes_sequences = b.takes_sequences ? 1 : 0;
    full.takes_kv_cache = b.takes_kv_cache ? 1 : 0;
    full.takes_paged_kv = b.takes_paged_kv ? 1 : 0;
    full.takes_backward_sequences = b.takes_backward_sequences ? 1 : 0;
    full.takes_head_dim_v = b.takes_head_dim_v ? 1 : 0;
    full.takes_backward_head_dim_v = b.takes_backward_head_dim_v ? 1 : 0;
    std::memcpy(info, &full, std::min<size_t>(info->struct_size, sizeof full));
  });
}

const char* flashattn_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
