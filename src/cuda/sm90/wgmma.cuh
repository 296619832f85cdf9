// wgmma plumbing for sm_90a: shared-memory matrix descriptors for 128-byte
// swizzled tiles, and the fence / commit / wait protocol around the asynchronous
// products of wgmma_ops.cuh.
//
// Tiles are stored as 64-column panels: each row of a panel is 128 bytes (64
// 16-bit elements) and its eight 16-byte chunks are XOR-swizzled by row % 8, the
// layout TMA's SWIZZLE_128B writes. Panels start on 1024-byte boundaries, so the
// descriptors' base-offset field stays 0.
#pragma once

#include <cstdint>

namespace flashattn::cuda::sm90 {

// Byte offset of the 16-bit element (row, col) in a tile of `rows` rows.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int col, int rows) {
  const uint32_t in_panel = uint32_t(row) * 128 + uint32_t(col % 64) * 2;
  return uint32_t(col / 64) * rows * 128 + (in_panel ^ ((uint32_t(row) % 8) << 4));
}

// Matrix descriptor: start address, leading and stride byte offsets (all >> 4),
// 128-byte swizzle (mode 1 in bits 62–63). For K-major operands (Q and K,
// head_dim contiguous) the stride offset is 1024 B, eight 128-byte rows; for the
// MN-major V the leading offset is the distance between 64-column panels.
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t smem_addr, uint32_t leading_bytes,
                                                    uint32_t stride_bytes) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | uint64_t((leading_bytes & 0x3FFFF) >> 4) << 16 |
         uint64_t((stride_bytes & 0x3FFFF) >> 4) << 32 | 1ull << 62;
}

// Moves a descriptor's start address by `bytes` (a multiple of 16).
__device__ __forceinline__ uint64_t advance(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

// Orders this warpgroup's register writes (accumulators, A fragments) before
// the wgmma that reads them.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Returns once at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across a wait.
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Four 8×8 matrices of 16-bit elements to shared memory; lane L gives the address
// of row L % 8 of matrix L / 8 (the transpose of ldmatrix's distribution).
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_addr, uint32_t r0, uint32_t r1,
                                            uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// Zeros over the 16 bytes at smem_addr (16-byte aligned).
__device__ __forceinline__ void store_zero_16(uint32_t smem_addr) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(smem_addr), "r"(0) : "memory");
}

// Rows [from, kRows) of a tile of kPanels 64-column panels of kRows rows,
// zeroed by a warp's lanes: a row is 128 bytes of each panel, whatever the
// swizzle did within it.
template <int kPanels, int kRows>
__device__ __forceinline__ void zero_rows(uint8_t* tile, int from) {
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
#pragma unroll
  for (int panel = 0; panel < kPanels; ++panel)
    for (int chunk = 8 * from + int(threadIdx.x) % 32; chunk < 8 * kRows; chunk += 32)
      store_zero_16(at + panel * kRows * 128 + chunk * 16);
}

}  // namespace flashattn::cuda::sm90
