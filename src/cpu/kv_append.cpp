// A KV cache's appended keys and values on the host: row r of sequence b's
// k_new and v_new goes to key seqlens[b] + r of its cache (core/params.h,
// key_offset), before any backend attends. Lengths and pages were checked on
// the host (host tensors are always checked).
#include <cstring>
#include <tuple>

#include "core/parallel.h"
#include "cpu/backends.h"
#include "cpu/call_workers.h"

namespace flashattn::cpu {

void append_to_cache(const AttnParams& p) {
  const Sizes& s = p.sizes;
  const NewKeys& add = p.new_keys;
  const double row_bytes = double(s.heads_kv) * (s.head_dim + s.head_dim_v) * dtype_size(p.dtype);
  const WorkerCap cap(workers_worth_waking(0.0, 2.0 * row_bytes * s.batch * add.rows));
  parallel_for(int64_t(s.batch) * add.rows, [&](int64_t item, int) {
    const int b = int(item / add.rows), r = int(item % add.rows);
    const Sequence seq = sequence(p, b);
    const int64_t key = seq.seqlen_k - add.rows + r;
    for (int h = 0; h < s.heads_kv; ++h) {
      // k's rows are head_dim wide, v's head_dim_v.
      for (const auto& [cache, fresh, head_dim] :
           {std::tuple{p.k, add.k, s.head_dim}, std::tuple{p.v, add.v, s.head_dim_v}}) {
        char* dst = static_cast<char*>(cache.data) +
                    (key_offset(p, cache, b, seq, key) + h * cache.head_stride) * dtype_size(p.dtype);
        const char* src = static_cast<const char*>(fresh.data) +
                          (row_offset(fresh, b, r) + h * fresh.head_stride) * dtype_size(p.dtype);
        std::memcpy(dst, src, size_t(head_dim) * dtype_size(p.dtype));
      }
    }
  });
}

}  // namespace flashattn::cpu
