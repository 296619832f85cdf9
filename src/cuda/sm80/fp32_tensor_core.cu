// Exact fp32 attention on tensor cores (sm_80+): both products, S = Q·Kᵀ and
// O += P·V, run as 3×TF32 mma.sync (common/mma_tf32x3.cuh), which keeps fp32
// accuracy at several times the fp32 FMA rate.
//
// A block of 4 warps owns kBlockM = 64 query rows (16 per warp) of one
// (batch, q head) and kD output columns; it walks the visible key tiles of
// block_n(kD) rows, from a window's first in the AnyVariant instantiation, which
// also applies softcap and ALiBi to each raw score (core/variant.h; s_ij below
// is the variant's). Per query row i (two per thread: g and g + 8 of its warp):
//   m_i = max over keys seen of s_ij (raw, unscaled),
//   l_i = Σ exp2((s_ij − m_i)·c),  acc_i = Σ exp2((s_ij − m_i)·c)·v_j,  c = scale·log2(e),
// with l_i and acc_i rescaled when m_i grows (core/softmax.h, OnlineRow). Head
// dims above kD run one block per kD-column slice of the output, accumulating S
// over kD-wide chunks of head_dim (Q and K chunks re-read through shared
// memory); up to kD, Q stays in shared memory for the whole key loop.
//
// P never leaves registers: for the P·V product the key order inside each
// 8-key step is permuted so that the accumulator layout of S is the A layout
// (A column t ↔ key 2t, column t+4 ↔ key 2t+1), and V's rows are read in the
// same permuted order.
#include <cmath>

#include "core/mask.h"
#include "core/softmax.h"
#include "core/variant.h"
#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/dropout.cuh"
#include "cuda/common/fp32_tile.cuh"
#include "cuda/common/mma_tf32x3.cuh"
#include "cuda/common/shared_memory_grant.h"
#include "cuda/common/tile_scheduler.cuh"

namespace flashattn::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockM = 16 * kWarps;
// Keys per tile: 64, or 32 at kD = 128, where the S tile's registers would
// otherwise push the O accumulator (64 per thread) into spills.
__host__ __device__ constexpr int block_n(int kD) { return kD >= 128 ? 32 : 64; }
__host__ __device__ constexpr int n_tiles(int kD) { return block_n(kD) / 8; }  // 8-key column tiles of S
constexpr int kPad = kFp32TilePad;  // fragment loads hit 32 distinct banks

template <int kD>
struct SharedTiles {
  float q[kBlockM][kD + kPad];
  float k[block_n(kD)][kD + kPad];
  float v[block_n(kD)][kD + kPad];
};

// Tensor cores round the accumulator toward zero on every mma, a bias that grows
// with the length of an accumulation chain (seen as 1e-4 error at 16k keys). So
// each product accumulates short chains into a zeroed fragment, and those partial
// sums are added in fp32 with round-to-nearest.
constexpr int kChainK = 32;  // head_dim columns per chain of S = Q·Kᵀ (12 mma)

// s += Q(warp's 16 rows, kD cols)·K(64 keys, kD cols)ᵀ.
template <int kD>
__device__ void scores_mma(const SharedTiles<kD>& sm, int warp, int g, int t,
                           float (&s)[n_tiles(kD)][4]) {
  static_assert(kD % kChainK == 0, "head_dim buckets are whole chains");
  const int row = warp * 16 + g;
#pragma unroll 1
  for (int k0 = 0; k0 < kD; k0 += kChainK) {
    float part[n_tiles(kD)][4] = {};
#pragma unroll
    for (int kk = k0; kk < k0 + kChainK; kk += 8) {
      const float a[4] = {sm.q[row][kk + t], sm.q[row + 8][kk + t], sm.q[row][kk + t + 4],
                          sm.q[row + 8][kk + t + 4]};
      const FragA fa = split_a(a);
#pragma unroll
      for (int j = 0; j < n_tiles(kD); ++j)
        mma_tf32x3(part[j], fa, split_b(sm.k[8 * j + g][kk + t], sm.k[8 * j + g][kk + t + 4]));
    }
#pragma unroll
    for (int j = 0; j < n_tiles(kD); ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] += part[j][e];
  }
}

// acc += P(warp's 16 rows, 64 keys)·V(64 keys, kD cols); P in the S accumulator
// layout. One chain per 8 output columns over the tile's 64 keys (24 mma); the
// columns go in groups of kGroupN tiles so the chains' partial sums stay few
// registers (P is re-split per group: 8 ALU ops per 8 keys, against 12 mma).
constexpr int kGroupN = 4;

template <int kD>
__device__ void output_mma(const SharedTiles<kD>& sm, int g, int t, const float (&p)[n_tiles(kD)][4],
                           float (&acc)[kD / 8][4]) {
  static_assert((kD / 8) % kGroupN == 0, "output column tiles come in whole groups");
#pragma unroll
  for (int n0 = 0; n0 < kD / 8; n0 += kGroupN) {
    float part[kGroupN][4] = {};
#pragma unroll
    for (int j = 0; j < n_tiles(kD); ++j) {
      const float a[4] = {p[j][0], p[j][2], p[j][1], p[j][3]};
      const FragA pa = split_a(a);
      const int key = 8 * j + 2 * t;  // A column t ↔ key 2t, column t + 4 ↔ key 2t + 1
#pragma unroll
      for (int n = 0; n < kGroupN; ++n)
        mma_tf32x3(part[n], pa,
                   split_b(sm.v[key][8 * (n0 + n) + g], sm.v[key + 1][8 * (n0 + n) + g]));
    }
#pragma unroll
    for (int n = 0; n < kGroupN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[n0 + n][e] += part[n][e];
  }
}

// Max or sum over the 4 lanes of a quad, which share a row.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <class Variant, int kD>
__global__ void __launch_bounds__(kThreads, 2)
    fp32_tc_kernel(const AttnParams p, const TileDivisors tiles, bool vec4) {
  extern __shared__ float4 smem[];
  SharedTiles<kD>& sm = *reinterpret_cast<SharedTiles<kD>*>(smem);
  const Sizes s = p.sizes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const auto [m_block, b, hq, hk] = tile_coord(tiles);
  const int m0 = m_block * kBlockM, col0 = blockIdx.y * kD;
  const int rows = min(kBlockM, s.seqlen_q - m0);
  const int chunks = (s.head_dim + kD - 1) / kD;

  const float* gQ = static_cast<const float*>(p.q.data) + b * p.q.batch_stride +
                    int64_t(m0) * p.q.row_stride + hq * p.q.head_stride;
  const float* gK = static_cast<const float*>(p.k.data) + b * p.k.batch_stride + hk * p.k.head_stride;
  const float* gV = static_cast<const float*>(p.v.data) + b * p.v.batch_stride + hk * p.v.head_stride;
  const float c = p.softmax.scale_log2;
  const RowMask& mask = dense_mask(p);
  const auto score = Variant::score(p.scores, p.softmax.scale, b, hq, mask.alignment);

  // This thread's rows: r = 0 is row g of the warp's 16, r = 1 is row g + 8.
  const int my_row[2] = {m0 + warp * 16 + g, m0 + warp * 16 + g + 8};
  // key_begin is 0 at compile time in the plain kernel, whose rules have no lower end.
  const int key_begin[2] = {Variant::kLowerEnds ? mask.key_begin(my_row[0]) : 0,
                            Variant::kLowerEnds ? mask.key_begin(my_row[1]) : 0};
  const int key_end[2] = {mask.key_end(my_row[0]), mask.key_end(my_row[1])};
  OnlineRow row[2];  // l: this thread's partial, summed over the quad at the end
  float acc[kD / 8][4] = {};
  // Keys outside [n_begin, n_end) are seen by no row of the tile.
  const int n_begin =
      mask.key_blocks(m0, rows, block_n(kD)).template first<Variant::kLowerEnds>() * block_n(kD);
  const int n_end = mask.key_end(m0 + rows - 1);

  if (chunks == 1) {
    load_fp32_tile_async<kD, kBlockM, kThreads>(sm.q, gQ, p.q.row_stride, rows, s.head_dim, vec4);
    cp_async_commit();
  }
  for (int n0 = n_begin; n0 < n_end; n0 += block_n(kD)) {
    float s_ij[n_tiles(kD)][4] = {};
    for (int chunk = 0; chunk < chunks; ++chunk) {
      __syncthreads();  // earlier readers of sm.q, sm.k, sm.v are done
      const int d0 = chunk * kD;
      if (chunks > 1)
        load_fp32_tile_async<kD, kBlockM, kThreads>(sm.q, gQ + d0, p.q.row_stride, rows,
                                                    s.head_dim - d0, vec4);
      load_fp32_tile_async<kD, block_n(kD), kThreads>(
          sm.k, gK + int64_t(n0) * p.k.row_stride + d0, p.k.row_stride, n_end - n0,
          s.head_dim - d0, vec4);
      cp_async_commit();
      if (chunk == 0) {
        // V lands while S and the softmax are computed.
        load_fp32_tile_async<kD, block_n(kD), kThreads>(
            sm.v, gV + int64_t(n0) * p.v.row_stride + col0, p.v.row_stride, n_end - n0,
            s.head_dim - col0, vec4);
        cp_async_commit();
        cp_async_wait<1>();  // Q and K have landed; V may still be in flight
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      scores_mma(sm, warp, g, t, s_ij);
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < n_tiles(kD); ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s_ij[j][2 * r + e];
          const int key = n0 + 8 * j + 2 * t + e;
          x = key < key_begin[r] || key >= key_end[r] ? -INFINITY : score(x, my_row[r], key);
          tile_max = fmaxf(tile_max, x);
        }
      const float alpha = row[r].raise_max(quad_max(tile_max), c);
      const float neg_max_c = row[r].neg_max_c(c);
#pragma unroll
      for (int j = 0; j < n_tiles(kD); ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s_ij[j][2 * r + e];
          x = exp2f(fmaf(x, c, neg_max_c));
          row[r].l += x;
        }
#pragma unroll
      for (int n = 0; n < kD / 8; ++n) {
        acc[n][2 * r] *= alpha;
        acc[n][2 * r + 1] *= alpha;
      }
    }
    // Dropout (core/dropout.h): the dropped probabilities, summed into l, leave P·V.
    if constexpr (Variant::kDropout) {
      if (p.dropout.on())
        for_each_kept<n_tiles(kD) / 2>(dropout_rows(p.dropout, b, s.heads_q, hq), my_row[0],
                                       n0 + 2 * t, [&](int j, int e, bool kept) {
                                         if (!kept) s_ij[j][e] = 0.0f;
                                       });
    }
    cp_async_wait<0>();
    __syncthreads();  // sm.v has landed for every thread
    output_mma(sm, g, t, s_ij, acc);
  }

  float* gO = static_cast<float*>(p.o.data) + b * p.o.batch_stride + hq * p.o.head_stride + col0;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(row[r].l);
    if (my_row[r] >= s.seqlen_q) continue;
    FinishedRow<float> finished =
        finish_row(row[r].m * p.softmax.scale, l,
                   finished_empty<Variant::Score::kBias>(mask.empty(my_row[r]), l));
    if constexpr (Variant::kDropout) finished.inv_l *= p.dropout.keep_scale;
    float* o_row = gO + int64_t(my_row[r]) * p.o.row_stride;
#pragma unroll
    for (int n = 0; n < kD / 8; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * n + 2 * t + e;
        if (col0 + col < s.head_dim) o_row[col] = finished.out(acc[n][2 * r + e]);
      }
    if (p.softmax.lse && blockIdx.y == 0 && t == 0)
      p.softmax.lse[(int64_t(b) * s.heads_q + hq) * s.seqlen_q + my_row[r]] = finished.lse;
  }
}

template <int kD>
void launch(const AttnParams& p) {
  const TileGrid grid = make_tile_grid(p.sizes, kBlockM, kD, "cuda_tf32x3");
  const int smem = int(sizeof(SharedTiles<kD>));
  with_variant<AnyVariant, BiasVariant>(p, [&](auto variant) {
    const auto kernel = fp32_tc_kernel<decltype(variant), kD>;
    grant_shared_memory(kernel, smem);
    kernel<<<grid.dims, kThreads, smem, static_cast<cudaStream_t>(p.stream)>>>(p, grid.divisors,
                                                                              fp32_rows_vec4(p));
  });
  check_launch("fp32_tc_kernel");
}

}  // namespace

void tf32x3_forward(const AttnParams& p) {
  // Smallest bucket that holds head_dim, so small heads waste no tensor-core work.
  if (p.sizes.head_dim <= 32) launch<32>(p);
  else if (p.sizes.head_dim <= 64) launch<64>(p);
  else launch<128>(p);
}

}  // namespace flashattn::cuda
