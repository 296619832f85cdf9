// Tiled CUDA attention, FlashAttention-1 style, for any head_dim and dtype
// (fp32 arithmetic). A block of 16×16 threads owns kBlockM query rows of one
// (batch, q head) and kOutCols output columns (of v's head_dim); it walks the visible key tiles of
// kBlockN rows:
//   S = Q·K_jᵀ, accumulated over q's and k's head_dim in chunks of kDimChunk
//       through shared memory (so head_dim is unbounded),
//   online softmax per row (core/softmax.h): m_i = running max, l_i = Σ
//       exp2((s − m_i)·c), acc_i rescaled when m_i grows, c = scale·log2(e),
//   acc += P·V_j[:, columns], P staged through shared memory.
// Thread (ty, tx) holds rows ty + 16a and columns tx + 16b, a, b < 4. Head dims
// above kOutCols run one block per column slice, each recomputing S. Instantiated
// per Variant (core/variant.h): AnyVariant walks from a window's first key block
// and applies softcap and ALiBi to each raw score before the mask.
#include <cmath>

#include "core/dropout.h"
#include "core/mask.h"
#include "core/softmax.h"
#include "core/variant.h"
#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/element.cuh"
#include "cuda/common/lanes.cuh"
#include "cuda/common/tile_scheduler.cuh"

namespace flashattn::cuda {
namespace {

constexpr int kBlockM = 64;
constexpr int kBlockN = 64;
constexpr int kOutCols = 64;
constexpr int kDimChunk = 16;
constexpr int kSide = 16;  // threads per block side
constexpr int kThreads = kSide * kSide;
constexpr int kPerThread = kBlockM / kSide;  // rows (and S or O columns) per thread
static_assert(kBlockM == kBlockN && kBlockN == kOutCols, "one 4×4 thread tile for S and O");
// Two blocks an SM (128 registers): left free, ptxas fitted the kernel in 80
// registers for three, and a lone block of a grid under one wave then waited on
// its shared loads (0.75× at 1000 rows, head dim 512, 8 heads). The bias
// variant, at some 210 registers, would spill under two; its bound stays free.
template <class Variant>
inline constexpr int kMinBlocksPerSM = Variant::Score::kBias ? 1 : 2;

struct SharedTiles {
  float q[kDimChunk][kBlockM];      // Q chunk, transposed: broadcast reads along rows
  float k[kDimChunk][kBlockN + 1];  // K chunk, transposed; +1 keeps the transpose store conflict-free
  float p[kBlockM][kBlockN + 1];    // probabilities of this key tile
  float v[kBlockN][kOutCols];       // V tile, this block's column slice
};

// Loads a rows×cols tile of one head (row r at base + r·row_stride) into
// dst[c][r] (transposed) or dst[r][c], zero outside [0, row_limit) × [0, col_limit).
template <bool kTranspose, typename T, int kRows, int kCols, int kLd>
__device__ void load_tile(float (*dst)[kLd], const T* base, int64_t row_stride, int row_limit,
                          int col_limit) {
  for (int e = threadIdx.y * kSide + threadIdx.x; e < kRows * kCols; e += kThreads) {
    const int r = e / kCols, c = e % kCols;
    const float x = r < row_limit && c < col_limit ? to_float(base[r * row_stride + c]) : 0.0f;
    if constexpr (kTranspose) dst[c][r] = x;
    else dst[r][c] = x;
  }
}

// Max (or sum) over the kSide threads that share a row (consecutive lanes in a warp).
__device__ __forceinline__ float row_max(float x) { return lanes_max<kSide - 1>(x); }
__device__ __forceinline__ float row_sum(float x) { return lanes_sum<kSide - 1>(x); }

template <class Variant, typename T>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSM<Variant>) tiled_kernel(const AttnParams p, const TileDivisors tiles) {
  __shared__ SharedTiles sm;
  const Sizes s = p.sizes;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const auto [m_block, b, hq, hk] = tile_coord(tiles);
  const int m0 = m_block * kBlockM, col0 = blockIdx.y * kOutCols;
  const Sequence seq = sequence(p, b);
  const int rows = min(kBlockM, seq.seqlen_q - m0);
  if (rows <= 0) return;  // past a shorter sequence of a packed batch

  const T* gQ = static_cast<const T*>(p.q.data) + row_offset(p.q, b, seq.q_row0 + m0) +
                hq * p.q.head_stride;
  const T* gK = static_cast<const T*>(p.k.data) + row_offset(p.k, b, seq.k_row0) +
                hk * p.k.head_stride;
  const T* gV = static_cast<const T*>(p.v.data) + row_offset(p.v, b, seq.k_row0) +
                hk * p.v.head_stride + col0;
  const float c = p.softmax.scale_log2;
  const RowMask mask = row_mask(p, seq);
  const auto score = Variant::score(p.scores, p.softmax.scale, b, hq, mask.alignment);
  const DropoutRows dropout = dropout_rows(p.dropout, b, s.heads_q, hq);

  OnlineRow row[kPerThread];  // l: this thread's partial, summed over the row at the end
  float acc[kPerThread][kPerThread];
  int key_begin[kPerThread], key_end[kPerThread];
#pragma unroll
  for (int a = 0; a < kPerThread; ++a) {
    // 0 at compile time in the plain kernel, whose rules have no lower end.
    key_begin[a] = Variant::kLowerEnds ? mask.key_begin(m0 + ty + kSide * a) : 0;
    key_end[a] = mask.key_end(m0 + ty + kSide * a);
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) acc[a][e] = 0.0f;
  }
  // Keys outside [n_begin, n_end) are seen by no row of the tile.
  const int n_begin =
      mask.key_blocks(m0, rows, kBlockN).template first<Variant::kLowerEnds>() * kBlockN;
  const int n_end = mask.key_end(m0 + rows - 1);

  for (int n0 = n_begin; n0 < n_end; n0 += kBlockN) {
    float s_ij[kPerThread][kPerThread] = {};
    for (int d0 = 0; d0 < s.head_dim; d0 += kDimChunk) {
      __syncthreads();  // previous readers of sm.q / sm.k are done
      load_tile<true, T, kBlockM, kDimChunk>(sm.q, gQ + d0, p.q.row_stride, rows, s.head_dim - d0);
      load_tile<true, T, kBlockN, kDimChunk>(sm.k, gK + int64_t(n0) * p.k.row_stride + d0,
                                             p.k.row_stride, n_end - n0, s.head_dim - d0);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kDimChunk; ++kk)
#pragma unroll
        for (int a = 0; a < kPerThread; ++a)
#pragma unroll
          for (int e = 0; e < kPerThread; ++e)
            s_ij[a][e] += sm.q[kk][ty + kSide * a] * sm.k[kk][tx + kSide * e];
    }

#pragma unroll
    for (int a = 0; a < kPerThread; ++a) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) {
        const int key = n0 + tx + kSide * e;
        s_ij[a][e] = key < key_begin[a] || key >= key_end[a]
                         ? -INFINITY
                         : score(s_ij[a][e], m0 + ty + kSide * a, key);
        tile_max = fmaxf(tile_max, s_ij[a][e]);
      }
      const float alpha = row[a].raise_max(row_max(tile_max), c);
      const float neg_max_c = row[a].neg_max_c(c);
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) {
        const float p_ij = exp2f(fmaf(s_ij[a][e], c, neg_max_c));
        row[a].l += p_ij;
        // Dropout (core/dropout.h): a dropped probability is summed but leaves P·V.
        const bool dropped = Variant::kDropout && p.dropout.on() &&
                             !dropout.keep(m0 + ty + kSide * a, n0 + tx + kSide * e);
        sm.p[ty + kSide * a][tx + kSide * e] = dropped ? 0.0f : p_ij;
        acc[a][e] *= alpha;
      }
    }
    load_tile<false, T, kBlockN, kOutCols>(sm.v, gV + int64_t(n0) * p.v.row_stride, p.v.row_stride,
                                           n_end - n0, s.head_dim_v - col0);
    __syncthreads();
    for (int n = 0; n < kBlockN; ++n)
#pragma unroll
      for (int a = 0; a < kPerThread; ++a)
#pragma unroll
        for (int e = 0; e < kPerThread; ++e) acc[a][e] += sm.p[ty + kSide * a][n] * sm.v[n][tx + kSide * e];
    __syncthreads();  // sm.p and sm.v are rewritten by the next tile
  }

  T* gO = static_cast<T*>(p.o.data) + row_offset(p.o, b, seq.q_row0) + hq * p.o.head_stride + col0;
#pragma unroll
  for (int a = 0; a < kPerThread; ++a) {
    const int r = ty + kSide * a;
    const float l = row_sum(row[a].l);
    if (r >= rows) continue;
    FinishedRow<float> finished = finish_row(
        row[a].m * p.softmax.scale, l, finished_empty<Variant::Score::kBias>(mask.empty(m0 + r), l));
    if constexpr (Variant::kDropout) finished.inv_l *= p.dropout.keep_scale;
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const int col = tx + kSide * e;
      if (col0 + col < s.head_dim_v)
        gO[int64_t(m0 + r) * p.o.row_stride + col] = from_float<T>(finished.out(acc[a][e]));
    }
    if (p.softmax.lse && blockIdx.y == 0 && tx == 0)
      p.softmax.lse[stats_row0(p, b, hq, seq) + m0 + r] = finished.lse;
  }
}

template <class Variant>
void launch(const AttnParams& p) {
  const TileGrid grid = make_tile_grid(p.sizes, kBlockM, kOutCols, "cuda_tiled");
  with_element_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    tiled_kernel<Variant, T><<<grid.dims, dim3(kSide, kSide), 0,
                               static_cast<cudaStream_t>(p.stream)>>>(p, grid.divisors);
    check_launch("tiled_kernel");
  });
}

}  // namespace

void tiled_forward(const AttnParams& p) {
  if (tiny_fits(p)) {
    tiny_forward(p);
    return;
  }
  with_variant<AnyVariant, BiasVariant>(p, [&](auto variant) { launch<decltype(variant)>(p); });
}

}  // namespace flashattn::cuda
