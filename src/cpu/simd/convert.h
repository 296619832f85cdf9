// Rows of one head of a tensor, in any dtype, to and from fp32 tiles. No
// include guard (see vec.h).

// Row r of head h of batch b: the first element's index.
inline int64_t row_index(const TensorRef& t, int b, int h, int64_t row) {
  return b * t.batch_stride + row * t.row_stride + h * t.head_stride;
}

// dst[r·ld + c] = scale·t[row0 + r][c] for c < head_dim, 0 for head_dim <= c < ld.
inline void load_tile(DType dtype, const TensorRef& t, int head_dim, int b, int h, int row0,
                      int rows, float* dst, int ld, float scale = 1.0f) {
  const int full = head_dim / kLanes * kLanes;
  for (int r = 0; r < rows; ++r) {
    const int64_t base = row_index(t, b, h, row0 + r);
    float* out = dst + int64_t(r) * ld;
    for (int c = 0; c < full; c += kLanes) {
      Vec x;
      if (dtype == DType::f32) x = load(static_cast<const float*>(t.data) + base + c);
      else if (dtype == DType::bf16) x = bf16_to_vec(static_cast<const uint16_t*>(t.data) + base + c);
      else x = f16_to_vec(static_cast<const uint16_t*>(t.data) + base + c);
      store(out + c, scale == 1.0f ? x : x * splat(scale));
    }
    for (int c = full; c < head_dim; ++c) out[c] = load_float(t.data, dtype, base + c) * scale;
    for (int c = head_dim; c < ld; ++c) out[c] = 0.0f;
  }
}

// dst[e·ld + r] = scale·t[row0 + r][e] for r < rows; 0 for rows <= r < ld.
inline void load_transposed(DType dtype, const TensorRef& t, int head_dim, int b, int h, int row0,
                            int rows, float* dst, int ld, float scale = 1.0f) {
  for (int e = 0; e < head_dim; ++e) std::fill(dst + int64_t(e) * ld + rows, dst + int64_t(e + 1) * ld, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const int64_t base = row_index(t, b, h, row0 + r);
    for (int e = 0; e < head_dim; ++e) dst[int64_t(e) * ld + r] = load_float(t.data, dtype, base + e) * scale;
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
