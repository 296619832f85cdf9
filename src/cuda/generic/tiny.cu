// cuda_tiled's path for fp32 problems small enough to sit on chip whole
// (tiny_fits): for them a call is all latency, so the kernel takes one round of
// loads (cp.async, issued all at once) and no barrier after it. A block of kRows
// warps owns kRows query rows of one (batch, q head) and stages its head's K and
// V whole in shared memory; warp w owns row w: lane j scores keys j and j + 32,
// the row's maximum and sum come from shuffles, and lane c accumulates output
// columns c, c + 32 with P broadcast by shuffles; a row scores and adds only the
// keys its mask shows it (a window's included), and the AnyVariant
// instantiation applies softcap and ALiBi (core/variant.h) to each raw score.
// Problems that fit one warp's registers go to tiny_warp.cu instead.
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
#include "cuda/common/shared_memory_grant.h"

namespace flashattn::cuda {
namespace {

constexpr int kRows = 8;
constexpr int kThreads = 32 * kRows;
constexpr int kColsPerLane = kTinyMaxHeadDim / 32;
static_assert(kTinyMaxKeys <= 64, "a lane scores at most two keys");

// Row pitch in float4s of the staged tiles: head_dim rounded up to float4s, then
// to an odd count, so that eight lanes reading float4s of eight consecutive rows
// hit distinct banks.
__host__ __device__ int pitch4(int head_dim) { return (head_dim + 3) / 4 | 1; }

// K, V and the block's Q rows, zero-padded to whole float4s.
int shared_bytes(const Sizes& s) {
  return (2 * s.seqlen_k + kRows) * pitch4(s.head_dim) * 16;
}

// Starts copying rows [0, rows) of a head into dst (pitch4 float4s a row), and
// zeros into the padding columns. vec4: 16-byte rows, head_dim a multiple of 4.
__device__ __forceinline__ void stage_rows(float4* dst, const float* src, int64_t row_stride,
                                           int rows, int head_dim, bool vec4) {
  const int pitch = pitch4(head_dim), vecs = (head_dim + 3) / 4;
  if (vec4) {
    for (int e = threadIdx.x; e < rows * vecs; e += kThreads) {
      const int r = e / vecs, c4 = e - r * vecs;
      cp_async_16(dst + r * pitch + c4, src + r * row_stride + 4 * c4, true);
    }
  } else {
    float* dst1 = reinterpret_cast<float*>(dst);
    for (int e = threadIdx.x; e < rows * 4 * vecs; e += kThreads) {
      const int r = e / (4 * vecs), c = e - r * 4 * vecs;
      cp_async_4(dst1 + r * 4 * pitch + c, src + r * row_stride + c, c < head_dim);
    }
  }
}

template <class Variant>
__global__ void __launch_bounds__(kThreads) tiny_kernel(const AttnParams p, bool vec4) {
  extern __shared__ float4 smem[];
  const Sizes& s = p.sizes;
  const int d = s.head_dim, nk = s.seqlen_k, pitch = pitch4(d), vecs = (d + 3) / 4;
  float4* const k = smem;            // [nk][pitch]
  float4* const v = k + nk * pitch;  // [nk][pitch]
  float4* const q = v + nk * pitch;  // [kRows][pitch]
  const int b = int(blockIdx.x) / s.heads_q, hq = int(blockIdx.x) % s.heads_q;
  const int hk = hq / s.group();
  const int row0 = int(blockIdx.y) * kRows, rows = min(kRows, s.seqlen_q - row0);
  const float* gk =
      static_cast<const float*>(p.k.data) + b * p.k.batch_stride + hk * p.k.head_stride;
  const float* gv =
      static_cast<const float*>(p.v.data) + b * p.v.batch_stride + hk * p.v.head_stride;
  const float* gq = static_cast<const float*>(p.q.data) + b * p.q.batch_stride +
                    hq * p.q.head_stride + int64_t(row0) * p.q.row_stride;
  stage_rows(k, gk, p.k.row_stride, nk, d, vec4);
  stage_rows(v, gv, p.v.row_stride, nk, d, vec4);
  stage_rows(q, gq, p.q.row_stride, rows, d, vec4);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (w >= rows) return;
  const int row = row0 + w;
  const RowMask& mask = dense_mask(p);  // dense batches only (tiny_fits)
  // key_begin is 0 at compile time in the plain kernel, whose rules have no lower end.
  const int key_begin = Variant::kLowerEnds ? mask.key_begin(row) : 0;
  const int key_end = mask.key_end(row);
  const auto variant = Variant::score(p.scores, p.softmax.scale, b, hq, mask.alignment);
  const float4* q_row = q + w * pitch;

  // Scores in log2 units, s·scale·log2(e), from float4s of the zero-padded rows.
  const float c = p.softmax.scale_log2;
  float score[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int j = lane + 32 * h;
    score[h] = -INFINITY;
    if (j >= key_begin && j < key_end) {
      const float4* k_row = k + j * pitch;
      float4 part = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
      for (int c4 = 0; c4 < vecs; ++c4) {
        const float4 a = q_row[c4], x = k_row[c4];
        part.x = fmaf(a.x, x.x, part.x), part.y = fmaf(a.y, x.y, part.y);
        part.z = fmaf(a.z, x.z, part.z), part.w = fmaf(a.w, x.w, part.w);
      }
      score[h] = variant((part.x + part.y) + (part.z + part.w), row, j) * c;
    }
  }
  const float m = lanes_max<31u>(fmaxf(score[0], score[1]));
  float prob[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) prob[h] = exp2f(score[h] - exponent_max(m));
  const float sum = lanes_sum<31u>(prob[0] + prob[1]);
  // Dropout (core/dropout.h): dropped probabilities, summed, leave P·V.
  if constexpr (Variant::kDropout) {
    if (p.dropout.on()) {
      const DropoutRows dropout = dropout_rows(p.dropout, b, s.heads_q, hq);
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (lane + 32 * h < key_end && !dropout.keep(row, lane + 32 * h)) prob[h] = 0.0f;
    }
  }

  const float* v1 = reinterpret_cast<const float*>(v);
  float acc[kColsPerLane] = {};
#pragma unroll 8
  for (int j = key_begin; j < key_end; ++j) {
    const float pj = __shfl_sync(0xffffffffu, j < 32 ? prob[0] : prob[1], j % 32);
#pragma unroll
    for (int u = 0; u < kColsPerLane; ++u)
      if (lane + 32 * u < d) acc[u] = fmaf(pj, v1[j * 4 * pitch + lane + 32 * u], acc[u]);
  }
  // Scores in log2 units: lse = (m + log2 sum)·ln 2 (core/softmax.h); the lse
  // by row_lse after the stores, only where it is stored (tiny_warp.cu).
  const bool empty = finished_empty<Variant::Score::kBias>(mask.empty(row), sum);
  FinishedRow<float> finished = finish_row(m * kLn2, sum, empty);
  if constexpr (Variant::kDropout) finished.inv_l *= p.dropout.keep_scale;
  float* out = static_cast<float*>(p.o.data) + b * p.o.batch_stride + hq * p.o.head_stride +
               int64_t(row) * p.o.row_stride;
#pragma unroll
  for (int u = 0; u < kColsPerLane; ++u)
    if (lane + 32 * u < d) out[lane + 32 * u] = finished.out(acc[u]);
  if (p.softmax.lse && lane == 0)
    p.softmax.lse[(int64_t(b) * s.heads_q + hq) * s.seqlen_q + row] =
        row_lse(m * kLn2, sum, empty);
}

}  // namespace

void tiny_forward(const AttnParams& p) {
  if (tiny_warp_fits(p)) {
    tiny_warp_forward(p);
    return;
  }
  const Sizes& s = p.sizes;
  const int64_t heads = int64_t(s.batch) * s.heads_q;
  if (heads > 0x7FFFFFFF) fail(Status::unsupported, "q: shape too large for cuda_tiled's grid");
  const dim3 grid(unsigned(heads), unsigned((s.seqlen_q + kRows - 1) / kRows));
  const int smem = shared_bytes(s);
  with_variant<AnyVariant, BiasVariant>(p, [&](auto variant) {
    const auto kernel = tiny_kernel<decltype(variant)>;
    grant_shared_memory(kernel, smem);
    kernel<<<grid, kThreads, smem, static_cast<cudaStream_t>(p.stream)>>>(p, fp32_rows_vec4(p));
  });
  check_launch("tiny_kernel");
}

}  // namespace flashattn::cuda
