// The last step of the tensor-core backwards (cuda_mma, cuda_wgmma): dq = scale·(the fp32 sums the key tiles
// added), rounded to the dtype. A thread per 8 columns of two rows 8 apart, in
// dq's (batch, row, head) order, so neighbouring threads write neighbouring memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/element.cuh"
#include "cuda/common/grid_stride.h"
#include "cuda/common/dq_accum.cuh"
#include "cuda/common/dq_output.h"
#include "cuda/common/row_dot.h"
#include "cuda/device.h"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 256;

// The sequence holding row r of a packed batch: the last b with cu[b] <= r.
__device__ __forceinline__ int sequence_of(const int32_t* cu, int batch, int64_t r) {
  int lo = 0, hi = batch;  // cu[lo] <= r < cu[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (cu[mid] <= r) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Over the tensors' own sizes s (packed: batch 1 of every sequence's rows). A
// thread takes 8 columns of rows i and i + 8 of a sequence (i % 16 < 8): they
// share the sums' 16-byte quads (dq_accum.cuh), so its four 16-byte loads are
// 64 contiguous bytes, all used. (A thread per row used half of each sector it
// read, the rest read again by row i + 8's thread: 2.5 TB/s on the H200.)
// Threads go columns fastest, then heads, then row slots, so a warp writes
// contiguous memory. Dense, a sequence's slots are its rows' pairs; packed,
// its rows, those with i % 16 ≥ 8 idle.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(TensorRef dq, Sizes s, const float* accum, DqLayout layout, const int32_t* cu_q,
              int sequences, float scale, bool vec16) {
  const int chunks = (s.head_dim + 7) / 8;
  const int64_t slots = layout.packed ? s.seqlen_q : (int64_t(s.seqlen_q) + 15) / 16 * 8;
  const int64_t total = int64_t(s.batch) * slots * s.heads_q * chunks;
  for (int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * kThreads) {
    const int c0 = 8 * int(e % chunks);
    const int64_t h = e / chunks % s.heads_q, slot = e / chunks / s.heads_q % slots;
    const int64_t b = e / chunks / s.heads_q / slots;
    // The slot's sequence, its first row r0 in the tensor, its length, and
    // the pair's first row i in it.
    int seq = int(b);
    int64_t q_row0 = 0, i = 16 * (slot / 8) + slot % 8, length = s.seqlen_q;
    if (layout.packed) {
      seq = sequence_of(cu_q, sequences, slot);
      q_row0 = cu_q[seq];
      i = slot - q_row0;
      length = cu_q[seq + 1] - q_row0;
      if (i % 16 >= 8) continue;
    }
    if (i >= length) continue;
    // Quad j holds columns c0 + 2j and c0 + 2j + 1 of rows i and i + 8.
    const float4* from = reinterpret_cast<const float4*>(
        accum + layout.base(seq, int(h), q_row0) + dq_tile_offset(i, c0, layout.cols) +
        dq_in_tile_offset(int(i % 16), 0));
    alignas(16) T upper[8], lower[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 quad = from[j];
      upper[2 * j] = from_float<T>(scale * quad.x);
      upper[2 * j + 1] = from_float<T>(scale * quad.y);
      lower[2 * j] = from_float<T>(scale * quad.z);
      lower[2 * j + 1] = from_float<T>(scale * quad.w);
    }
    const auto store = [&](const T (&row)[8], int64_t r) {
      T* to = static_cast<T*>(dq.data) + b * dq.batch_stride + r * dq.row_stride +
              h * dq.head_stride + c0;
      if (vec16 && c0 + 8 <= s.head_dim) {
        *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(row);
      } else {
        for (int j = 0; j < 8 && c0 + j < s.head_dim; ++j) to[j] = row[j];
      }
    };
    store(upper, q_row0 + i);
    if (i + 8 < length) store(lower, q_row0 + i + 8);
  }
}

}  // namespace

namespace {

DqLayout dq_layout(const BwdParams& p, int query_tiles, int block_m, int cols) {
  const Sizes& s = p.sizes;
  if (!p.seqs.packed()) return {int64_t(query_tiles) * block_m, block_m, cols, s.heads_q, false};
  return {p.seqs.total_q + int64_t(s.batch) * (block_m + 16) + block_m, block_m, cols, s.heads_q,
          true};
}

size_t accum_bytes(const BwdParams& p, const DqLayout& layout) {
  const int64_t heads = int64_t(layout.packed ? 1 : p.sizes.batch) * p.sizes.heads_q;
  return size_t(heads * layout.head_rows * layout.cols) * sizeof(float);
}

// DqSums::turn_group(): the number of slices whose sums, Q and dO fit in half
// of L2, at least one; 0 in the default mode. The bytes a slice's key tiles share in L2 are its
// query heads' fp32 sums and their 16-bit Q and dO rows.
int slices_in_l2(const BwdParams& p, int cols) {
  const Sizes& s = p.sizes;
  if (!p.grad.deterministic) return 0;
  const int64_t slices = int64_t(s.batch) * s.heads_kv;
  const int64_t rows = p.seqs.packed() ? p.seqs.total_q / std::max(s.batch, 1) : s.seqlen_q;
  const int64_t bytes = int64_t(s.group()) * std::max<int64_t>(rows, 1) *
                        (int64_t(cols) * sizeof(float) +
                         int64_t(s.head_dim + s.head_dim_v) * sizeof(uint16_t));
  const int64_t fit = int64_t(l2_cache_bytes(p.device_index)) / 2 / bytes;
  return int(std::clamp<int64_t>(fit, 1, std::max<int64_t>(slices, 1)));
}

}  // namespace

DqSums::DqSums(const BwdParams& p, int query_tiles, int block_m, int cols, size_t extra_bytes)
    : layout_(dq_layout(p, query_tiles, block_m, cols)),
      accum_bytes_(accum_bytes(p, layout_)),
      turn_bytes_(p.grad.deterministic
                      ? (size_t(p.sizes.batch) * p.sizes.heads_q * query_tiles * sizeof(int) + 15) /
                            16 * 16
                      : 0),
      scratch_(accum_bytes_ + turn_bytes_ + extra_bytes, p.device_index, p.stream),
      turns_(p.grad.deterministic
                 ? reinterpret_cast<int*>(static_cast<char*>(scratch_.data()) + accum_bytes_)
                 : nullptr),
      turn_group_(slices_in_l2(p, cols)) {
  launch_row_dot(p, scratch_.data(), accum_bytes_ + turn_bytes_ + extra_bytes);
}

void write_dq(const BwdParams& p, const float* accum, const DqLayout& layout) {
  const Sizes s = storage_sizes(p);
  const int64_t slots = layout.packed ? s.seqlen_q : (int64_t(s.seqlen_q) + 15) / 16 * 8;
  const int64_t total = int64_t(s.batch) * slots * s.heads_q * ((s.head_dim + 7) / 8);
  const unsigned blocks = grid_stride_blocks(total, kThreads);
  const bool vec16 = rows_16b_aligned(p.grad.dq, 2);
  with_element_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) == 2)
      dq_kernel<T><<<blocks, kThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(
          p.grad.dq, s, accum, layout, p.seqs.cu_seqlens_q, p.sizes.batch, p.softmax.scale, vec16);
  });
  check_launch("dq_kernel");
}

}  // namespace flashattn::cuda
