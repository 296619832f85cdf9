// Exact fp32 attention on fp16 tensor cores (sm_80+), head_dim up to 128: every
// product runs as three fp16 mma.sync on a scaled hi/lo split of its fp32
// operands (common/split_f16.cuh), which keeps fp32 accuracy at twice the rate of
// the 3×TF32 kernel's mma and lets the 16-bit kernel's machinery (swizzled
// tiles, ldmatrix, P kept in registers) carry fp32.
//
// A block of 4 warps owns 64 query rows (16 per warp) of one (batch, q head) and
// walks its visible key blocks from the last to the first, as the 16-bit kernel
// does. Each fp32 tile lands by cp.async in a staging buffer and is split from
// there into hi and lo fp16 tiles, each group of values with its own scale:
//   Q: per row,  K: per 8 keys (one n8 column of S),  V: per 8 output columns.
// A warp splits whole groups, so a group's maximum needs only shuffles. Then
//   s_ij = (Σ hi·hi + Σ (hi·lo + lo·hi)) · 2^-(e_i + e_j),
//   acc_i += (Σ P_hi·V_hi + Σ (P_hi·V_lo + P_lo·V_hi)) · 2^-e_col.
// Tensor cores truncate the fp32 accumulator on every mma, a bias that grows
// with the chain: the hi·hi terms therefore accumulate per key block only (at
// most 8 mma in a chain) and the small terms in their own accumulator, the two
// added in fp32 with round to nearest. P is split like the operands, raised by
// 2^kPLog2Bias so that its small values stay clear of fp16's subnormal range
// (acc and l carry the factor alike, so out = acc / l is unchanged).
//
// Per key block, with K and V each staged one block ahead:
//   wait K_n · split K_n · load K_{n−1} · S = Q·K_nᵀ · mask · wait V_n · split V_n ·
//   load V_{n−1} · softmax · acc += P·V_n.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/fp32_tile.cuh"
#include "cuda/common/head_dim_bucket.h"
#include "cuda/common/scratch.h"
#include "cuda/common/split_f16.cuh"
#include "cuda/sm80/key_split.h"
#include "cuda/sm80/mma/forward_kernel.cuh"

namespace flashattn::cuda {
namespace {

using mma::kLog2e;

// P·2^6 is at most 2^(8 + 6) with the softmax's rescale slack (mma::kRescaleSlack):
// inside fp16's range, and its smallest normal 2^-14 then stands for P = 2^-20.
constexpr float kPLog2Bias = 6.0f;

constexpr int kHeadDims[] = {32, 64, 128};
static_assert(kHeadDims[2] == kF16x3MaxHeadDim);

// kBlockM query rows, 16 per warp; 64 keys per block, 32 at kD = 128 (registers).
template <int kD, int kBlockM>
using ShapeFor = mma::TileShape<kD, kD, kBlockM, kD >= 128 ? 32 : 64, kBlockM / 16>;

template <typename Shape>
struct alignas(128) SharedTiles {
  static constexpr int kD = Shape::kD;
  using Stage = float[Shape::kBlockN][kD + kFp32TilePad];
  // The Q tile, once; then a K and a V tile, each loading a whole key block ahead.
  static constexpr int kStageRows = std::max(Shape::kBlockM, 2 * Shape::kBlockN);
  char q_hi[Shape::QTile::kBytes], q_lo[Shape::QTile::kBytes];
  char k_hi[Shape::KTile::kBytes], k_lo[Shape::KTile::kBytes];
  char v_hi[Shape::VTile::kBytes], v_lo[Shape::VTile::kBytes];
  float stage[kStageRows][kD + kFp32TilePad];
  __device__ Stage& stage_k() { return *reinterpret_cast<Stage*>(stage[0]); }
  __device__ Stage& stage_v() { return *reinterpret_cast<Stage*>(stage[Shape::kBlockN]); }
  float q_unscale[Shape::kBlockM];  // 2^-e per query row
  float k_unscale[Shape::kNTiles];  // 2^-e per 8 keys
  float v_unscale[Shape::kOTiles];  // 2^-e per 8 output columns
};

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Max over the lanes whose index differs from this one only in the bits of mask.
template <unsigned kLaneBits>
__device__ __forceinline__ float lanes_max(float x) {
#pragma unroll
  for (unsigned bit = 1; bit < 32; bit <<= 1)
    if (kLaneBits & bit) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, bit));
  return x;
}

// Splits 4 staged floats (already scaled) into the hi and lo tiles at byte
// offset `offset` (8 bytes each).
__device__ __forceinline__ void store_split4(char* hi, char* lo, uint32_t offset, float4 x) {
  const HalfPairs a = split_pair(x.x, x.y), b = split_pair(x.z, x.w);
  *reinterpret_cast<uint2*>(hi + offset) = make_uint2(a.hi, b.hi);
  *reinterpret_cast<uint2*>(lo + offset) = make_uint2(a.lo, b.lo);
}

__device__ __forceinline__ float4 scaled(float4 x, float s) {
  return make_float4(x.x * s, x.y * s, x.z * s, x.w * s);
}

// Splits staged rows [row0, row0 + 8) of kD columns into the hi/lo tiles. Lane L
// takes row L % 8 and the float4 columns L / 8, L / 8 + 4, ... (eight lanes of one
// column read eight rows: distinct banks). kWhole: the 8 rows share one scale,
// written to *unscale; else each row has its own, written to unscale[row - row0].
template <typename Tile, int kD, bool kWhole>
__device__ __forceinline__ void split_rows(const float (*stage)[kD + kFp32TilePad], char* hi,
                                           char* lo, int row0, float* unscale) {
  constexpr int kVecs = kD / 16;  // float4s per lane
  const int lane = thread_index() % 32;
  const int r = row0 + lane % 8;
  float4 x[kVecs];
  float mx = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    x[i] = *reinterpret_cast<const float4*>(&stage[r][4 * (lane / 8 + 4 * i)]);
    mx = fmaxf(mx, fmaxf(fmaxf(fabsf(x[i].x), fabsf(x[i].y)), fmaxf(fabsf(x[i].z), fabsf(x[i].w))));
  }
  mx = lanes_max<kWhole ? 31u : 24u>(mx);
  const int e = split_exponent(mx);
  if (kWhole ? lane == 0 : lane < 8) unscale[kWhole ? 0 : lane % 8] = exp2_int(-e);
  const float s = exp2_int(e);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c4 = lane / 8 + 4 * i;  // float4 column: chunk c4 / 2, half c4 % 2
    store_split4(hi, lo, Tile::offset(r, c4 / 2) + 8 * (c4 % 2), scaled(x[i], s));
  }
}

// Splits staged columns [8·col8, 8·col8 + 8) of the tile's kRows rows, one scale
// for all of them. Lane L takes rows L, L + 32, ... (one 16-byte chunk each).
template <typename Tile, int kD, int kRows>
__device__ __forceinline__ void split_columns(const float (*stage)[kD + kFp32TilePad], char* hi,
                                              char* lo, int col8, float* unscale) {
  constexpr int kPerLane = kRows / 32;
  const int lane = thread_index() % 32;
  float4 x[kPerLane][2];
  float mx = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      x[i][h] = *reinterpret_cast<const float4*>(&stage[lane + 32 * i][8 * col8 + 4 * h]);
      mx = fmaxf(mx, fmaxf(fmaxf(fabsf(x[i][h].x), fabsf(x[i][h].y)),
                           fmaxf(fabsf(x[i][h].z), fabsf(x[i][h].w))));
    }
  const int e = split_exponent(lanes_max<31u>(mx));
  if (lane == 0) *unscale = exp2_int(-e);
  const float s = exp2_int(e);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      store_split4(hi, lo, Tile::offset(lane + 32 * i, col8) + 8 * h, scaled(x[i][h], s));
}

// big += Q_hi·K_hiᵀ, small += Q_hi·K_loᵀ + Q_lo·K_hiᵀ over all kD columns, for the
// warp's 16 rows (ldmatrix lanes as in the 16-bit kernel). Addresses come from
// thread_index() afresh, so that they are not held in registers through the loop.
// Per 16 columns the three products go each over all key tiles in turn, so an
// mma waits on the one kNTiles before it, not on its neighbour: with two warps
// per scheduler, that distance is what keeps the tensor cores busy.
template <typename Shape>
__device__ __forceinline__ void scores_mma(const SharedTiles<Shape>& sm,
                                           float (&big)[Shape::kNTiles][4],
                                           float (&small)[Shape::kNTiles][4]) {
  constexpr int kPairs = Shape::kNTiles / 2;
  const int lane = thread_index() % 32, warp_row0 = thread_index() / 32 * 16;
  using QTile = typename Shape::QTile;
  using KTile = typename Shape::KTile;
  const auto q_lane = QTile::lane(smem_address(sm.q_hi), warp_row0 + lane % 16, lane / 16);
  const auto k_lane = KTile::lane(smem_address(sm.k_hi), 8 * (lane / 16) + lane % 8, (lane / 8) % 2);
  constexpr uint32_t kQLo = sizeof(sm.q_hi), kKLo = sizeof(sm.k_hi);  // lo follows hi
#pragma unroll
  for (int kk = 0; kk < Shape::kD / 16; ++kk) {
    uint32_t a_hi[4], a_lo[4], b_hi[kPairs][4], b_lo[kPairs][4];
    ldmatrix_x4(a_hi, QTile::address(q_lane, 0, kk));
    ldmatrix_x4(a_lo, QTile::address(q_lane, 0, kk) + kQLo);
#pragma unroll
    for (int np = 0; np < kPairs; ++np) {
      ldmatrix_x4(b_hi[np], KTile::address(k_lane, 16 * np, kk));
      ldmatrix_x4(b_lo[np], KTile::address(k_lane, 16 * np, kk) + kKLo);
    }
#pragma unroll
    for (int np = 0; np < kPairs; ++np)
      mma_two_tiles<__half>(big[2 * np], big[2 * np + 1], a_hi, b_hi[np]);
#pragma unroll
    for (int np = 0; np < kPairs; ++np)
      mma_two_tiles<__half>(small[2 * np], small[2 * np + 1], a_hi, b_lo[np]);
#pragma unroll
    for (int np = 0; np < kPairs; ++np)
      mma_two_tiles<__half>(small[2 * np], small[2 * np + 1], a_lo, b_hi[np]);
  }
}

// acc += P·V for the warp's rows, P as hi/lo A fragments. Output column tiles go
// kGroup at a time: one chain per tile over the block's keys, then scaled into
// acc; within a 16-key step each product runs over the whole group, for the
// same distance between dependent mma as in scores_mma.
template <typename Shape>
__device__ __forceinline__ void values_mma(const SharedTiles<Shape>& sm,
                                           const uint32_t (&p_hi)[Shape::kBlockN / 16][4],
                                           const uint32_t (&p_lo)[Shape::kBlockN / 16][4],
                                           float (&acc)[1][Shape::kOTiles][4]) {
  constexpr int kGroup = Shape::kOTiles < 8 ? Shape::kOTiles : 8, kPairs = kGroup / 2;
  const int lane = thread_index() % 32;
  using VTile = typename Shape::VTile;
  const auto v_lane =
      VTile::lane(smem_address(sm.v_hi), lane % 8 + 8 * ((lane / 8) % 2), lane / 16);
  constexpr uint32_t kVLo = sizeof(sm.v_hi);
#pragma unroll
  for (int ot0 = 0; ot0 < Shape::kOTiles; ot0 += kGroup) {
    float big[kGroup][4] = {}, small[kGroup][4] = {};
#pragma unroll
    for (int kk = 0; kk < Shape::kBlockN / 16; ++kk) {
      uint32_t b_hi[kPairs][4], b_lo[kPairs][4];
#pragma unroll
      for (int dp = 0; dp < kPairs; ++dp) {
        ldmatrix_x4_trans(b_hi[dp], VTile::address(v_lane, 16 * kk, ot0 / 2 + dp));
        ldmatrix_x4_trans(b_lo[dp], VTile::address(v_lane, 16 * kk, ot0 / 2 + dp) + kVLo);
      }
#pragma unroll
      for (int dp = 0; dp < kPairs; ++dp)
        mma_two_tiles<__half>(big[2 * dp], big[2 * dp + 1], p_hi[kk], b_hi[dp]);
#pragma unroll
      for (int dp = 0; dp < kPairs; ++dp)
        mma_two_tiles<__half>(small[2 * dp], small[2 * dp + 1], p_hi[kk], b_lo[dp]);
#pragma unroll
      for (int dp = 0; dp < kPairs; ++dp)
        mma_two_tiles<__half>(small[2 * dp], small[2 * dp + 1], p_lo[kk], b_hi[dp]);
    }
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const float unscale = sm.v_unscale[ot0 + j];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[0][ot0 + j][e] = fmaf(big[j][e] + small[j][e], unscale, acc[0][ot0 + j][e]);
    }
  }
}

// Blocks per SM: one of 8 warps, two of 4 (64-row blocks run grids of fewer
// than two blocks per SM, see launch()).
template <typename Shape>
constexpr int kMinBlocks = Shape::kWarps == 8 ? 1 : 2;

template <typename Shape>
__global__ void __launch_bounds__(Shape::kThreads, kMinBlocks<Shape>)
    split_f16_kernel(const AttnParams p, int m_blocks, bool vec4, const KeySplit split) {
  constexpr int kD = Shape::kD, kWarps = Shape::kWarps;
  constexpr int kBlockM = Shape::kBlockM, kBlockN = Shape::kBlockN;
  constexpr int kNT = Shape::kNTiles, kOT = Shape::kOTiles, kThreads = Shape::kThreads;
  extern __shared__ float4 smem[];
  SharedTiles<Shape>& sm = *reinterpret_cast<SharedTiles<Shape>*>(smem);
  const Sizes& s = p.sizes;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warp_row0 = 16 * warp;
  const int g = lane / 4, t = lane % 4;

  const TileCoord tc = tile_coord(s, m_blocks);
  // The query tiles of one (batch, head) run last to first: under a causal mask
  // the longest rows start first.
  const int row0 = (m_blocks - 1 - tc.m_block) * kBlockM;
  const int rows = min(kBlockM, s.seqlen_q - row0);
  // Of the key blocks visible to the tile, split blockIdx.y takes its share
  // [first_block, end_block), walked from the last to the first.
  const int visible_blocks =
      (p.mask.key_end(row0 + rows - 1, s.seqlen_k) + kBlockN - 1) / kBlockN;
  const int per_split = (visible_blocks + split.count - 1) / split.count;
  const int first_block = int(blockIdx.y) * per_split;
  const int end_block = min(visible_blocks, first_block + per_split);
  const int key_end_first = p.mask.key_end(row0, s.seqlen_k);
  const float* q = static_cast<const float*>(p.q.data) + tc.b * p.q.batch_stride +
                   tc.hq * p.q.head_stride + int64_t(row0) * p.q.row_stride;
  const float* k = static_cast<const float*>(p.k.data) + tc.b * p.k.batch_stride +
                   tc.hk * p.k.head_stride;
  const float* v = static_cast<const float*>(p.v.data) + tc.b * p.v.batch_stride +
                   tc.hk * p.v.head_stride;

  float q_unscale[2] = {1.0f, 1.0f};  // rows g and g + 8 of the warp
  if (end_block > first_block) {
    load_fp32_tile_async<kD, kBlockM, kThreads>(sm.stage, q, p.q.row_stride, rows, s.head_dim,
                                                vec4);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int half = 0; half < 2; ++half)
      split_rows<typename Shape::QTile, kD, false>(sm.stage, sm.q_hi, sm.q_lo,
                                                   warp_row0 + 8 * half,
                                                   sm.q_unscale + warp_row0 + 8 * half);
    __syncthreads();  // the stage is free; the warp's own row scales are written
    q_unscale[0] = sm.q_unscale[warp_row0 + g];
    q_unscale[1] = sm.q_unscale[warp_row0 + g + 8];
    const int key0 = (end_block - 1) * kBlockN;
    load_fp32_tile_async<kD, kBlockN, kThreads>(sm.stage_k(), k + int64_t(key0) * p.k.row_stride,
                                                p.k.row_stride, s.seqlen_k - key0, s.head_dim,
                                                vec4);
    cp_async_commit();
    load_fp32_tile_async<kD, kBlockN, kThreads>(sm.stage_v(), v + int64_t(key0) * p.v.row_stride,
                                                p.v.row_stride, s.seqlen_k - key0, s.head_dim,
                                                vec4);
    cp_async_commit();
  }

  float acc[1][kOT][4] = {};
  float row_max[1][2] = {{-INFINITY, -INFINITY}};
  mma::RowSums<1> row_sum{};
  const float c = p.softmax.scale * kLog2e;

  for (int n = end_block - 1; n >= first_block; --n) {
    const int key0 = n * kBlockN;
    // In flight here: K_n, then V_n (one commit group each, empty past the first block).
    cp_async_wait<1>();
    __syncthreads();  // K_n is staged; every warp is done with K_{n+1} and V_{n+1}
    for (int group = warp; group < kNT; group += kWarps)
      split_rows<typename Shape::KTile, kD, true>(sm.stage_k(), sm.k_hi, sm.k_lo, 8 * group,
                                                  sm.k_unscale + group);
    __syncthreads();  // K_n is split; its stage is free
    if (n > first_block)
      load_fp32_tile_async<kD, kBlockN, kThreads>(
          sm.stage_k(), k + int64_t(key0 - kBlockN) * p.k.row_stride, p.k.row_stride,
          s.seqlen_k - (key0 - kBlockN), s.head_dim, vec4);
    cp_async_commit();

    float sc[1][kNT][4] = {}, small[kNT][4] = {};
    scores_mma<Shape>(sm, sc[0], small);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        sc[0][nt][e] = (sc[0][nt][e] + small[nt][e]) * (q_unscale[e / 2] * sm.k_unscale[nt]);
    if (key0 + kBlockN > key_end_first)  // some row's key_end falls inside the block
      mma::mask_scores<Shape>(p, row0, key0, sc);

    cp_async_wait<1>();  // of V_n and K_{n−1}
    __syncthreads();  // V_n is staged
    for (int col8 = warp; col8 < kOT; col8 += kWarps)
      split_columns<typename Shape::VTile, kD, kBlockN>(sm.stage_v(), sm.v_hi, sm.v_lo, col8,
                                                        sm.v_unscale + col8);
    __syncthreads();  // V_n is split; its stage is free
    if (n > first_block)
      load_fp32_tile_async<kD, kBlockN, kThreads>(
          sm.stage_v(), v + int64_t(key0 - kBlockN) * p.v.row_stride, p.v.row_stride,
          s.seqlen_k - (key0 - kBlockN), s.head_dim, vec4);
    cp_async_commit();

    mma::online_softmax<Shape>(c, kPLog2Bias, sc, row_max, row_sum, acc);
    uint32_t p_hi[1][kBlockN / 16][4], p_lo[1][kBlockN / 16][4];
    mma::p_fragments<Shape>(sc, p_hi, [](float x0, float x1) { return split_pair(x0, x1).hi; });
    mma::p_fragments<Shape>(sc, p_lo, [](float x0, float x1) { return split_pair(x0, x1).lo; });
    values_mma<Shape>(sm, p_hi[0], p_lo[0], acc);
  }

  // One split writes p's output itself; several write their parts for the merge.
  const int64_t head_row0 = (int64_t(tc.b) * s.heads_q + tc.hq) * s.seqlen_q;  // of lse
  const int64_t split_rows0 = int64_t(blockIdx.y) * s.batch * s.heads_q * s.seqlen_q + head_row0;
  float* const lse = split.count > 1 ? split.lse + split_rows0
                     : p.softmax.lse ? p.softmax.lse + head_row0
                                     : nullptr;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = row_sum.l[0][h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = row0 + warp_row0 + g + 8 * h;
    if (row >= s.seqlen_q) continue;
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    float* o_row = split.count == 1
                       ? static_cast<float*>(p.o.data) + tc.b * p.o.batch_stride +
                             tc.hq * p.o.head_stride + int64_t(row) * p.o.row_stride
                       : split.out + (split_rows0 + row) * s.head_dim;
#pragma unroll
    for (int ot = 0; ot < kOT; ++ot)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * ot + 2 * t + e;
        if (col < s.head_dim) o_row[col] = acc[0][ot][2 * h + e] * inv_l;
      }
    // l carries P's 2^kPLog2Bias.
    if (lse && t == 0)
      lse[row] = l > 0.0f ? row_max[0][h] * p.softmax.scale + logf(l) - kPLog2Bias * 0.69314718f
                          : -INFINITY;
  }
}

template <typename Shape>
void launch(const AttnParams& p, TileGrid grid, const KeySplit& split) {
  const Sizes& s = p.sizes;
  // 16-byte cp.async needs 16-byte rows and whole float4s of head_dim.
  bool vec4 = s.head_dim % 4 == 0;
  for (const TensorRef* t : {&p.q, &p.k, &p.v}) vec4 = vec4 && rows_16b_aligned(*t, sizeof(float));
  const int smem = int(sizeof(SharedTiles<Shape>));
  FLASHATTN_CUDA_CHECK(cudaFuncSetAttribute(split_f16_kernel<Shape>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  grid.dims.y = unsigned(split.count);
  split_f16_kernel<Shape><<<grid.dims, Shape::kThreads, smem,
                            static_cast<cudaStream_t>(p.stream)>>>(p, grid.m_blocks, vec4, split);
  check_launch("split_f16_kernel");
}

// 128-row blocks split each K and V tile once for twice the rows of 64-row
// blocks; they are used where they still give nearly every SM a block. Smaller
// grids run 64-row blocks and split the keys over as many blocks per query tile
// as keep the grid within two blocks per SM (one wave), at most kMaxKeySplits,
// each taking at least two key blocks.
template <int kD>
void launch(const AttnParams& p) {
  const int sms = multiprocessors(p.device_index);
  const TileGrid wide = make_tile_grid(p.sizes, 128, kD, "cuda_f16x3");
  if (int64_t(wide.dims.x) * 8 >= int64_t(sms) * 7) {
    launch<ShapeFor<kD, 128>>(p, wide, KeySplit{});
    return;
  }
  using Shape = ShapeFor<kD, 64>;
  const TileGrid grid = make_tile_grid(p.sizes, 64, kD, "cuda_f16x3");
  const int key_blocks = (p.sizes.seqlen_k + Shape::kBlockN - 1) / Shape::kBlockN;
  const int64_t wanted = 2 * int64_t(sms) / grid.dims.x;
  const int splits = int(std::min<int64_t>({wanted, kMaxKeySplits, key_blocks / 2}));
  if (splits <= 1) {
    launch<Shape>(p, grid, KeySplit{});
    return;
  }
  const Sizes& s = p.sizes;
  const size_t rows = size_t(splits) * s.batch * s.heads_q * s.seqlen_q;
  Scratch scratch(rows * (s.head_dim + 1) * sizeof(float), p.device_index, p.stream);
  KeySplit split{splits, static_cast<float*>(scratch.data()), nullptr};
  split.lse = split.out + rows * s.head_dim;
  launch<Shape>(p, grid, split);
  merge_key_splits(p, split);
}

}  // namespace

void f16x3_forward(const AttnParams& p) {
  DeviceGuard device(p.device_index);
  switch (head_dim_bucket(kHeadDims, p.sizes.head_dim)) {
    case 32: launch<32>(p); return;
    case 64: launch<64>(p); return;
    case 128: launch<128>(p); return;
  }
  fail(Status::internal, "head_dim: ", p.sizes.head_dim, " reached cuda_f16x3 above its limit");
}

}  // namespace flashattn::cuda
