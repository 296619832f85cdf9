// A host tensor in the (batch, seqlen, heads, head_dim) view geometry the
// harness's problems use, with a device mirror for CUDA problems.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/half.h"
#include "device_memory.h"
#include "flashattn/flashattn.hpp"

namespace flashattn::harness {

struct Buffer {
  std::vector<uint8_t> host;
  DeviceBuffer device;
  int64_t shape[4] = {};
  int64_t stride[4] = {};
};

// Shapes buf as (batch, seqlen, heads, head_dim) in dtype, zero-filled: row-major;
// padded, a slice of a (heads + 1, head_dim + pad) tensor; transposed, memory
// in (batch, heads, seqlen, head_dim) order.
inline void layout(Buffer& buf, DType dtype, int batch, int seqlen, int heads, int head_dim,
                   bool padded, int pad, bool transposed) {
  const int64_t shape[4] = {batch, seqlen, heads, head_dim};
  std::copy(shape, shape + 4, buf.shape);
  int64_t elements;
  if (transposed) {
    const int64_t stride[4] = {int64_t(heads) * seqlen * head_dim, head_dim,
                               int64_t(seqlen) * head_dim, 1};
    std::copy(stride, stride + 4, buf.stride);
    elements = int64_t(batch) * heads * seqlen * head_dim;
  } else {
    const int64_t h = padded ? heads + 1 : heads, d = padded ? head_dim + pad : head_dim;
    const int64_t stride[4] = {seqlen * h * d, h * d, d, 1};
    std::copy(stride, stride + 4, buf.stride);
    elements = int64_t(batch) * seqlen * h * d;
  }
  buf.host.assign(size_t(elements) * dtype_size(dtype), 0);
}

inline int64_t offset(const Buffer& buf, int64_t b, int64_t s, int64_t h, int64_t c) {
  return b * buf.stride[0] + s * buf.stride[1] + h * buf.stride[2] + c;
}

// Every element of the buffers' views drawn from draw(), stored in dtype.
template <typename Draw>
void fill(std::initializer_list<Buffer*> buffers, DType dtype, Draw&& draw) {
  for (Buffer* buf : buffers)
    for (int64_t b = 0; b < buf->shape[0]; ++b)
      for (int64_t i = 0; i < buf->shape[1]; ++i)
        for (int64_t h = 0; h < buf->shape[2]; ++h)
          for (int64_t e = 0; e < buf->shape[3]; ++e)
            store_float(buf->host.data(), dtype, offset(*buf, b, i, h, e), draw());
}

// A view of buf's host bytes or, on a GPU, of its device mirror.
inline TensorView view_of(const Buffer& buf, DType dtype, Device device) {
  TensorView t;
  t.data = device.kind == DeviceKind::cuda ? buf.device.data()
                                           : const_cast<uint8_t*>(buf.host.data());
  t.dtype = dtype;
  t.device = device;
  std::copy(buf.shape, buf.shape + 4, t.shape);
  std::copy(buf.stride, buf.stride + 4, t.stride);
  return t;
}

// A host view of batch index b of buf, as a batch of one.
inline TensorView batch_view(const Buffer& buf, DType dtype, int64_t b) {
  TensorView t = view_of(buf, dtype, Device{});
  t.data = static_cast<uint8_t*>(t.data) + offset(buf, b, 0, 0, 0) * int64_t(dtype_size(dtype));
  t.shape[0] = 1;
  return t;
}

// A host view of rows [row0, row0 + rows) of batch index 0 of buf: one
// sequence of a packed batch, as a dense batch of one.
inline TensorView rows_view(const Buffer& buf, DType dtype, int64_t row0, int64_t rows) {
  TensorView t = view_of(buf, dtype, Device{});
  t.data = static_cast<uint8_t*>(t.data) + offset(buf, 0, row0, 0, 0) * int64_t(dtype_size(dtype));
  t.shape[0] = 1;
  t.shape[1] = rows;
  return t;
}

}  // namespace flashattn::harness
