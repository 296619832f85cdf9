// AttnParams: the one struct that flows from the API to every backend. Built by
// src/api/validate.cpp from checked public arguments (attn_params() below is the
// conversion itself, without the checks); backends trust it and never
// re-validate. Fields come in sub-structs (tensors, sizes, mask, softmax), so a
// new capability adds a sub-struct rather than loose fields.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>

#include "core/dropout.h"
#include "core/host_device.h"
#include "core/mask.h"
#include "core/seqlen.h"
#include "core/variant.h"
#include "flashattn/flashattn.hpp"

namespace flashattn {

// A tensor's base pointer and its (batch, seqlen, head) strides in elements;
// the head_dim stride is 1 by validation.
struct TensorRef {
  void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t row_stride = 0;
  int64_t head_stride = 0;
};

struct Sizes {
  int batch = 0;
  int seqlen_q = 0;
  int seqlen_k = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;    // q's and k's (and dq's, dk's): the width of Q·Kᵀ's products
  int head_dim_v = 0;  // v's and out's (and dv's, dout's): the output's width
  FLASHATTN_HOST_DEVICE int group() const { return heads_q / heads_kv; }  // query heads per kv head (GQA)
  // The wider of the two head dims: what a kernel's head-dim bucket must hold.
  FLASHATTN_HOST_DEVICE int widest_head_dim() const { return head_dim > head_dim_v ? head_dim : head_dim_v; }
};

inline constexpr float kLog2e = 1.4426950408889634f;  // log2(e)
inline constexpr float kLn2 = 0.69314718055994531f;   // ln(2)

// lse·log2(e) as a backward subtracts it, P = 2^(s·c − lse2): +inf for a row of
// lse −inf (one its mask or a bias left without keys), whose P is then 0, not
// 2^(+inf).
FLASHATTN_HOST_DEVICE float backward_lse2(float lse) {
  return lse == -INFINITY ? INFINITY : lse * kLog2e;
}

struct SoftmaxParams {
  float scale = 1.0f;          // multiplies Q·Kᵀ; any finite value
  float scale_log2 = kLog2e;   // scale·log2(e): probabilities are 2^(s·scale_log2 − max)
  float* lse = nullptr;        // optional, contiguous (batch, heads_q, seqlen_q), natural log
};

// Keys and values a KV-cache call appends: (batch, rows, heads_kv, head_dim)
// and (batch, rows, heads_kv, head_dim_v), written into each sequence's cache at its length before the attention runs.
struct NewKeys {
  TensorRef k, v;
  int rows = 0;
};

struct AttnParams {
  TensorRef q, k, v, o;
  Sizes sizes;
  SequenceLayout seqs;  // dense, or packed: where each sequence lies (core/seqlen.h)
  // The mask rule, and the rule resolved for sizes' lengths: in a dense batch
  // every sequence has those, so the rule is resolved once (attn_params()) and
  // kernels read it through row_mask(p, seq) from their parameters, as a
  // constant, not a register. Packed, each sequence resolves the rule for its
  // own lengths, and mask (resolved for the longest) only guides launch choices.
  MaskRule rule{};
  RowMask mask{};
  ScoreParams scores;  // softcap and ALiBi (core/variant.h); the window is in mask
  DropoutParams dropout;  // dropout on the probabilities (core/dropout.h)
  SoftmaxParams softmax;
  NewKeys new_keys;    // a KV cache's appended keys and values (written before the kernels run)
  DType dtype = DType::f32;  // q, k, v and out share it
  int device_index = 0;
  void* stream = nullptr;
};

// The backward's tensors beside the forward's. D_i = Σ_c dO_ic·O_ic is computed
// once per row (each CUDA backward and the CPU backends do it before their key
// loops) into row_dot; every backend then reads it as a constant of the row.
struct GradParams {
  TensorRef dout, dq, dk, dv;  // dout read; dq, dk, dv written (q's, k's, v's shapes)
  const float* lse = nullptr;  // the forward's, read: contiguous (batch, heads_q, seqlen_q)
  float* row_dot = nullptr;    // D: (batch, heads_q, seqlen_q) contiguous, fp32; driver's scratch
  bool deterministic = false;  // a fixed order for every sum that crosses blocks
};

// The backward's params: the forward's problem (q, k, v, o, sizes, mask, scale)
// and the gradients. softmax.lse is null here: the backward reads grad.lse.
struct BwdParams : AttnParams {
  GradParams grad;
};

inline TensorRef tensor_ref(const TensorView& t) {
  return {t.data, t.stride[0], t.stride[1], t.stride[2]};
}

// A bias's strides, 0 on its broadcast dimensions (those of size 1).
inline BiasParams bias_params(const ScoreBias& b) {
  if (b.data == nullptr) return {};
  auto stride = [&](int d) { return b.shape[d] == 1 ? 0 : b.stride[d]; };
  return {b.data, b.type, stride(0), stride(1), stride(2), stride(3), b.shape[2]};
}

// The AttnParams of the problem q, k, v, out, scale and mask describe, unchecked.
inline AttnParams problem_params(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& out, std::optional<float> scale_or_default,
                                 Mask mask, const Variants& variants) {
  AttnParams a;
  a.sizes = {int(q.shape[0]), int(q.shape[1]), int(k.shape[1]),
             int(q.shape[2]), int(k.shape[2]), int(q.shape[3]), int(v.shape[3])};
  a.q = tensor_ref(q);
  a.k = tensor_ref(k);
  a.v = tensor_ref(v);
  a.o = tensor_ref(out);
  a.rule = {mask != Mask::none, mask != Mask::causal_top_left, variants.window_left,
            variants.window_right};
  a.mask = resolve(a.rule, {a.sizes.seqlen_q, a.sizes.seqlen_k});
  a.scores = {variants.softcap, variants.alibi_slopes, bias_params(variants.bias)};
  a.dropout = dropout_params(variants.dropout.p, variants.dropout.seed, variants.dropout.offset);
  const float scale = scale_or_default.value_or(1.0f / std::sqrt(float(a.sizes.head_dim)));
  a.softmax = {scale, scale * kLog2e, nullptr};
  a.dtype = q.dtype;
  a.device_index = q.device.index;
  return a;
}

// p packed as `seqs` says: batch becomes the number of sequences, the
// tensors' lengths their totals and their batch strides 0. The longest
// lengths (sizes.seqlen_q/k) and the mask resolved for them need the prefix
// sums' values: validate.cpp's read_sequences sets them.
inline void pack(AttnParams& p, const Sequences& seqs, std::initializer_list<TensorRef*> tensors) {
  p.seqs = {seqs.cu_seqlens_q, seqs.cu_seqlens_k, p.sizes.seqlen_q, p.sizes.seqlen_k,
            seqs.checked, {}};
  p.sizes.batch = seqs.batch;
  for (TensorRef* t : tensors) t->batch_stride = 0;
}

// p with k and v as the KV cache `c` describes: sequence b's length is read
// from c.seqlens (core/seqlen.h), and until validate.cpp's read_kv_cache reads
// the lengths, the longest one is taken to be the capacity.
inline void attach_cache(AttnParams& p, const KVCache& c, const TensorView& k) {
  KeyCache& kc = p.seqs.cache;
  kc.seqlens = c.seqlens;
  kc.appended = c.k_new.data ? int(c.k_new.shape[1]) : 0;
  kc.block_table = c.block_table;
  kc.pages_per_sequence = c.block_table ? c.pages_per_sequence : 0;
  kc.page_size = c.block_table ? int(k.shape[1]) : 0;
  kc.pages = c.block_table ? k.shape[0] : 0;
  kc.capacity = int(c.block_table ? k.shape[1] * c.pages_per_sequence : k.shape[1]);
  kc.checked = c.checked;
  kc.key_splits = c.key_splits;
  p.sizes.seqlen_k = kc.capacity;
  p.mask = resolve(p.rule, {p.sizes.seqlen_q, kc.capacity});
  if (kc.appended > 0) p.new_keys = {tensor_ref(c.k_new), tensor_ref(c.v_new), kc.appended};
}

// The AttnParams of public Params, unchecked: validate.cpp checks first, tools
// that hold params the library already accepted call it directly.
inline AttnParams attn_params(const Params& p) {
  AttnParams a = problem_params(p.q, p.k, p.v, p.out, p.scale, p.mask, p.variants);
  if (p.sequences.cu_seqlens_q) pack(a, p.sequences, {&a.q, &a.k, &a.v, &a.o});
  if (p.kv_cache.seqlens) attach_cache(a, p.kv_cache, p.k);
  a.softmax.lse = p.lse;
  a.stream = p.stream;
  return a;
}

// The BwdParams of public BackwardParams, unchecked (validate.cpp checks first).
inline BwdParams bwd_params(const BackwardParams& p) {
  BwdParams a;
  static_cast<AttnParams&>(a) = problem_params(p.q, p.k, p.v, p.out, p.scale, p.mask, p.variants);
  a.stream = p.stream;
  a.grad.dout = tensor_ref(p.dout);
  a.grad.dq = tensor_ref(p.dq);
  a.grad.dk = tensor_ref(p.dk);
  a.grad.dv = tensor_ref(p.dv);
  if (p.sequences.cu_seqlens_q)
    pack(a, p.sequences, {&a.q, &a.k, &a.v, &a.o, &a.grad.dout, &a.grad.dq, &a.grad.dk, &a.grad.dv});
  a.grad.lse = p.lse;
  a.grad.deterministic = p.deterministic;
  return a;
}

// Whether p needs the kernels' AnyVariant instantiation (core/variant.h): a
// score variant, dropout, or a window's lower end (packed: in any sequence).
FLASHATTN_HOST_DEVICE bool needs_any_variant(const AttnParams& p) {
  return p.scores.any() || p.dropout.on() || p.mask.bounded_below ||
         (p.seqs.ragged() && p.rule.window_left >= 0);
}

// Calls run(Variant{}) with the instantiation p needs (core/variant.h): Bias
// for a bias or boolean mask, else Dropout for dropout, else Any for the other
// variants, else NoVariant. The 16-bit tensor-core kernels pass AnyVariant16,
// BiasVariant16 and DropoutVariant16; the others take dropout in Any.
template <class Any, class Bias, class Dropout = Any, typename Run>
void with_variant(const AttnParams& p, Run&& run) {
  if (p.scores.bias.data != nullptr) run(Bias{});
  else if (p.dropout.on()) run(Dropout{});
  else if (needs_any_variant(p)) run(Any{});
  else run(NoVariant{});
}

// Where sequence b lies and its lengths (core/seqlen.h).
FLASHATTN_HOST_DEVICE Sequence sequence(const AttnParams& p, int b) {
  if (p.seqs.cache.present())
    return {0, 0, p.sizes.seqlen_q, p.seqs.cache.seqlens[b] + p.seqs.cache.appended};
  if (!p.seqs.packed()) return {0, 0, p.sizes.seqlen_q, p.sizes.seqlen_k};
  const int q0 = p.seqs.cu_seqlens_q[b], k0 = p.seqs.cu_seqlens_k[b];
  return {q0, k0, p.seqs.cu_seqlens_q[b + 1] - q0, p.seqs.cu_seqlens_k[b + 1] - k0};
}

// The key range the rows of sequence seq see. Dense: every sequence has the
// batch's mask, resolved once; packed or a cache: the rule resolved for seq's
// lengths.
FLASHATTN_HOST_DEVICE RowMask row_mask(const AttnParams& p, const Sequence& seq) {
  return p.seqs.ragged() ? resolve(p.rule, seq.lengths()) : p.mask;
}

// The mask of every sequence of a dense batch, for the kernels that take dense
// batches only (their registry rows say takes_sequences = false): read from the
// parameters as a constant.
FLASHATTN_HOST_DEVICE const RowMask& dense_mask(const AttnParams& p) { return p.mask; }

// The element offset of row0 of sequence b (batch index b dense) in t, head 0.
FLASHATTN_HOST_DEVICE int64_t row_offset(const TensorRef& t, int b, int64_t row0) {
  return b * t.batch_stride + row0 * t.row_stride;
}

// The element offset of key j of sequence b in t (k or v), head 0: row
// k_row0 + j of batch b, or in a paged cache row j % page_size of the page the
// block table names for it.
FLASHATTN_HOST_DEVICE int64_t key_offset(const AttnParams& p, const TensorRef& t, int b,
                                         const Sequence& seq, int64_t j) {
  const KeyCache& c = p.seqs.cache;
  if (!c.paged()) return row_offset(t, b, seq.k_row0 + j);
  const int64_t page = c.block_table[int64_t(b) * c.pages_per_sequence + j / c.page_size];
  return page * t.batch_stride + (j % c.page_size) * t.row_stride;
}

// The index in lse (and D) of head hq's first row of sequence b:
// (batch, heads_q, seqlen_q) dense, (heads_q, total_q) packed.
FLASHATTN_HOST_DEVICE int64_t stats_row0(const AttnParams& p, int b, int hq, const Sequence& seq) {
  return p.seqs.packed() ? hq * p.seqs.total_q + seq.q_row0
                         : (int64_t(b) * p.sizes.heads_q + hq) * p.sizes.seqlen_q;
}

// The tensors' own sizes: dense, sizes; packed, one batch index of the total
// lengths (lse's and D's layout is then (1, heads_q, total_q), the dense one).
FLASHATTN_HOST_DEVICE Sizes storage_sizes(const AttnParams& p) {
  if (!p.seqs.packed()) return p.sizes;
  Sizes s = p.sizes;
  s.batch = 1;
  s.seqlen_q = int(p.seqs.total_q);
  s.seqlen_k = int(p.seqs.total_k);
  return s;
}

}  // namespace flashattn
