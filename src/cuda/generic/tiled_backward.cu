// The backward of cuda_tiled: FlashAttention-1 style shared-memory tiles in fp32,
// any head_dim and dtype, deterministic. With s_ij = q_i·k_j (raw), r_ij the
// variant's raw score of it and r'_ij = ∂r_ij/∂s_ij (core/variant.h: softcap and
// ALiBi in the AnyVariant instantiation; r = s, r' = 1 in the plain one), c =
// scale·log2(e) and the forward's lse_i, for a key j that row i sees:
//   p_ij = 2^(r_ij·c − lse_i·log2 e),  dp_ij = dO_i·v_j,  ds_ij = p_ij·(dp_ij − D_i)·r'_ij,
// and p_ij = ds_ij = 0 for a key the row does not see (a select, never −inf
// arithmetic, so any sign of scale works and an empty row, lse −inf, gives 0).
// Dropout (core/dropout.h) multiplies dp_ij by z_ij in ds_ij, and p_ij by z_ij
// in dv's sum.
// Two kernels, each gradient summed by one block in a fixed order:
//   dkdv_kernel: a block per (batch, kv head, 64-key tile, 64-column slice of
//     dk's and dv's columns) walks the query tiles of every query head of its GQA group that
//     see its keys: dv_j += Σ_i p_ij·dO_i, dk_j += scale·Σ_i ds_ij·q_i;
//   dq_kernel: a block per (batch, q head, 64-row tile, column slice) walks the
//     key tiles its rows see (from a window's first): dq_i += scale·Σ_j ds_ij·k_j.
// Both recompute P and dS (the tile step below: S and dP accumulated over
// head_dim and head_dim_v in 16-column chunks through shared memory), so head_dim is
// unbounded; head dims above 64 run a block per column slice, each recomputing
// them. Thread (ty, tx) of 16×16 holds tile rows ty + 16a and keys (or
// columns) tx + 16e, a, e < 4.
#include <cmath>

#include "core/dropout.h"
#include "core/mask.h"
#include "core/variant.h"
#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/element.cuh"
#include "cuda/common/row_dot.h"

namespace flashattn::cuda {
namespace {

constexpr int kBlock = 64;  // query rows, keys and output columns of a tile
constexpr int kDimChunk = 16;
constexpr int kSide = 16;
constexpr int kThreads = kSide * kSide;
constexpr int kPer = kBlock / kSide;

struct SharedTiles {
  // The tile step's chunks, transposed (chunk column, tile row); +1 keeps the
  // transposing stores conflict-free. The gradient products reuse a and b for
  // 16-row panels of the column slice.
  float a[kDimChunk][kBlock + 1];   // Q chunk; then a panel of dO or Q (dkdv) or K (dq)
  float b[kDimChunk][kBlock + 1];   // K chunk
  float da[kDimChunk][kBlock + 1];  // dO chunk
  float db[kDimChunk][kBlock + 1];  // V chunk
  float tile[kBlock][kBlock + 1];   // P or dS, (row, key)
};

// dst[c][r] = base[r·row_stride + c] (transposed) or dst[r][c], zero outside
// [0, row_limit) × [0, col_limit).
template <bool kTranspose, typename T, int kRows, int kCols>
__device__ void load_tile(float (*dst)[kBlock + 1], const T* base, int64_t row_stride,
                          int row_limit, int col_limit) {
  for (int e = threadIdx.y * kSide + threadIdx.x; e < kRows * kCols; e += kThreads) {
    const int r = e / kCols, c = e % kCols;
    const float x = r < row_limit && c < col_limit ? to_float(base[r * row_stride + c]) : 0.0f;
    if constexpr (kTranspose) dst[c][r] = x;
    else dst[r][c] = x;
  }
}

// Row row0 (along the tensor's seqlen) of batch index b, head h.
template <typename T>
__device__ const T* head_ptr(const TensorRef& t, int b, int h, int64_t row0) {
  return static_cast<const T*>(t.data) + row_offset(t, b, row0) + h * t.head_stride;
}

// One (query tile, key tile) pair of sequence b: p and ds of this thread's
// rows ty + 16a and keys tx + 16e (rows and keys counted in the sequence).
template <class Variant, typename T>
__device__ void tile_step(const BwdParams& p, SharedTiles& sm, int b, const Sequence& seq, int hq,
                          int hk, int m0, int n0, float (&prob)[kPer][kPer],
                          float (&ds)[kPer][kPer]) {
  const Sizes s = p.sizes;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int rows = min(kBlock, seq.seqlen_q - m0), keys = min(kBlock, seq.seqlen_k - n0);
  const T* gQ = head_ptr<T>(p.q, b, hq, seq.q_row0 + m0);
  const T* gdO = head_ptr<T>(p.grad.dout, b, hq, seq.q_row0 + m0);
  const T* gK = head_ptr<T>(p.k, b, hk, seq.k_row0 + n0);
  const T* gV = head_ptr<T>(p.v, b, hk, seq.k_row0 + n0);
  float s_ij[kPer][kPer] = {}, dp[kPer][kPer] = {};
  // S over q's and k's head_dim, dP over v's: chunks past either are zeros.
  for (int d0 = 0; d0 < s.widest_head_dim(); d0 += kDimChunk) {
    __syncthreads();  // the previous readers of the chunks are done
    const int cols = s.head_dim - d0, v_cols = s.head_dim_v - d0;
    load_tile<true, T, kBlock, kDimChunk>(sm.a, gQ + d0, p.q.row_stride, rows, cols);
    load_tile<true, T, kBlock, kDimChunk>(sm.b, gK + d0, p.k.row_stride, keys, cols);
    load_tile<true, T, kBlock, kDimChunk>(sm.da, gdO + d0, p.grad.dout.row_stride, rows, v_cols);
    load_tile<true, T, kBlock, kDimChunk>(sm.db, gV + d0, p.v.row_stride, keys, v_cols);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kDimChunk; ++kk)
#pragma unroll
      for (int a = 0; a < kPer; ++a)
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
          s_ij[a][e] += sm.a[kk][ty + kSide * a] * sm.b[kk][tx + kSide * e];
          dp[a][e] += sm.da[kk][ty + kSide * a] * sm.db[kk][tx + kSide * e];
        }
  }
  const RowMask mask = row_mask(p, seq);
  const float c = p.softmax.scale_log2;
  const auto score = Variant::score(p.scores, p.softmax.scale, b, hq, mask.alignment);
  const DropoutRows dropout = dropout_rows(p.dropout, b, p.sizes.heads_q, hq);
#pragma unroll
  for (int a = 0; a < kPer; ++a) {
    const int row = m0 + ty + kSide * a;
    const bool real = row < seq.seqlen_q;
    const int64_t at = stats_row0(p, b, hq, seq) + (real ? row : 0);
    const float neg_lse_log2 = -backward_lse2(p.grad.lse[at]), row_dot = p.grad.row_dot[at];
    // key_begin is 0 at compile time in the plain kernel, whose rules have no lower end.
    const int key_begin = Variant::kLowerEnds ? mask.key_begin(row) : 0;
    const int key_end = real ? mask.key_end(row) : 0;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int key = n0 + tx + kSide * e;
      const bool visible = key >= key_begin && key < key_end;
      float dr_ds = 1.0f;  // a bias is read at visible keys only (past seqlen_k it has none)
      const float r = visible ? score(s_ij[a][e], row, key, dr_ds) : 0.0f;
      prob[a][e] = visible ? exp2f(fmaf(r, c, neg_lse_log2)) : 0.0f;
      // Dropout (core/dropout.h): z scales dp in ds, and p in dv's product.
      float z = 1.0f;
      if (Variant::kDropout && p.dropout.on() && visible)
        z = dropout.keep(row, key) ? p.dropout.keep_scale : 0.0f;
      ds[a][e] = visible ? prob[a][e] * (dp[a][e] * z - row_dot) * dr_ds : 0.0f;
      prob[a][e] *= z;
    }
  }
}

// acc[a][e] += Σ_r tile(row ty + 16a, r)·panel(r, column tx + 16e) over the tile's kBlock
// columns r, the panel (kBlock rows × the column slice of `src`) loaded 16 rows at a time
// into sm.a. kTransposed reads the tile as (r, ty + 16a): the dkdv kernel's Pᵀ·dO and
// dSᵀ·Q; otherwise as (ty + 16a, r): the dq kernel's dS·K.
template <bool kTransposed, typename T>
__device__ void tile_times_panels(SharedTiles& sm, const T* src, int64_t row_stride,
                                  int row_limit, int col_limit, float (&acc)[kPer][kPer]) {
  for (int r0 = 0; r0 < kBlock; r0 += kDimChunk) {
    __syncthreads();
    load_tile<false, T, kDimChunk, kBlock>(sm.a, src + int64_t(r0) * row_stride, row_stride,
                                           row_limit - r0, col_limit);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kDimChunk; ++rr)
#pragma unroll
      for (int a = 0; a < kPer; ++a) {
        const int row = threadIdx.y + kSide * a;
        const float t = kTransposed ? sm.tile[r0 + rr][row] : sm.tile[row][r0 + rr];
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[a][e] += t * sm.a[rr][threadIdx.x + kSide * e];
      }
  }
}

// Writes this thread's tile values (rows ty + 16a, keys tx + 16e) to sm.tile.
__device__ void store_tile(SharedTiles& sm, const float (&x)[kPer][kPer]) {
  __syncthreads();  // the previous readers of sm.tile are done
#pragma unroll
  for (int a = 0; a < kPer; ++a)
#pragma unroll
    for (int e = 0; e < kPer; ++e) sm.tile[threadIdx.y + kSide * a][threadIdx.x + kSide * e] = x[a][e];
}

// Stores acc·factor (rows ty + 16a, columns tx + 16e of the slice) to t, from
// row row0 along the tensor's seqlen.
template <typename T>
__device__ void store_slice(const TensorRef& t, int b, int h, int64_t row0, int rows, int col0,
                            int head_dim, float factor, const float (&acc)[kPer][kPer]) {
  T* base = static_cast<T*>(t.data) + row_offset(t, b, row0) + h * t.head_stride + col0;
#pragma unroll
  for (int a = 0; a < kPer; ++a) {
    const int r = threadIdx.y + kSide * a;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int col = threadIdx.x + kSide * e;
      if (r < rows && col0 + col < head_dim)
        base[int64_t(r) * t.row_stride + col] = from_float<T>(acc[a][e] * factor);
    }
  }
}

template <class Variant, typename T>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(const BwdParams p, int n_blocks) {
  __shared__ SharedTiles sm;
  const Sizes s = p.sizes;
  const int n_block = int(blockIdx.x % n_blocks), hk = int(blockIdx.x / n_blocks % s.heads_kv);
  const int b = int(blockIdx.x / n_blocks / s.heads_kv);
  const int n0 = n_block * kBlock, col0 = blockIdx.y * kBlock;
  const Sequence seq = sequence(p, b);
  const int keys = min(kBlock, seq.seqlen_k - n0);
  if (keys <= 0) return;  // past a shorter sequence of a packed batch
  float dk[kPer][kPer] = {}, dv[kPer][kPer] = {};
  const RowRange rows_seeing = row_mask(p, seq).rows_seeing(n0, keys);
  for (int g = 0; g < s.group(); ++g) {
    const int hq = hk * s.group() + g;
    for (int m0 = rows_seeing.begin / kBlock * kBlock; m0 < rows_seeing.end; m0 += kBlock) {
      const int rows = min(kBlock, seq.seqlen_q - m0);
      float prob[kPer][kPer], ds[kPer][kPer];
      tile_step<Variant, T>(p, sm, b, seq, hq, hk, m0, n0, prob, ds);
      store_tile(sm, prob);
      tile_times_panels<true, T>(sm, head_ptr<T>(p.grad.dout, b, hq, seq.q_row0 + m0) + col0,
                                 p.grad.dout.row_stride, rows, s.head_dim_v - col0, dv);
      store_tile(sm, ds);
      tile_times_panels<true, T>(sm, head_ptr<T>(p.q, b, hq, seq.q_row0 + m0) + col0,
                                 p.q.row_stride, rows, s.head_dim - col0, dk);
    }
  }
  const int64_t k_row = seq.k_row0 + n0;
  store_slice<T>(p.grad.dk, b, hk, k_row, keys, col0, s.head_dim, p.softmax.scale, dk);
  store_slice<T>(p.grad.dv, b, hk, k_row, keys, col0, s.head_dim_v, 1.0f, dv);
}

template <class Variant, typename T>
__global__ void __launch_bounds__(kThreads) dq_kernel(const BwdParams p, int m_blocks) {
  __shared__ SharedTiles sm;
  const Sizes s = p.sizes;
  const int m_block = int(blockIdx.x % m_blocks), hq = int(blockIdx.x / m_blocks % s.heads_q);
  const int b = int(blockIdx.x / m_blocks / s.heads_q), hk = hq / s.group();
  const int m0 = m_block * kBlock, col0 = blockIdx.y * kBlock;
  const Sequence seq = sequence(p, b);
  const int rows = min(kBlock, seq.seqlen_q - m0);
  if (rows <= 0) return;  // past a shorter sequence of a packed batch
  const RowMask mask = row_mask(p, seq);
  const KeyBlocks blocks = mask.key_blocks(m0, rows, kBlock);
  float dq[kPer][kPer] = {};
  for (int n_block = blocks.first<Variant::kLowerEnds>(); n_block < blocks.end; ++n_block) {
    const int n0 = n_block * kBlock, keys = min(kBlock, seq.seqlen_k - n0);
    float prob[kPer][kPer], ds[kPer][kPer];
    tile_step<Variant, T>(p, sm, b, seq, hq, hk, m0, n0, prob, ds);
    store_tile(sm, ds);
    // dq[row][col] += Σ_key dS[row][key]·K[key][col], K in 16-key panels.
    tile_times_panels<false, T>(sm, head_ptr<T>(p.k, b, hk, seq.k_row0 + n0) + col0,
                                p.k.row_stride, keys, s.head_dim - col0, dq);
  }
  store_slice<T>(p.grad.dq, b, hq, seq.q_row0 + m0, rows, col0, s.head_dim, p.softmax.scale, dq);
}

// Blocks of one kernel: tiles × (batch, heads) in x, column slices in y.
dim3 grid_of(int64_t tiles, int head_dim) {
  const int64_t slices = (head_dim + kBlock - 1) / kBlock;
  if (tiles > 0x7FFFFFFF || slices > 65535)
    fail(Status::unsupported, "q: shape too large for cuda_tiled's backward grid");
  return dim3{unsigned(tiles), unsigned(slices)};
}

template <class Variant>
void launch(const BwdParams& p) {
  const Sizes& s = p.sizes;
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  const int n_blocks = (s.seqlen_k + kBlock - 1) / kBlock;
  const int m_blocks = (s.seqlen_q + kBlock - 1) / kBlock;
  // dk's slices and dv's: as many as the wider of the two has.
  const dim3 dkdv_grid = grid_of(int64_t(n_blocks) * s.batch * s.heads_kv, s.widest_head_dim());
  const dim3 dq_grid = grid_of(int64_t(m_blocks) * s.batch * s.heads_q, s.head_dim);
  with_element_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dkdv_kernel<Variant, T><<<dkdv_grid, dim3(kSide, kSide), 0, stream>>>(p, n_blocks);
    check_launch("dkdv_kernel");
    dq_kernel<Variant, T><<<dq_grid, dim3(kSide, kSide), 0, stream>>>(p, m_blocks);
    check_launch("dq_kernel");
  });
}

}  // namespace

void tiled_backward(const BwdParams& p) {
  launch_row_dot(p);
  with_variant<AnyVariant, BiasVariant>(p, [&](auto variant) { launch<decltype(variant)>(p); });
}

}  // namespace flashattn::cuda
