#include "api/validate.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"
#include "cuda/device.h"

namespace flashattn {
namespace {

constexpr const char* kDims[4] = {"batch", "seqlen", "heads", "head_dim"};

struct Named {
  const char* name;
  const TensorView& t;
};

// Batch and seqlen may be 0 (an empty problem); heads and head_dim may not: a
// tensor of no heads or no columns has no attention to compute.
void check_view(const Named& v) {
  for (int d = 0; d < 4; ++d) {
    const int64_t least = d < 2 ? 0 : 1;
    require(v.t.shape[d] >= least, v.name, ": ", kDims[d], " is ", v.t.shape[d], ", must be >= ",
            least);
    require(v.t.shape[d] <= INT_MAX, v.name, ": ", kDims[d], " is ", v.t.shape[d],
            ", must be <= ", INT_MAX);
    require(v.t.stride[d] >= 0, v.name, ": ", kDims[d], " stride is ", v.t.stride[d],
            ", must be >= 0");
  }
  require(v.t.data != nullptr || !has_elements(v.t), v.name,
          ": data pointer is null, which only a tensor with no elements may have");
  require(v.t.stride[3] == 1 || v.t.shape[3] == 1, v.name, ": head_dim stride is ",
          v.t.stride[3], ", must be 1 (head_dim contiguous)");
  require(v.t.dtype == DType::f32 || v.t.dtype == DType::f16 || v.t.dtype == DType::bf16,
          v.name, ": dtype is not one of f32, f16, bf16");
  require(v.t.device.kind == DeviceKind::cpu || v.t.device.kind == DeviceKind::cuda, v.name,
          ": device kind is not cpu or cuda");
}

void require_dim(const Named& a, int dim, const Named& b, int b_dim) {
  require(a.t.shape[dim] == b.t.shape[b_dim], a.name, ": ", kDims[dim], " is ", a.t.shape[dim],
          ", must equal ", b.name, "'s ", kDims[b_dim], " (", b.t.shape[b_dim], ")");
}

// An output's elements must be distinct memory: along each dimension of more
// than one element, the stride must step past everything the dimensions of
// smaller stride span (so rows, heads and batches never land on each other; a
// stride of 0 writes every index to one place).
void require_no_self_overlap(const Named& v) {
  if (!has_elements(v.t)) return;
  // The dimensions of more than one element, by increasing stride (insertion sort).
  int dims[4], n = 0;
  for (int d = 0; d < 4; ++d) {
    if (v.t.shape[d] <= 1) continue;
    int at = n++;
    for (; at > 0 && v.t.stride[dims[at - 1]] > v.t.stride[d]; --at) dims[at] = dims[at - 1];
    dims[at] = d;
  }
  int64_t span = 0;  // elements the dimensions so far reach past their first
  for (int i = 0; i < n; ++i) {
    const int d = dims[i];
    require(v.t.stride[d] > span, v.name, ": ", kDims[d], " stride is ", v.t.stride[d],
            ", which makes elements overlap (an output's ", kDims[d],
            " stride must be at least ", span + 1, ", past what its smaller strides span)");
    span += (v.t.shape[d] - 1) * v.t.stride[d];
  }
}

// Half-open byte range [first, last) that a view can touch; empty for a view
// without elements.
struct ByteRange {
  uintptr_t first, last;
};

// The bytes of 4-d elements of `element_size` bytes at data with shape and
// strides (elements); `name` heads the errors.
ByteRange span(const char* name, const void* data, const int64_t (&shape)[4],
               const int64_t (&stride)[4], int64_t element_size) {
  const auto base = reinterpret_cast<uintptr_t>(data);
  for (int d = 0; d < 4; ++d)
    if (shape[d] <= 0) return {base, base};
  int64_t last_elem = 0, extent = 0, bytes = 0;
  for (int d = 0; d < 4; ++d) {
    require(!__builtin_mul_overflow(shape[d] - 1, stride[d], &extent) &&
                !__builtin_add_overflow(last_elem, extent, &last_elem),
            name, ": shape × strides overflow 64-bit offsets");
  }
  require(!__builtin_mul_overflow(last_elem + 1, element_size, &bytes) &&
              base + uint64_t(bytes) >= base,
          name, ": shape × strides run past the end of the address space");
  return {base, base + uintptr_t(bytes)};
}

ByteRange byte_range(const Named& v) {
  return span(v.name, v.t.data, v.t.shape, v.t.stride, int64_t(dtype_size(v.t.dtype)));
}

bool overlaps(ByteRange a, ByteRange b) { return a.first < b.last && b.first < a.last; }

constexpr const char* kBiasDims[4] = {"batch", "heads", "seqlen_q", "seqlen_k"};

// The bias's shape (batch or 1, heads_q or 1, seqlen_q, seqlen_k), strides
// >= 0, a known element type and data aligned to it (check_variants rejects a
// zero scale, which its raw form divides by, core/variant.h). Dense batches
// only: a packed batch or a KV cache has no (batch, seqlen_q, seqlen_k) grid.
// Returns the bytes it spans (empty without a bias).
ByteRange check_bias(const ScoreBias& b, const AttnParams& a) {
  if (b.data == nullptr) return {0, 0};
  require(b.type == BiasType::f32 || b.type == BiasType::f16 || b.type == BiasType::bf16 ||
              b.type == BiasType::boolean,
          "variants.bias.type: is not one of f32, f16, bf16, boolean");
  require(!a.seqs.packed(), "variants.bias: a variable-length batch takes no bias or mask tensor",
          " (its sequences have no common (seqlen_q, seqlen_k) grid)");
  require(!a.seqs.cache.present(), "variants.bias: a KV-cache call takes no bias or mask tensor");
  const Sizes& s = a.sizes;
  const int64_t full[4] = {s.batch, s.heads_q, s.seqlen_q, s.seqlen_k};
  for (int d = 0; d < 4; ++d) {
    require(b.shape[d] == full[d] || (d < 2 && b.shape[d] == 1), "variants.bias: ", kBiasDims[d],
            " is ", b.shape[d], ", must be ", full[d], d < 2 ? " or 1 (broadcast)" : "");
    require(b.stride[d] >= 0, "variants.bias: ", kBiasDims[d], " stride is ", b.stride[d],
            ", must be >= 0");
  }
  const BiasParams bp = bias_params(b);
  const int64_t strides[4] = {bp.batch_stride, bp.head_stride, bp.row_stride, bp.key_stride};
  require(reinterpret_cast<uintptr_t>(b.data) % uintptr_t(bias_type_size(b.type)) == 0,
          "variants.bias: data is not aligned to its element size");
  return span("variants.bias", b.data, b.shape, strides, bias_type_size(b.type));
}

}  // namespace

bool has_elements(const TensorView& t) {
  return t.shape[0] > 0 && t.shape[1] > 0 && t.shape[2] > 0 && t.shape[3] > 0;
}

void check_dropout_p(float p) {
  require(std::isfinite(p) && p >= 0.0f && p <= 1.0f, "variants.dropout.p: is ", p,
          ", must be in [0, 1] (0: none)");
}

namespace {

// t's dtype and device are like's.
void require_dtype_and_device(const Named& t, const Named& like) {
  require(t.t.dtype == like.t.dtype, t.name, ": dtype ", to_string(t.t.dtype), " differs from ",
          like.name, "'s dtype ", to_string(like.t.dtype));
  require(t.t.device.kind == like.t.device.kind &&
              (t.t.device.kind == DeviceKind::cpu || t.t.device.index == like.t.device.index),
          t.name, ": device differs from ", like.name, "'s device");
}

// The forward's problem: q, k, v and an output (out) of q's shape but for its
// head_dim, which is v's; each view valid, their dtypes, devices and shapes
// agreeing, and the mask a known rule. A paged cache's k and v hold pages, not
// sequences: their batch is free.
void check_problem(const Named& q, const Named& k, const Named& v, const Named& out, Mask mask,
                   bool k_batch_is_q_batch = true) {
  for (const Named& t : {q, k, v, out}) check_view(t);
  for (const Named& t : {k, v, out}) require_dtype_and_device(t, q);
  if (k_batch_is_q_batch) require_dim(k, 0, q, 0);
  require_dim(k, 3, q, 3);
  // v's head_dim (head_dim_v) may differ from q's and k's: out takes v's.
  for (int d = 0; d < 3; ++d) require_dim(v, d, k, d);
  for (int d = 0; d < 3; ++d) require_dim(out, d, q, d);
  require_dim(out, 3, v, 3);
  require(q.t.shape[2] % k.t.shape[2] == 0, "q: heads (", q.t.shape[2],
          ") must be a multiple of k's heads (", k.t.shape[2], ")");
  require(mask == Mask::none || mask == Mask::causal_top_left || mask == Mask::causal_bottom_right,
          "mask: is not one of none, causal_top_left, causal_bottom_right");
}

// The variants: window sides of -1 (open) or more, a finite softcap >= 0, and a
// nonzero scale where a score variant needs one (core/variant.h divides by it).
void check_variants(const Variants& v, const AttnParams& a) {
  require(v.window_left >= -1, "variants.window_left: is ", v.window_left,
          ", must be >= -1 (-1: no left end)");
  require(v.window_right >= -1, "variants.window_right: is ", v.window_right,
          ", must be >= -1 (-1: no right end)");
  require(std::isfinite(v.softcap) && v.softcap >= 0.0f, "variants.softcap: is ", v.softcap,
          ", must be finite and >= 0 (0: none)");
  check_dropout_p(v.dropout.p);
  require(!a.dropout.on() || !a.seqs.cache.present(),
          "variants.dropout: a KV-cache call takes no dropout (inference; dropout is training's)");
  require(!a.scores.any() || a.softmax.scale != 0.0f,
          "scale: is 0, which softcap, ALiBi and a bias or mask do not take (their raw scores",
          " divide by it)");
}

// A variable-length batch's arguments that need no read of its prefix sums:
// both arrays or neither, a batch count, and tensors of one batch index.
void check_packing(const Sequences& s, const Named& q) {
  if (s.cu_seqlens_q == nullptr && s.cu_seqlens_k == nullptr) return;
  require(s.cu_seqlens_q != nullptr, "sequences.cu_seqlens_q: is null, but cu_seqlens_k is set",
          " (a variable-length batch needs both)");
  require(s.cu_seqlens_k != nullptr, "sequences.cu_seqlens_k: is null, but cu_seqlens_q is set",
          " (a variable-length batch needs both)");
  require(s.batch >= 0 && s.batch < INT_MAX, "sequences.batch: is ", s.batch,
          ", must be >= 0 and < ", INT_MAX);
  for (const auto& [name, given] : {std::pair{"sequences.max_seqlen_q", s.max_seqlen_q},
                                    std::pair{"sequences.max_seqlen_k", s.max_seqlen_k}})
    require(given >= -1, name, ": is ", given, ", must be >= 0, or -1 (not given)");
  require(q.t.shape[0] == 1, "q: batch is ", q.t.shape[0],
          "; a variable-length batch packs its sequences along seqlen, in batch 1");
}

// A tensor of like's shape, dtype and device.
void check_like(const Named& t, const Named& like) {
  check_view(t);
  require_dtype_and_device(t, like);
  for (int d = 0; d < 4; ++d) require_dim(t, d, like, d);
}

// A KV cache's arguments that need no read of its arrays: the layout (a dense
// batch of queries; paged: pages per sequence), the keys and values to append
// (k's and v's heads and head dims, q's batch, within the capacity, in memory of their
// own), and the split count. Appending writes the cache, so the cache must
// then be distinct memory that q does not share.
void check_kv_cache(const KVCache& c, const Sequences& seqs, const Named& q, const Named& k,
                    const Named& v) {
  if (c.seqlens == nullptr) {
    require(c.block_table == nullptr, "kv_cache.block_table: is set, but kv_cache.seqlens is null");
    require(c.k_new.data == nullptr && c.v_new.data == nullptr,
            "kv_cache.k_new: is set, but kv_cache.seqlens is null");
    return;
  }
  require(seqs.cu_seqlens_q == nullptr && seqs.cu_seqlens_k == nullptr,
          "sequences: a KV-cache call takes a dense batch of queries, not a variable-length one");
  int64_t capacity = k.t.shape[1];
  if (c.block_table != nullptr) {
    require(c.pages_per_sequence >= 1, "kv_cache.pages_per_sequence: is ", c.pages_per_sequence,
            ", must be >= 1 with a block table");
    capacity *= c.pages_per_sequence;
    require(capacity <= INT_MAX, "kv_cache.pages_per_sequence: ", c.pages_per_sequence,
            " pages of ", k.t.shape[1], " keys exceed ", INT_MAX, " keys per sequence");
  }
  require(c.key_splits >= 0 && c.key_splits <= 128, "kv_cache.key_splits: is ", c.key_splits,
          ", must be in [0, 128] (0: automatic)");
  require((c.k_new.data == nullptr) == (c.v_new.data == nullptr),
          c.k_new.data ? "kv_cache.v_new: is null, but k_new is set (appending needs both)"
                       : "kv_cache.k_new: is null, but v_new is set (appending needs both)");
  if (c.k_new.data == nullptr) return;
  const Named k_new{"kv_cache.k_new", c.k_new}, v_new{"kv_cache.v_new", c.v_new};
  check_view(k_new);
  require_dtype_and_device(k_new, q);
  require_dim(k_new, 0, q, 0);
  require_dim(k_new, 2, k, 2);
  require_dim(k_new, 3, k, 3);
  check_view(v_new);
  require_dtype_and_device(v_new, q);
  for (int d = 0; d < 2; ++d) require_dim(v_new, d, k_new, d);
  for (int d = 2; d < 4; ++d) require_dim(v_new, d, v, d);
  require(k_new.t.shape[1] <= capacity, k_new.name, ": seqlen is ", k_new.t.shape[1],
          ", more than the cache holds per sequence (", capacity, ")");
  for (const Named& cache : {k, v}) require_no_self_overlap(cache);
  require(!overlaps(byte_range(k), byte_range(v)), "v: memory overlaps k (the call writes both)");
  for (const Named& cache : {k, v})
    for (const Named& t : {q, k_new, v_new})
      require(!overlaps(byte_range(cache), byte_range(t)), cache.name, ": memory overlaps ",
              t.name, " (the call writes the cache)");
}

// The bytes of an lse array of float32 at lse: (batch, heads_q, seqlen_q), or
// packed (heads_q, total_q).
ByteRange lse_range(const void* lse, const AttnParams& p) {
  const Sizes s = storage_sizes(p);
  const auto first = reinterpret_cast<uintptr_t>(lse);
  return {first, first + uintptr_t(s.batch) * s.heads_q * s.seqlen_q * sizeof(float)};
}

// The prefix sums sequences.`name` (batch + 1 entries): 0 first, nondecreasing,
// `total` last; returns the longest sequence, which the caller's max_seqlen
// (`given`, -1: not given) must reach.
int check_prefix_sums(const char* name, const std::vector<int32_t>& cu, int64_t total,
                      const char* tensor, const char* max_name, int64_t given) {
  require(cu[0] == 0, "sequences.", name, ": entry 0 is ", cu[0], ", must be 0");
  size_t longest = 0;
  for (size_t b = 1; b < cu.size(); ++b) {
    require(cu[b] >= cu[b - 1], "sequences.", name, ": entry ", b, " (", cu[b],
            ") is less than entry ", b - 1, " (", cu[b - 1], "); prefix sums must be nondecreasing");
    if (cu[b] - cu[b - 1] > cu[longest + 1] - cu[longest]) longest = b - 1;
  }
  require(cu.back() == total, "sequences.", name, ": last entry is ", cu.back(), ", must equal ",
          tensor, "'s seqlen (", total, "), the tokens of every sequence");
  const int length = cu.size() > 1 ? cu[longest + 1] - cu[longest] : 0;
  require(given < 0 || given >= length, "sequences.", max_name, ": is ", given,
          ", less than the longest sequence in ", name, " (sequence ", longest, ": ", length,
          " = ", name, "[", longest + 1, "] - ", name, "[", longest, "])");
  return length;
}

}  // namespace

AttnParams make_attn_params(const Params& p) {
  const Named q{"q", p.q}, k{"k", p.k}, v{"v", p.v}, out{"out", p.out};
  check_problem(q, k, v, out, p.mask, p.kv_cache.block_table == nullptr);
  check_kv_cache(p.kv_cache, p.sequences, q, k, v);

  require_no_self_overlap(out);
  const ByteRange out_bytes = byte_range(out);
  for (const Named& t : {q, k, v})
    require(!overlaps(out_bytes, byte_range(t)), "out: memory overlaps ", t.name);

  check_packing(p.sequences, q);
  const AttnParams a = attn_params(p);
  if (p.lse != nullptr) {
    const ByteRange lse_bytes = lse_range(p.lse, a);
    for (const Named& t : {q, k, v, out})
      require(!overlaps(lse_bytes, byte_range(t)), "lse: memory overlaps ", t.name);
  }
  require(std::isfinite(a.softmax.scale), "scale: is ", a.softmax.scale, ", must be finite");
  check_variants(p.variants, a);
  const ByteRange bias_bytes = check_bias(p.variants.bias, a);
  require(!overlaps(byte_range(out), bias_bytes), "out: memory overlaps variants.bias");
  if (p.lse != nullptr)
    require(!overlaps(lse_range(p.lse, a), bias_bytes), "lse: memory overlaps variants.bias");
  return a;
}

BwdParams make_bwd_params(const BackwardParams& p) {
  const Named q{"q", p.q}, k{"k", p.k}, v{"v", p.v}, out{"out", p.out}, dout{"dout", p.dout};
  const Named dq{"dq", p.dq}, dk{"dk", p.dk}, dv{"dv", p.dv};
  check_problem(q, k, v, out, p.mask);
  check_like(dout, out);
  check_like(dq, q);
  check_like(dk, k);
  check_like(dv, v);
  check_packing(p.sequences, q);

  const BwdParams a = bwd_params(p);
  require(p.lse != nullptr || !has_elements(p.q),
          "lse: is null; the backward needs the forward's lse (batch, heads_q, seqlen_q)");
  const ByteRange lse_bytes = lse_range(p.lse, a);
  for (const Named& g : {dq, dk, dv}) {
    require_no_self_overlap(g);
    const ByteRange g_bytes = byte_range(g);
    for (const Named& t : {q, k, v, out, dout})
      require(!overlaps(g_bytes, byte_range(t)), g.name, ": memory overlaps ", t.name);
    require(!overlaps(g_bytes, lse_bytes), g.name, ": memory overlaps lse");
  }
  require(!overlaps(byte_range(dq), byte_range(dk)), "dk: memory overlaps dq");
  require(!overlaps(byte_range(dq), byte_range(dv)), "dv: memory overlaps dq");
  require(!overlaps(byte_range(dk), byte_range(dv)), "dv: memory overlaps dk");
  require(std::isfinite(a.softmax.scale), "scale: is ", a.softmax.scale, ", must be finite");
  check_variants(p.variants, a);
  const ByteRange bias_bytes = check_bias(p.variants.bias, a);
  for (const Named& g : {dq, dk, dv})
    require(!overlaps(byte_range(g), bias_bytes), g.name, ": memory overlaps variants.bias");
  return a;
}

void read_kv_cache(AttnParams& a, DeviceKind device) {
  KeyCache& c = a.seqs.cache;
  if (!c.present() || !c.checked) return;
  const Sizes& s = a.sizes;
  std::vector<int32_t> seqlens(size_t(s.batch));
  std::vector<int32_t> table(c.paged() ? size_t(s.batch) * c.pages_per_sequence : 0);
  if (device == DeviceKind::cuda) {
    const cuda::HostCopy lengths{seqlens.data(), c.seqlens, seqlens.size() * sizeof(int32_t)};
    if (c.paged())
      cuda::copy_to_host({lengths, {table.data(), c.block_table, table.size() * sizeof(int32_t)}},
                         a.device_index, a.stream);
    else
      cuda::copy_to_host({lengths}, a.device_index, a.stream);
  } else {
    std::copy(c.seqlens, c.seqlens + seqlens.size(), seqlens.begin());
    if (c.paged()) std::copy(c.block_table, c.block_table + table.size(), table.begin());
  }
  int longest = 0;
  for (int b = 0; b < s.batch; ++b) {
    require(seqlens[b] >= 0 && int64_t(seqlens[b]) + c.appended <= c.capacity,
            "kv_cache.seqlens: entry ", b, " is ", seqlens[b], ", must be >= 0 and, with the ",
            c.appended, " keys appended, at most the capacity (", c.capacity, ")");
    const int length = seqlens[b] + c.appended;
    longest = std::max(longest, length);
    if (!c.paged()) continue;
    for (int page = 0; page < (length + c.page_size - 1) / c.page_size; ++page) {
      const int32_t index = table[size_t(b) * c.pages_per_sequence + page];
      require(index >= 0 && index < c.pages, "kv_cache.block_table: entry (", b, ", ", page,
              ") is ", index, ", must name a page of k and v, in [0, ", c.pages, ")");
    }
  }
  a.sizes.seqlen_k = longest;
  a.mask = resolve(a.rule, {s.seqlen_q, longest});
}

void read_sequences(AttnParams& a, const Sequences& s, DeviceKind device) {
  if (!a.seqs.packed()) return;
  a.seqs.checked = s.checked || device != DeviceKind::cuda;
  if (!a.seqs.checked) {
    // No host copy: the grids are sized by the caller's maxima, which the
    // device checks with the rest (cuda/common/packed_check.h). No sequence is
    // longer than its tensor, so a larger maximum only widens the grid.
    struct Bound {
      const char* name;
      int64_t given, total;
      const char* tensor;
    };
    for (const Bound& b : {Bound{"sequences.max_seqlen_q", s.max_seqlen_q, a.seqs.total_q, "q"},
                           Bound{"sequences.max_seqlen_k", s.max_seqlen_k, a.seqs.total_k, "k"}}) {
      require(b.given >= 0, b.name, ": is not given (-1); unchecked prefix sums ",
              "(sequences.checked false) need it, since the grids are sized by it");
      // The one rule the host can see without the sums: rows in the tensor are
      // rows of some sequence.
      require(b.given > 0 || b.total == 0, b.name, ": is 0, but ", b.tensor, " holds ", b.total,
              " rows, so some sequence is longer");
    }
    const SequenceLengths longest{int(std::min(s.max_seqlen_q, a.seqs.total_q)),
                                  int(std::min(s.max_seqlen_k, a.seqs.total_k))};
    a.sizes.seqlen_q = longest.seqlen_q;
    a.sizes.seqlen_k = longest.seqlen_k;
    a.mask = resolve(a.rule, longest);
    return;
  }
  std::vector<int32_t> cu_q(size_t(s.batch) + 1), cu_k(size_t(s.batch) + 1);
  const unsigned long bytes = cu_q.size() * sizeof(int32_t);
  if (device == DeviceKind::cuda) {
    cuda::copy_to_host({{cu_q.data(), s.cu_seqlens_q, bytes}, {cu_k.data(), s.cu_seqlens_k, bytes}},
                       a.device_index, a.stream);
  } else {
    std::copy(s.cu_seqlens_q, s.cu_seqlens_q + cu_q.size(), cu_q.begin());
    std::copy(s.cu_seqlens_k, s.cu_seqlens_k + cu_k.size(), cu_k.begin());
  }
  const SequenceLengths longest{
      check_prefix_sums("cu_seqlens_q", cu_q, a.seqs.total_q, "q", "max_seqlen_q", s.max_seqlen_q),
      check_prefix_sums("cu_seqlens_k", cu_k, a.seqs.total_k, "k", "max_seqlen_k", s.max_seqlen_k)};
  a.sizes.seqlen_q = longest.seqlen_q;
  a.sizes.seqlen_k = longest.seqlen_k;
  a.mask = resolve(a.rule, longest);
}

}  // namespace flashattn
