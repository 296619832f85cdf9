// cuda_tiled's path for the smallest fp32 problems (tiny_warp_fits: head_dim
// ≤ 32, at most 32 keys): one warp per query row holds its head's whole K and V
// in registers, so a call is one round of global loads, a few shuffles and a
// store, with no shared memory and no barrier.
//
// Lane (g, c) = (lane / 8, lane % 8) loads float4 column chunk c of keys
// 4i + g, i < 8, of K and of V: each load instruction reads four whole rows, so a
// warp issues 17 loads (Q's chunk, 8 of K, 8 of V) where a lane-per-key layout
// issues 40 and waits about 300 cycles longer for them (docs/perf/cuda_tiled_and_naive.md §v7). The
// eight lanes of a group sum their chunks' products into key 4i + g's score;
// P·V needs no shuffles, since each lane already holds p for the keys whose V
// rows it loaded; the four groups' partial outputs are summed at the end. Keys
// outside the row's mask range (a window's included) are not loaded and score
// −inf; the AnyVariant instantiation applies softcap and ALiBi (core/variant.h)
// to each raw score.
#include <climits>
#include <cmath>

#include "core/dropout.h"
#include "core/mask.h"
#include "core/softmax.h"
#include "core/variant.h"
#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/fp32_tile.cuh"
#include "cuda/common/lanes.cuh"

namespace flashattn::cuda {
namespace {

constexpr int kGroups = 4;                              // keys per load instruction
constexpr int kChunks = 8;                              // float4 chunks per row: head_dim ≤ 32
constexpr int kKeySteps = kTinyWarpMaxKeys / kGroups;  // load instructions per tensor

static_assert(kChunks * 4 == kTinyWarpMaxHeadDim && kGroups * kChunks == 32);
// Lane bits that pick the key group (lanes 8 and 16 apart): reductions across groups.
constexpr unsigned kGroupBits = 31u & ~unsigned(kChunks - 1);

// The kernel's own parameter block: 32-bit offsets (every element of a tiny
// problem is within 2^31 of its tensor's base) and only what the kernel reads.
// Against AttnParams, this takes ~150 of the ~490 cycles before the first load
// issues: fewer constant-bank lines to miss and no 64-bit index arithmetic.
struct WarpTensor {
  float* data;
  int batch_stride, row_stride, head_stride;
};
struct WarpParams {
  WarpTensor q, k, v, o;
  float* lse;
  int heads_q, group;
  int head_dim;
  RowMask mask;      // the batch's one sequence length pair (dense)
  float scale_log2;  // softmax scale · log2(e)
  // Softcap and ALiBi and the scale their functor is built for: read by the
  // AnyVariant instantiation only, so they follow the fields the plain one reads.
  ScoreParams scores;
  float scale;
  DropoutParams dropout;  // core/dropout.h
};

// The first element of head h of batch b (row 0).
__device__ __forceinline__ float* head_ptr(const WarpTensor& t, int b, int h) {
  return t.data + (b * t.batch_stride + h * t.head_stride);
}

// Columns 4c .. 4c + 3 of a row, 0 past head_dim and where !valid (then
// nothing is read). kVec4: the row is 16-byte aligned, head_dim a multiple of 4.
template <bool kVec4>
__device__ __forceinline__ float4 load_chunk(const float* row, int c, int head_dim, bool valid) {
  float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const int col = 4 * c;
  if (kVec4) {
    if (valid && col < head_dim) x = __ldg(reinterpret_cast<const float4*>(row) + c);
  } else if (valid) {
    if (col < head_dim) x.x = __ldg(row + col);
    if (col + 1 < head_dim) x.y = __ldg(row + col + 1);
    if (col + 2 < head_dim) x.z = __ldg(row + col + 2);
    if (col + 3 < head_dim) x.w = __ldg(row + col + 3);
  }
  return x;
}

__device__ __forceinline__ float dot(float4 a, float4 b) {
  return fmaf(a.x, b.x, fmaf(a.y, b.y, fmaf(a.z, b.z, a.w * b.w)));
}

__device__ __forceinline__ void fma4(float s, float4 x, float4& acc) {
  acc.x = fmaf(s, x.x, acc.x), acc.y = fmaf(s, x.y, acc.y);
  acc.z = fmaf(s, x.z, acc.z), acc.w = fmaf(s, x.w, acc.w);
}

// Grid (heads_q, batch, seqlen_q), one warp a block: a block per query row
// spreads the rows over as many SMs as there are rows.
template <class Variant, bool kVec4>
__global__ void __launch_bounds__(32) tiny_warp_kernel(const WarpParams p) {
  const int hq = blockIdx.x, b = blockIdx.y, row = blockIdx.z;
  const int hk = p.group == 1 ? hq : hq / p.group;
  const unsigned lane = threadIdx.x;
  const int g = lane / kChunks, c = lane % kChunks, d = p.head_dim;
  // key_begin is 0 at compile time in the plain kernel, whose rules have no lower end.
  const int key_begin = Variant::kLowerEnds ? p.mask.key_begin(row) : 0;
  const int key_end = p.mask.key_end_small(row);

  // Base pointers once, so that each key's row is one multiply-add away.
  const float* k_head = head_ptr(p.k, b, hk);
  const float* v_head = head_ptr(p.v, b, hk);
  const int k_row_stride = p.k.row_stride, v_row_stride = p.v.row_stride;
  const float4 q = load_chunk<kVec4>(head_ptr(p.q, b, hq) + row * p.q.row_stride, c, d, true);
  float4 k[kKeySteps], v[kKeySteps];
#pragma unroll
  for (int i = 0; i < kKeySteps; ++i) {
    const int key = kGroups * i + g;
    const bool visible = key >= key_begin && key < key_end;
    // Rows past key_end are not read (the loads are predicated off), so their
    // addresses need no clamping, and do not wait for the mask.
    k[i] = load_chunk<kVec4>(k_head + key * k_row_stride, c, d, visible);
    v[i] = load_chunk<kVec4>(v_head + key * v_row_stride, c, d, visible);
  }

  // Scores in log2 units; every lane of group g holds those of keys 4i + g.
  // Each butterfly step runs over all keys before the next, so the shuffles of
  // different keys overlap.
  const auto variant = Variant::score(p.scores, p.scale, b, hq, p.mask.alignment);
  float score[kKeySteps], m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kKeySteps; ++i) score[i] = dot(q, k[i]);
#pragma unroll
  for (int offset = 1; offset < kChunks; offset *= 2)
#pragma unroll
    for (int i = 0; i < kKeySteps; ++i) score[i] += __shfl_xor_sync(0xffffffffu, score[i], offset);
#pragma unroll
  for (int i = 0; i < kKeySteps; ++i) {
    const int key = kGroups * i + g;
    score[i] = key >= key_begin && key < key_end ? variant(score[i], row, key) * p.scale_log2
                                                 : -INFINITY;
    m = fmaxf(m, score[i]);
  }
  m = lanes_max<kGroupBits>(m);

  // A row whose scores are all -inf has m at -inf: subtracting 0 instead
  // (exponent_max) gives p = 2^-inf = 0. (Testing m at each key instead made
  // ptxas sink each key's loads below the previous key's shuffles: a memory
  // round trip per key, +1.4 µs at (17, 96, 3).)
  const float m_safe = exponent_max(m);
  float sum = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  // Dropout (core/dropout.h): a dropped probability is summed but leaves P·V.
  const DropoutRows dropout = dropout_rows(p.dropout, b, p.heads_q, hq);
  const bool drops = Variant::kDropout && p.dropout.on();
#pragma unroll
  for (int i = 0; i < kKeySteps; ++i) {
    const float prob = exp2f(score[i] - m_safe);
    sum += prob;
    const int key = kGroups * i + g;
    fma4(drops && key < key_end && !dropout.keep(row, key) ? 0.0f : prob, v[i], acc);
  }
  sum = lanes_sum<kGroupBits>(sum);
  acc.x = lanes_sum<kGroupBits>(acc.x), acc.y = lanes_sum<kGroupBits>(acc.y);
  acc.z = lanes_sum<kGroupBits>(acc.z), acc.w = lanes_sum<kGroupBits>(acc.w);

  if (g != 0) return;
  // Scores in log2 units: lse = (m + log2 sum)·ln 2 (core/softmax.h). The lse
  // (a logarithm, ~25 dependent instructions) by row_lse after the stores,
  // only where it is stored.
  const bool empty = finished_empty<Variant::Score::kBias>(key_end <= key_begin, sum);
  FinishedRow<float> finished = finish_row(m * kLn2, sum, empty);
  if constexpr (Variant::kDropout) finished.inv_l *= p.dropout.keep_scale;
  float* out = head_ptr(p.o, b, hq) + row * p.o.row_stride + 4 * c;
  const float4 o = make_float4(finished.out(acc.x), finished.out(acc.y), finished.out(acc.z),
                               finished.out(acc.w));
  if (kVec4) {
    if (4 * c < d) *reinterpret_cast<float4*>(out) = o;
  } else {
    if (4 * c < d) out[0] = o.x;
    if (4 * c + 1 < d) out[1] = o.y;
    if (4 * c + 2 < d) out[2] = o.z;
    if (4 * c + 3 < d) out[3] = o.w;
  }
  if (p.lse && lane == 0)
    p.lse[(b * p.heads_q + hq) * p.mask.seqlen_q + row] = row_lse(m * kLn2, sum, empty);
}

// Largest element offset of t (strides are non-negative by validation).
int64_t last_offset(const TensorRef& t, int batch, int seqlen, int heads, int head_dim) {
  return (batch - 1) * t.batch_stride + (seqlen - 1) * t.row_stride + (heads - 1) * t.head_stride +
         head_dim - 1;
}

WarpTensor warp_tensor(const TensorRef& t) {
  return {static_cast<float*>(t.data), int(t.batch_stride), int(t.row_stride),
          int(t.head_stride)};
}

template <class Variant>
void launch(const WarpParams& w, dim3 grid, cudaStream_t stream, bool vec4) {
  if (vec4)
    tiny_warp_kernel<Variant, true><<<grid, 32, 0, stream>>>(w);
  else
    tiny_warp_kernel<Variant, false><<<grid, 32, 0, stream>>>(w);
}

}  // namespace

bool tiny_warp_fits(const AttnParams& p) {
  const Sizes& s = p.sizes;
  // p already passed tiny_fits (tiny_forward's caller), so seqlen_q ≤ 64 as gridDim.z.
  if (s.seqlen_k > kTinyWarpMaxKeys || s.head_dim > kTinyWarpMaxHeadDim ||
      s.batch > 65535)  // gridDim.y
    return false;
  const int64_t lse_end = int64_t(s.batch) * s.heads_q * s.seqlen_q;
  return lse_end <= INT_MAX &&
         last_offset(p.q, s.batch, s.seqlen_q, s.heads_q, s.head_dim) <= INT_MAX &&
         last_offset(p.o, s.batch, s.seqlen_q, s.heads_q, s.head_dim) <= INT_MAX &&
         last_offset(p.k, s.batch, s.seqlen_k, s.heads_kv, s.head_dim) <= INT_MAX &&
         last_offset(p.v, s.batch, s.seqlen_k, s.heads_kv, s.head_dim) <= INT_MAX;
}

void tiny_warp_forward(const AttnParams& p) {
  const Sizes& s = p.sizes;
  WarpParams w;
  w.q = warp_tensor(p.q), w.k = warp_tensor(p.k), w.v = warp_tensor(p.v), w.o = warp_tensor(p.o);
  w.lse = p.softmax.lse;
  w.heads_q = s.heads_q, w.group = s.group();
  w.head_dim = s.head_dim;
  w.mask = dense_mask(p);  // dense batches only (tiny_fits)
  w.scale_log2 = p.softmax.scale_log2;
  w.scores = p.scores;
  w.dropout = p.dropout;
  w.scale = p.softmax.scale;
  const dim3 grid(unsigned(s.heads_q), unsigned(s.batch), unsigned(s.seqlen_q));
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  const bool vec4 = fp32_rows_vec4(p) && rows_16b_aligned(p.o, sizeof(float));
  with_variant<AnyVariant, BiasVariant>(
      p, [&](auto variant) { launch<decltype(variant)>(w, grid, stream, vec4); });
  check_launch("tiny_warp_kernel");
}

}  // namespace flashattn::cuda
