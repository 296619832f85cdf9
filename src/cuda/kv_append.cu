// A KV cache's appended keys and values on the GPU (backends.h,
// append_to_cache): one block per (sequence, new row), its threads over the
// row's heads and columns. Lengths and pages are checked again here, so that an
// unchecked call never writes outside the cache: a sequence that does not fit,
// or a row whose page is out of range, is left unwritten.
#include <cstdint>

#include "cuda/backends.h"
#include "cuda/common/check.h"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 128;

template <typename Word>
__global__ void __launch_bounds__(kThreads) append_kernel(const AttnParams p) {
  const Sizes& s = p.sizes;
  const KeyCache& c = p.seqs.cache;
  const NewKeys& add = p.new_keys;
  const int b = int(blockIdx.x / add.rows), r = int(blockIdx.x % add.rows);
  const int32_t cached = c.seqlens[b];
  if (!c.fits(cached)) return;
  const Sequence seq = sequence(p, b);
  const int64_t key = int64_t(cached) + r;
  if (c.paged() &&
      !c.page_in_range(c.block_table[int64_t(b) * c.pages_per_sequence + key / c.page_size]))
    return;
  const int64_t k_row = key_offset(p, p.k, b, seq, key), v_row = key_offset(p, p.v, b, seq, key);
  for (int64_t e = threadIdx.x; e < int64_t(s.heads_kv) * s.head_dim; e += kThreads) {
    const int h = int(e / s.head_dim), col = int(e % s.head_dim);
    static_cast<Word*>(p.k.data)[k_row + h * p.k.head_stride + col] =
        static_cast<const Word*>(add.k.data)[row_offset(add.k, b, r) + h * add.k.head_stride + col];
  }
  for (int64_t e = threadIdx.x; e < int64_t(s.heads_kv) * s.head_dim_v; e += kThreads) {
    const int h = int(e / s.head_dim_v), col = int(e % s.head_dim_v);
    static_cast<Word*>(p.v.data)[v_row + h * p.v.head_stride + col] =
        static_cast<const Word*>(add.v.data)[row_offset(add.v, b, r) + h * add.v.head_stride + col];
  }
}

}  // namespace

void append_to_cache(const AttnParams& p) {
  DeviceGuard device(p.device_index);
  const unsigned blocks = unsigned(int64_t(p.sizes.batch) * p.new_keys.rows);
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  if (p.dtype == DType::f32) append_kernel<uint32_t><<<blocks, kThreads, 0, stream>>>(p);
  else append_kernel<uint16_t><<<blocks, kThreads, 0, stream>>>(p);
  check_launch("append_kernel");
}

}  // namespace flashattn::cuda
