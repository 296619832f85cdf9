// Softcap and ALiBi (core/variant.h states them) on vectors of scores. The
// CPU kernels pre-scale Q, so their scores are already scaled (x = scale·q·k)
// and the variants apply to them as the public rule has it, with no raw-score
// form:  x → c·tanh(x/c), then x − slope_h·|i + off − j|. A bias or boolean
// mask (BiasVariant) comes last, x + bias_ij, read with scale 1 (its value as
// it is, a masked element −inf) a tile at a time, kLanes keys of a row per
// vector where its keys are contiguous.
// No include guard (see vec.h).

// The variants of one query head.
struct ScoreVariants {
  float cap = 0.0f;       // softcap c; 0: none
  float inv_cap = 0.0f;   // 1/c
  float slope = 0.0f;     // ALiBi's slope of the head; 0: none
  int32_t alignment = 0;  // off, within ±2^31 (both lengths are ints)

  bool any() const { return cap > 0.0f || slope != 0.0f; }

  // The scores x of rows `row` and keys `key` (lane by lane) after the
  // variants, and their derivative by x: 1 − tanh² under a softcap, else 1.
  Vec operator()(Vec x, IVec row, IVec key, Vec& derivative) const {
    derivative = splat(1.0f);
    if (cap > 0.0f) {
      const Vec t = tanh_lanes(x * splat(inv_cap));
      derivative = (1.0f - t) * (1.0f + t);
      x = splat(cap) * t;
    }
    if (slope != 0.0f) {
      // |i + off − j| < 2^31 for a row and a key of one sequence.
      const IVec distance = row + alignment - key;
      const IVec magnitude = distance < 0 ? -distance : distance;
      x -= splat(slope) * __builtin_convertvector(magnitude, Vec);
    }
    return x;
  }
  Vec operator()(Vec x, IVec row, IVec key) const {
    Vec derivative;
    return (*this)(x, row, key, derivative);
  }
};

inline ScoreVariants score_variants(const AttnParams& p, int hq, const RowMask& mask) {
  ScoreVariants v;
  if (p.scores.softcap > 0.0f) {
    v.cap = p.scores.softcap;
    v.inv_cap = 1.0f / p.scores.softcap;
  }
  if (p.scores.alibi_slopes) v.slope = p.scores.alibi_slopes[hq];
  v.alignment = int32_t(mask.alignment);
  return v;
}

// The bias of query head hq of batch index b on scaled scores: its values as
// they are, −inf where a boolean mask is zero.
inline BiasRows<float> scaled_bias(const AttnParams& p, int b, int hq) {
  return bias_rows<float>(p.scores.bias, 1.0f, b, hq);
}

// The addends of kLanes consecutive bias elements from `at` (key stride 1),
// one overload per element type (BiasRows::read's readers).
using FloatBias = BiasRows<float>;
inline Vec bias_lanes(const FloatBias::Reader<float, FloatBias::FloatValue>& reader,
                      const float* at) {
  return load(at) * splat(reader.inv_scale);
}
inline Vec bias_lanes(const FloatBias::Reader<uint16_t, FloatBias::F16Value>& reader,
                      const uint16_t* at) {
  return f16_to_vec(at) * splat(reader.inv_scale);
}
inline Vec bias_lanes(const FloatBias::Reader<uint16_t, FloatBias::BF16Value>& reader,
                      const uint16_t* at) {
  return bf16_to_vec(at) * splat(reader.inv_scale);
}
inline Vec bias_lanes(const FloatBias::Reader<uint8_t, FloatBias::BoolValue>& reader,
                      const uint8_t* at) {
  typedef uint8_t Bytes __attribute__((vector_size(kLanes)));
  Bytes attend;
  __builtin_memcpy(&attend, at, sizeof attend);
  // Widened through 16 bits: GCC converts bytes straight to 32-bit lanes one
  // byte at a time, but each of these steps with one vector instruction.
  const IVec lanes = __builtin_convertvector(__builtin_convertvector(attend, HVec), IVec);
  return lanes != 0 ? splat(0.0f) : splat(reader.masked);
}

// Lanes j < n of the addends of keys key0 + j of a bias row (`row`, from
// reader.row_at), 0 in the lanes past n.
template <typename Reader, typename T>
Vec bias_keys(const Reader& reader, const T* row, int64_t key0, int n) {
  if (n == kLanes && reader.key_stride == 1) return bias_lanes(reader, row + key0);
  Vec x{};
  for (int j = 0; j < n; ++j) x[j] = reader.at(row, key0 + j);
  return x;
}

// A tile's bias, with keys across the lanes: out[r·ld + j] (kAdd: +=) the
// addend of query row row0 + r and key n0 + j, for r < rows and j < width (a
// multiple of kLanes, at least cols), 0 for keys j >= cols. Every key below
// cols is read: all lie within the bias's seqlen_k, and the caller's mask
// hides those a row does not see after the bias is added.
template <bool kAdd>
void bias_tile(const BiasRows<float>& bias, int row0, int rows, int n0, int cols, int width,
               float* out, int64_t ld) {
  bias.read([&](const auto& reader) {
    for (int r = 0; r < rows; ++r) {
      const auto* row = reader.row_at(row0 + r);
      for (int j = 0; j < width; j += kLanes) {
        const Vec x = bias_keys(reader, row, n0 + j, std::clamp(cols - j, 0, kLanes));
        float* at = out + r * ld + j;
        store(at, kAdd ? load(at) + x : x);
      }
    }
  });
}

// A tile's bias, with the rows across the lanes (Sᵀ): out[j·ld + r] (kAdd:
// +=) the addend of query row row0 + r and key n0 + j, for r < lanes (a
// multiple of kLanes; rows past the bias's last read its last) and j < cols.
// Read as bias_tile reads (kLanes keys of a row at a time), then transposed
// in registers (vec.h, transpose_lanes) kLanes rows at a time.
template <bool kAdd>
void bias_tile_transposed(const BiasRows<float>& bias, int row0, int lanes, int n0, int cols,
                          float* out, int64_t ld) {
  bias.read([&](const auto& reader) {
    for (int r0 = 0; r0 < lanes; r0 += kLanes) {
      decltype(reader.row_at(0)) rows[kLanes];
      for (int i = 0; i < kLanes; ++i) rows[i] = reader.row_at(row0 + r0 + i);
      for (int j0 = 0; j0 < cols; j0 += kLanes) {
        const int keys = std::min(kLanes, cols - j0);
        Vec x[kLanes];
        for (int i = 0; i < kLanes; ++i) x[i] = bias_keys(reader, rows[i], n0 + j0, keys);
        transpose_lanes(x);
        for (int j = 0; j < keys; ++j) {
          float* at = out + (j0 + j) * ld + r0;
          store(at, kAdd ? load(at) + x[j] : x[j]);
        }
      }
    }
  });
}

// Requests the bias of query rows row0 + r (r < rows) and keys [n0, n0 + cols)
// into the cache, for a tile to come: the rows lie a row stride apart, too
// many streams for the hardware prefetchers to follow, and a bias too large
// for the cache otherwise costs its memory latency on every tile's rows
// (B1 H4 seqlen 2048 d64 fp32, one AVX-512 thread: the forward with an fp32
// bias 37 → 33 ms, 23 ms without a bias). Keys at a stride other than 1 (a
// bias laid out key-major) are left to the hardware. Inlined always: GCC
// infers a function whose only effect is __builtin_prefetch to be pure, and
// drops the call, whose result is unused.
[[gnu::always_inline]] inline void prefetch_bias(const BiasRows<float>& bias, int row0, int rows,
                                                 int n0, int cols) {
  if (bias.key_stride != 1 || cols <= 0) return;
  constexpr int64_t kLine = 64;
  const int64_t size = bias_type_size(bias.type);
  for (int r = 0; r < rows; ++r) {
    const int64_t row = std::min<int64_t>(row0 + r, bias.last_row);
    const char* first = static_cast<const char*>(bias.head) + (row * bias.row_stride + n0) * size;
    const char* last = first + (cols - 1) * size;
    for (const char* at = first; at <= last; at += kLine) __builtin_prefetch(at);
    __builtin_prefetch(last);
  }
}
