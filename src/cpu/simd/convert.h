// Rows of one head of a tensor, in any dtype, to and from fp32 tiles. No
// include guard (see vec.h).

// Row r of head h of batch b: the first element's index.
inline int64_t row_index(const TensorRef& t, int b, int h, int64_t row) {
  return b * t.batch_stride + row * t.row_stride + h * t.head_stride;
}

// Elements [at, at + kLanes) of a buffer of `dtype` as floats.
inline Vec load_lanes(DType dtype, const void* data, int64_t at) {
  if (dtype == DType::f32) return load(static_cast<const float*>(data) + at);
  if (dtype == DType::bf16) return bf16_to_vec(static_cast<const uint16_t*>(data) + at);
  return f16_to_vec(static_cast<const uint16_t*>(data) + at);
}

// dst[r·ld + c] = scale·t[row0 + r][c] for c < head_dim, 0 for head_dim <= c < ld.
inline void load_tile(DType dtype, const TensorRef& t, int head_dim, int b, int h, int row0,
                      int rows, float* dst, int ld, float scale = 1.0f) {
  const int full = head_dim / kLanes * kLanes;
  for (int r = 0; r < rows; ++r) {
    const int64_t base = row_index(t, b, h, row0 + r);
    float* out = dst + int64_t(r) * ld;
    for (int c = 0; c < full; c += kLanes) {
      const Vec x = load_lanes(dtype, t.data, base + c);
      store(out + c, scale == 1.0f ? x : x * splat(scale));
    }
    for (int c = full; c < head_dim; ++c) out[c] = load_float(t.data, dtype, base + c) * scale;
    for (int c = head_dim; c < ld; ++c) out[c] = 0.0f;
  }
}

// dst[e·ld + r] = scale·t[row0 + r][e] for r < rows; 0 for rows <= r < ld (a
// multiple of kLanes). kLanes rows at a time, read as vectors along head_dim
// and transposed in registers (vec.h, transpose_lanes): done element by
// element, it made most of a 64-row tile's fixed cost, which at head_dim 128
// came to about two key tiles' products on a Xeon (docs/perf/cpu.md v14).
inline void load_transposed(DType dtype, const TensorRef& t, int head_dim, int b, int h, int row0,
                            int rows, float* dst, int ld, float scale = 1.0f) {
  const int full = head_dim / kLanes * kLanes;
  const Vec by = splat(scale);
  for (int r0 = 0; r0 < ld; r0 += kLanes) {
    const int real = std::clamp(rows - r0, 0, kLanes);
    int64_t base[kLanes];
    for (int i = 0; i < real; ++i) base[i] = row_index(t, b, h, row0 + r0 + i);
    for (int c = 0; c < full; c += kLanes) {
      Vec x[kLanes];
      for (int i = 0; i < kLanes; ++i)
        x[i] = i < real ? load_lanes(dtype, t.data, base[i] + c) * by : Vec{};
      transpose_lanes(x);
      for (int e = 0; e < kLanes; ++e) store(dst + int64_t(c + e) * ld + r0, x[e]);
    }
    for (int e = full; e < head_dim; ++e)
      for (int i = 0; i < kLanes; ++i)
        dst[int64_t(e) * ld + r0 + i] = i < real ? load_float(t.data, dtype, base[i] + e) * scale : 0.0f;
  }
}

// t[row0 + r][c] = src[r·ld + c]·row_scale[r]·scale (row_scale null: 1), in
// t's dtype.
inline void store_tile(DType dtype, const TensorRef& t, int head_dim, int b, int h, int row0,
                       int rows, const float* src, int ld, const float* row_scale = nullptr,
                       float scale = 1.0f) {
  for (int r = 0; r < rows; ++r) {
    const int64_t base = row_index(t, b, h, row0 + r);
    const float* in = src + int64_t(r) * ld;
    const float s = (row_scale ? row_scale[r] : 1.0f) * scale;
    if (dtype == DType::f32) {
      float* out = static_cast<float*>(t.data) + base;
      int c = 0;
      for (; c + kLanes <= head_dim; c += kLanes) store(out + c, load(in + c) * splat(s));
      for (; c < head_dim; ++c) out[c] = in[c] * s;
    } else {
      for (int c = 0; c < head_dim; ++c) store_float(t.data, dtype, base + c, in[c] * s);
    }
  }
}
