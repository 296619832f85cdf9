// A KV cache's appended keys and values on the host: row r of sequence b's
// k_new and v_new goes to key seqlens[b] + r of its cache (core/params.h,
// key_offset), before any backend attends. Lengths and pages were checked on
// the host (host tensors are always checked).
#include <cstring>

#include "core/parallel.h"
#include "cpu/backends.h"

namespace flashattn::cpu {

void append_to_cache(const AttnParams& p) {
  const Sizes& s = p.sizes;
  const NewKeys& add = p.new_keys;
  const size_t row_bytes = size_t(s.head_dim) * dtype_size(p.dtype);
  parallel_for(int64_t(s.batch) * add.rows, [&](int64_t item, int) {
    const int b = int(item / add.rows), r = int(item % add.rows);
    const Sequence seq = sequence(p, b);
    const int64_t key = seq.seqlen_k - add.rows + r;
    for (int h = 0; h < s.heads_kv; ++h) {
      for (const auto& [cache, fresh] : {std::pair{p.k, add.k}, std::pair{p.v, add.v}}) {
        char* dst = static_cast<char*>(cache.data) +
                    (key_offset(p, cache, b, seq, key) + h * cache.head_stride) * dtype_size(p.dtype);
        const char* src = static_cast<const char*>(fresh.data) +
                          (row_offset(fresh, b, r) + h * fresh.head_stride) * dtype_size(p.dtype);
        std::memcpy(dst, src, row_bytes);
      }
    }
  });
}

}  // namespace flashattn::cpu
