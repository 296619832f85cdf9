// The wide forward's K and V in sector-aligned rows (aligned_kv.h).
//
// Why: TMA reads a box row as 64 columns, 128 bytes (the swizzle's width).
// Where a row starts 16 bytes past a 32-byte sector, each such piece touches
// five sectors in two 128-byte lines instead of four: ncu counted 1.40× the
// sectors and twice the L2 requests at head_dim 264 against 288. The wide
// kernels read K and V from L2 once per 64-row query tile, and on the same
// data in 128-byte-aligned rows they ran 1.06–1.25× faster (H200, bf16, 4096
// and 8192 keys, 8 query heads on 8 or 4 kv heads; docs/perf/cuda_wgmma.md,
// v4.36). The copy moves K's and V's bytes twice at the copy rate, so it pays
// where each kv head has enough query rows to read them often
// (kMinRowsPerKvHead). Below 257 the kernels were not measured to need it.
#include "cuda/sm90/aligned_kv.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/grid_stride.h"
#include "cuda/sm90/row_steps.h"

namespace flashattn::cuda::sm90 {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kSectorBytes = 32;
constexpr int64_t kElementBytes = 2;
// Rows padded to 64 bytes, as head_dim 288's are, which ran at the speed of
// 128-byte-aligned rows.
constexpr int kPitchElements = 32;
// The query rows that read a kv head's K and V (the rows of its group's heads,
// halved under a causal mask, where each row sees half the keys on average)
// for the copy to pay. H200, bf16, head dims 264, 312 and 392, against the
// same build without the copy: at 2048 such rows (4096 × 4096 causal, 8 kv
// heads) 0.93–0.99×, at 4096 1.01–1.10×, at 8192 and more 1.05–1.14×.
constexpr int64_t kMinRowsPerKvHead = 4096;
constexpr int kMinWideHeadDim = 257;

// Whether some row of t starts off a 32-byte sector.
bool rows_off_sectors(const TensorRef& t, int seqlen, int heads, int batch) {
  if (reinterpret_cast<uintptr_t>(t.data) % kSectorBytes != 0) return true;
  for (const RowStep& d : row_steps(t, seqlen, heads, batch))
    if (d.extent > 1 && d.stride * kElementBytes % kSectorBytes != 0) return true;
  return false;
}

// to[((b·seqlen + i)·heads + h)·pitch_chunks + c] = from's (b, i, h) row's
// 16-byte chunk c, for c < chunks: a warp per row, so a warp's loads and stores
// are each one contiguous run. The rows are 16-byte aligned with whole chunks
// (TMA's rules, which cuda_wgmma checks before it runs).
__global__ void __launch_bounds__(kThreads)
    copy_rows_kernel(const TensorRef from, uint4* to, int64_t rows, int seqlen, int heads,
                     int chunks, int pitch_chunks) {
  const int lane = int(threadIdx.x) % 32;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + int(threadIdx.x) / 32; row < rows;
       row += int64_t(gridDim.x) * kWarps) {
    const int64_t bi = row / heads;
    const int64_t h = row - bi * heads;
    const int64_t b = bi / seqlen;
    const int64_t i = bi - b * seqlen;
    const uint4* src = reinterpret_cast<const uint4*>(
        static_cast<const uint16_t*>(from.data) + b * from.batch_stride + i * from.row_stride +
        h * from.head_stride);
    uint4* dst = to + row * pitch_chunks;
    for (int c = lane; c < chunks; c += 32) dst[c] = __ldg(src + c);
  }
}

// t's (batch, seqlen, heads, cols), `rows` rows, into `to`, dense with rows of
// `pitch` elements; the view of the copy.
TensorRef copy_rows(const TensorRef& t, int64_t rows, int cols, int pitch, const Sizes& s,
                    void* to, void* stream) {
  constexpr int kChunkElements = 16 / kElementBytes;
  copy_rows_kernel<<<grid_stride_blocks(rows, kWarps), kThreads, 0,
                     static_cast<cudaStream_t>(stream)>>>(
      t, static_cast<uint4*>(to), rows, s.seqlen_k, s.heads_kv, cols / kChunkElements,
      pitch / kChunkElements);
  check_launch("cuda_wgmma copy_rows_kernel");
  TensorRef copy;
  copy.data = to;
  copy.head_stride = pitch;
  copy.row_stride = int64_t(s.heads_kv) * pitch;
  copy.batch_stride = int64_t(s.seqlen_k) * copy.row_stride;
  return copy;
}

int padded(int cols) { return (cols + kPitchElements - 1) / kPitchElements * kPitchElements; }

}  // namespace

AttnParams with_aligned_kv(const AttnParams& p, std::optional<Scratch>& scratch) {
  // Packed, the tensors hold one batch index of the total lengths, and the
  // longest sequence's rows stand for the batch's.
  const Sizes s = storage_sizes(p);
  const bool k_off = rows_off_sectors(p.k, s.seqlen_k, s.heads_kv, s.batch);
  const bool v_off = rows_off_sectors(p.v, s.seqlen_k, s.heads_kv, s.batch);
  const int64_t rows_per_kv_head =
      int64_t(p.sizes.seqlen_q) * p.sizes.group() / (p.mask.bounded_above ? 2 : 1);
  const int64_t rows = int64_t(s.batch) * s.seqlen_k * s.heads_kv;
  if (s.widest_head_dim() < kMinWideHeadDim || !(k_off || v_off) ||
      rows_per_kv_head < kMinRowsPerKvHead || rows == 0)
    return p;
  const size_t k_bytes = k_off ? size_t(rows) * padded(s.head_dim) * kElementBytes : 0;
  const size_t v_bytes = v_off ? size_t(rows) * padded(s.head_dim_v) * kElementBytes : 0;
  scratch.emplace(k_bytes + v_bytes, p.device_index, p.stream);
  char* base = static_cast<char*>(scratch->data());
  AttnParams aligned = p;
  if (k_off) aligned.k = copy_rows(p.k, rows, s.head_dim, padded(s.head_dim), s, base, p.stream);
  if (v_off)
    aligned.v =
        copy_rows(p.v, rows, s.head_dim_v, padded(s.head_dim_v), s, base + k_bytes, p.stream);
  return aligned;
}

}  // namespace flashattn::cuda::sm90
