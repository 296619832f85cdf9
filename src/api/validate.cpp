#include "api/validate.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "core/error.h"

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

ByteRange byte_range(const Named& v) {
  const TensorView& t = v.t;
  const auto base = reinterpret_cast<uintptr_t>(t.data);
  if (!has_elements(t)) return {base, base};
  int64_t last_elem = 0, extent = 0, bytes = 0;
  for (int d = 0; d < 4; ++d) {
    require(!__builtin_mul_overflow(t.shape[d] - 1, t.stride[d], &extent) &&
                !__builtin_add_overflow(last_elem, extent, &last_elem),
            v.name, ": shape × strides overflow 64-bit offsets");
  }
  require(!__builtin_mul_overflow(last_elem + 1, int64_t(dtype_size(t.dtype)), &bytes) &&
              base + uint64_t(bytes) >= base,
          v.name, ": shape × strides run past the end of the address space");
  return {base, base + uintptr_t(bytes)};
}

bool overlaps(ByteRange a, ByteRange b) { return a.first < b.last && b.first < a.last; }

}  // namespace

bool has_elements(const TensorView& t) {
  return t.shape[0] > 0 && t.shape[1] > 0 && t.shape[2] > 0 && t.shape[3] > 0;
}

AttnParams make_attn_params(const Params& p) {
  const Named q{"q", p.q}, k{"k", p.k}, v{"v", p.v}, out{"out", p.out};
  for (const Named& t : {q, k, v, out}) check_view(t);

  for (const Named& t : {k, v, out}) {
    require(t.t.dtype == p.q.dtype, t.name, ": dtype ", to_string(t.t.dtype),
            " differs from q's dtype ", to_string(p.q.dtype));
    require(t.t.device.kind == p.q.device.kind &&
                (t.t.device.kind == DeviceKind::cpu || t.t.device.index == p.q.device.index),
            t.name, ": device differs from q's device");
  }
  require_dim(k, 0, q, 0);
  require_dim(k, 3, q, 3);
  for (int d = 0; d < 4; ++d) require_dim(v, d, k, d);
  for (int d = 0; d < 4; ++d) require_dim(out, d, q, d);
  require(p.q.shape[2] % p.k.shape[2] == 0, "q: heads (", p.q.shape[2],
          ") must be a multiple of k's heads (", p.k.shape[2], ")");
  require(p.mask == Mask::none || p.mask == Mask::causal_top_left ||
              p.mask == Mask::causal_bottom_right,
          "mask: is not one of none, causal_top_left, causal_bottom_right");

  require_no_self_overlap(out);
  const ByteRange out_bytes = byte_range(out);
  for (const Named& t : {q, k, v})
    require(!overlaps(out_bytes, byte_range(t)), "out: memory overlaps ", t.name);

  const AttnParams a = attn_params(p);
  if (p.lse != nullptr) {
    const auto first = reinterpret_cast<uintptr_t>(p.lse);
    const ByteRange lse_bytes{first, first + uintptr_t(a.sizes.batch) * a.sizes.heads_q *
                                                 a.sizes.seqlen_q * sizeof(float)};
    for (const Named& t : {q, k, v, out})
      require(!overlaps(lse_bytes, byte_range(t)), "lse: memory overlaps ", t.name);
  }
  require(std::isfinite(a.softmax.scale), "scale: is ", a.softmax.scale, ", must be finite");
  return a;
}

}  // namespace flashattn
