#include "normal.h"

#include "core/parallel.h"

namespace flashattn::harness {

void fill_normal(std::initializer_list<Buffer*> buffers, DType dtype, float stddev, uint64_t seed) {
  uint64_t stream = 0;
  for (Buffer* buf : buffers) {
    const int64_t rows = buf->shape[0] * buf->shape[1], row_elements = buf->shape[2] * buf->shape[3];
    parallel_for(rows, [&](int64_t row, int) {
      const int64_t b = row / buf->shape[1], i = row % buf->shape[1];
      for (int64_t h = 0; h < buf->shape[2]; ++h)
        for (int64_t e = 0; e < buf->shape[3]; ++e) {
          const uint64_t index = uint64_t(row * row_elements + h * buf->shape[3] + e);
          store_float(buf->host.data(), dtype, offset(*buf, b, i, h, e),
                      stddev * standard_normal(seed, stream, index));
        }
    });
    ++stream;
  }
}

}  // namespace flashattn::harness
