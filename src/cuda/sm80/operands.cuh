// The operands of a warp's mma.sync product (m16n8k16, fp32 accumulation),
// read by ldmatrix from swizzled shared tiles (smem_tile.cuh) in either storage
// order, and the product itself. A is m × k and B is k × n; each operand type
// says which of its dimensions runs along the tile's rows:
//   AStoredMK: tile rows are A's rows (Q in Q·Kᵀ),
//   AStoredKM: tile rows are A's columns (Pᵀ read from P),
//   BStoredNK: tile rows are B's columns (K in Q·Kᵀ),
//   BStoredKN: tile rows are B's rows (V in P·V).
// Offsets along the tile's rows are free; an offset along its columns follows
// SmemTile::lane_at's rule. load(frag, i, kk) gives the fragment of m16 slice i
// (A) or of n8 columns 2i and 2i + 1 (B, as mma_two_tiles takes them) at k step kk.
#pragma once

#include <cstdint>

#include "cuda/common/mma_16bit.cuh"
#include "cuda/sm80/smem_tile.cuh"

namespace flashattn::cuda::sm80 {

// A[m][k] = tile(m0 + m, k).
template <typename Tile>
struct AStoredMK {
  typename Tile::Lane ln;
  __device__ __forceinline__ AStoredMK(uint32_t base, int m0, int lane)
      : ln(Tile::lane(base, m0 + lane % 16, lane / 16)) {}
  __device__ __forceinline__ void load(uint32_t (&a)[4], int mt, int kk) const {
    ldmatrix_x4(a, Tile::address(ln, 16 * mt, kk));
  }
};

// A[m][k] = tile(k, m0 + m): each 8 × 8 matrix transposed by ldmatrix.
template <typename Tile>
struct AStoredKM {
  typename Tile::Lane ln;
  __device__ __forceinline__ AStoredKM(uint32_t base, int m0, int lane)
      : ln(Tile::lane_at(base, lane % 8 + 8 * (lane / 16), (lane / 8) % 2, m0)) {}
  __device__ __forceinline__ void load(uint32_t (&a)[4], int mt, int kk) const {
    ldmatrix_x4_trans(a, Tile::address(ln, 16 * kk, mt));
  }
};

// B[k][n] = tile(n0 + n, k).
template <typename Tile>
struct BStoredNK {
  typename Tile::Lane ln;
  __device__ __forceinline__ BStoredNK(uint32_t base, int n0, int lane)
      : ln(Tile::lane(base, n0 + 8 * (lane / 16) + lane % 8, (lane / 8) % 2)) {}
  __device__ __forceinline__ void load(uint32_t (&b)[4], int np, int kk) const {
    ldmatrix_x4(b, Tile::address(ln, 16 * np, kk));
  }
};

// B[k][n] = tile(k, n0 + n): each 8 × 8 matrix transposed by ldmatrix.
template <typename Tile>
struct BStoredKN {
  typename Tile::Lane ln;
  __device__ __forceinline__ BStoredKN(uint32_t base, int n0, int lane)
      : ln(Tile::lane_at(base, lane % 8 + 8 * ((lane / 8) % 2), lane / 16, n0)) {}
  __device__ __forceinline__ void load(uint32_t (&b)[4], int np, int kk) const {
    ldmatrix_x4_trans(b, Tile::address(ln, 16 * kk, np));
  }
};

// c[mt][nt] += A·B over kKSteps steps of 16 along k: per step, the kMT A
// fragments once, then each B fragment pair once for all of them.
template <typename T, int kKSteps, int kMT, int kNT, typename A, typename B>
__device__ __forceinline__ void warp_mma(float (&c)[kMT][kNT][4], const A& a_operand,
                                         const B& b_operand) {
  static_assert(kNT % 2 == 0, "B fragments come in pairs of n8 columns");
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    uint32_t a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) a_operand.load(a[mt], mt, kk);
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      uint32_t b[4];
      b_operand.load(b, np, kk);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) mma_two_tiles<T>(c[mt][2 * np], c[mt][2 * np + 1], a[mt], b);
    }
  }
}

}  // namespace flashattn::cuda::sm80
