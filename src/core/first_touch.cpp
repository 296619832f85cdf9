#include "core/first_touch.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/parallel.h"

namespace flashattn {

void touch_output_pages(const TensorRef& t, DType dtype, int batch, int rows, int heads,
                        int head_dim) {
  if (head_dim <= 0) return;
  constexpr int64_t kPageBytes = 4096;  // the smallest page: a larger one is written more than once
  constexpr int64_t kRowsPerItem = 64;
  const int64_t element = int64_t(dtype_size(dtype));
  const int64_t page_step = std::max<int64_t>(1, kPageBytes / element);
  const int64_t lines = int64_t(batch) * rows;  // (batch, row) pairs
  char* const base = static_cast<char*>(t.data);
  parallel_for((lines + kRowsPerItem - 1) / kRowsPerItem, [&](int64_t item, int) {
    // One write per page: rows of a few hundred bytes share pages, and each
    // write is a cache line fetched for nothing where the page was mapped.
    uintptr_t last_page = UINTPTR_MAX;
    const auto touch = [&](char* at) {
      const uintptr_t page = reinterpret_cast<uintptr_t>(at) / kPageBytes;
      if (page == last_page) return;
      std::memset(at, 0, size_t(element));
      last_page = page;
    };
    const int64_t end = std::min(lines, (item + 1) * kRowsPerItem);
    for (int64_t line = item * kRowsPerItem; line < end; ++line) {
      const int64_t b = line / rows, r = line % rows;
      for (int h = 0; h < heads; ++h) {
        char* row = base + (b * t.batch_stride + r * t.row_stride + h * t.head_stride) * element;
        // Elements a page apart and the last: no page of the row is skipped.
        for (int64_t c = 0; c < head_dim; c += page_step) touch(row + c * element);
        touch(row + (head_dim - 1) * element);
      }
    }
  });
}

void touch_forward_outputs(const AttnParams& p) {
  const Sizes sz = storage_sizes(p);
  touch_output_pages(p.o, p.dtype, sz.batch, sz.seqlen_q, sz.heads_q, sz.head_dim_v);
}

void touch_backward_outputs(const BwdParams& p) {
  const Sizes sz = storage_sizes(p);
  touch_output_pages(p.grad.dq, p.dtype, sz.batch, sz.seqlen_q, sz.heads_q, sz.head_dim);
  touch_output_pages(p.grad.dk, p.dtype, sz.batch, sz.seqlen_k, sz.heads_kv, sz.head_dim);
  touch_output_pages(p.grad.dv, p.dtype, sz.batch, sz.seqlen_k, sz.heads_kv, sz.head_dim_v);
}

}  // namespace flashattn
