#include "api/validate.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "api/fail.h"

namespace flashattn {
namespace {

constexpr const char* kDims[4] = {"batch", "seqlen", "heads", "head_dim"};

struct Named {
  const char* name;
  const TensorView& t;
};

void check_view(const Named& v) {
  require(v.t.data != nullptr, v.name, ": data pointer is null");
  for (int d = 0; d < 4; ++d) {
    require(v.t.shape[d] >= 1, v.name, ": ", kDims[d], " is ", v.t.shape[d], ", must be >= 1");
    require(v.t.shape[d] <= INT_MAX, v.name, ": ", kDims[d], " is ", v.t.shape[d],
            ", must be <= ", INT_MAX);
    require(v.t.stride[d] >= 0, v.name, ": ", kDims[d], " stride is ", v.t.stride[d],
            ", must be >= 0");
  }
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

// Half-open byte range [first, last) that a view can touch.
struct ByteRange {
  uintptr_t first, last;
};

ByteRange byte_range(const Named& v) {
  const TensorView& t = v.t;
  int64_t last_elem = 0, extent = 0, bytes = 0;
  for (int d = 0; d < 4; ++d) {
    require(!__builtin_mul_overflow(t.shape[d] - 1, t.stride[d], &extent) &&
                !__builtin_add_overflow(last_elem, extent, &last_elem),
            v.name, ": shape × strides overflow 64-bit offsets");
  }
  const auto base = reinterpret_cast<uintptr_t>(t.data);
  require(!__builtin_mul_overflow(last_elem + 1, int64_t(dtype_size(t.dtype)), &bytes) &&
              base + uint64_t(bytes) >= base,
          v.name, ": shape × strides run past the end of the address space");
  return {base, base + uintptr_t(bytes)};
}

bool overlaps(ByteRange a, ByteRange b) { return a.first < b.last && b.first < a.last; }

TensorRef to_ref(const TensorView& t) { return {t.data, t.stride[0], t.stride[1], t.stride[2]}; }

}  // namespace

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

  const ByteRange out_bytes = byte_range(out);
  for (const Named& t : {q, k, v})
    require(!overlaps(out_bytes, byte_range(t)), "out: memory overlaps ", t.name);

  AttnParams a;
  a.sizes = {int(p.q.shape[0]), int(p.q.shape[1]), int(p.k.shape[1]),
             int(p.q.shape[2]), int(p.k.shape[2]), int(p.q.shape[3])};
  if (p.lse != nullptr) {
    const auto first = reinterpret_cast<uintptr_t>(p.lse);
    const ByteRange lse_bytes{first, first + uintptr_t(a.sizes.batch) * a.sizes.heads_q *
                                                 a.sizes.seqlen_q * sizeof(float)};
    for (const Named& t : {q, k, v, out})
      require(!overlaps(lse_bytes, byte_range(t)), "lse: memory overlaps ", t.name);
  }

  const float scale = p.scale.value_or(1.0f / std::sqrt(float(a.sizes.head_dim)));
  require(std::isfinite(scale) && scale > 0.0f, "scale: is ", scale,
          ", must be finite and > 0");

  a.q = to_ref(p.q);
  a.k = to_ref(p.k);
  a.v = to_ref(p.v);
  a.o = to_ref(p.out);
  a.mask.causal = p.mask != Mask::none;
  a.mask.causal_offset =
      p.mask == Mask::causal_bottom_right ? int64_t(a.sizes.seqlen_k) - a.sizes.seqlen_q : 0;
  a.softmax = {scale, p.lse};
  a.dtype = p.q.dtype;
  a.device_index = p.q.device.index;
  a.stream = p.stream;
  return a;
}

}  // namespace flashattn
