// Vectors of kLanes floats as GCC/Clang vector extensions: the instruction-set
// unit that includes this picks the lane count (FLASHATTN_CPU_LANES) and the
// target, and the compiler maps +, *, compares and selects onto that set's
// registers, so one source serves SSE2, NEON, AVX2 and AVX-512. No include
// guard: each unit includes it once, inside its own namespace.

constexpr int kLanes = FLASHATTN_CPU_LANES;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t IVec __attribute__((vector_size(kLanes * sizeof(int32_t))));
typedef uint16_t HVec __attribute__((vector_size(kLanes * sizeof(uint16_t))));

// Unaligned loads and stores (memcpy of a register's size compiles to one move).
inline Vec load(const float* p) {
  Vec v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, Vec v) { __builtin_memcpy(p, &v, sizeof v); }
// Every lane x. x − (+0) is x for every x (−0 and NaN included), so the
// compiler drops the subtraction and broadcasts x, from memory where it was
// just loaded; Vec{} + x is no identity at x = −0, and it kept that add (a
// scalar add and a register broadcast per call, on the ports the
// multiply-adds need). A lane-by-lane copy compiled to one masked insert per
// lane.
inline Vec splat(float x) { return x - Vec{}; }
// Bit casts (a C-style cast between vector types of one size keeps the bits).
inline Vec as_float(IVec v) { return (Vec)v; }
inline IVec as_int(Vec v) { return (IVec)v; }
inline IVec splat_int(int32_t x) { return IVec{} + x; }
inline IVec lane_index() {
  IVec v;
  for (int i = 0; i < kLanes; ++i) v[i] = i;
  return v;
}

// The sum of a vector's lanes, by halving (log2(kLanes) shuffles and adds).
inline float sum_lanes(Vec v) {
  for (int half = kLanes / 2; half > 0; half /= 2) {
    IVec upper;
    for (int i = 0; i < kLanes; ++i) upper[i] = (i + half) % kLanes;
    v += __builtin_shuffle(v, upper);
  }
  return v[0];
}

// Lane l of the result: the sum of x[l]'s lanes, for kLanes vectors x (which
// it overwrites). Each level folds pairs of vectors into one, adding the two
// halves of every block of 2W lanes of each (x[i]'s sums in a block's first W
// lanes, x[i + W]'s in its last W), so kLanes sums cost kLanes − 1 folds
// instead of log2(kLanes) shuffles and adds each; pairing x[i] with x[i + W]
// leaves the sums in x's order.
template <int W = kLanes / 2>
inline Vec lane_sums(Vec* x) {
  IVec lo, hi;  // lane indices into (a, b): a's at 0 … kLanes − 1, b's after
  for (int l = 0; l < kLanes; ++l) {
    const int block = l / (2 * W) * (2 * W), at = l % (2 * W);
    lo[l] = at < W ? block + at : kLanes + block + at - W;
    hi[l] = at < W ? block + at + W : kLanes + block + at;
  }
#pragma GCC unroll 16
  for (int i = 0; i < W; ++i)
    x[i] = __builtin_shuffle(x[i], x[i + W], lo) + __builtin_shuffle(x[i], x[i + W], hi);
  if constexpr (W > 1) return lane_sums<W / 2>(x);
  else return x[0];
}

// Transposes the kLanes × kLanes matrix whose row i is x[i], in place (lane l
// of x[i] becomes lane i of x[l]). Each level swaps, in every block of 2W × 2W,
// the upper-right W × W block with the lower-left one (x[i]'s lanes of the
// block's upper half with x[i + W]'s of its lower half, one two-source shuffle
// per vector); with the levels for W = kLanes/2, …, 1 every row bit has
// traded places with its column bit: kLanes·log2(kLanes) shuffles in all.
template <int W = kLanes / 2>
inline void transpose_lanes(Vec* x) {
  // Lane indices into (x[i], x[i + W]), x[i + W]'s from kLanes on: x[i] keeps
  // the lower half of each block, x[i + W] the upper.
  IVec keep_lower, keep_upper;
  for (int l = 0; l < kLanes; ++l) {
    const bool upper = l & W;
    keep_lower[l] = upper ? kLanes + l - W : l;
    keep_upper[l] = upper ? kLanes + l : l + W;
  }
#pragma GCC unroll 16
  for (int i = 0; i < kLanes; ++i) {
    if (i & W) continue;
    const Vec a = x[i], b = x[i + W];
    x[i] = __builtin_shuffle(a, b, keep_lower);
    x[i + W] = __builtin_shuffle(a, b, keep_upper);
  }
  if constexpr (W > 1) transpose_lanes<W / 2>(x);
}

// The NaN-blind max of a running max and new values: a NaN x leaves m alone
// (as fmaxf), so NaN scores reach the row through their probabilities instead.
inline Vec max_nan_blind(Vec m, Vec x) { return x > m ? x : m; }

// The largest of a vector's lanes, by halving; the lanes hold no NaN (a
// max_nan_blind reduction's result).
inline float max_lanes(Vec v) {
  for (int half = kLanes / 2; half > 0; half /= 2) {
    IVec upper;
    for (int i = 0; i < kLanes; ++i) upper[i] = (i + half) % kLanes;
    v = max_nan_blind(v, __builtin_shuffle(v, upper));
  }
  return v[0];
}

// 2^x for x <= 0, lane by lane, as core's scalar rule: −inf gives 0, NaN gives
// NaN, below 2^-126 gives 0. x = n + f with n an integer and |f| <= 1/2, then
// 2^x = 2^n · 2^f, with 2^f = 1 + f·q(f), q of degree 4 fitted to (2^f − 1)/f
// by least squares weighted for 2^f's relative error: 1.0e-7 at most, about an
// fp32 ulp, and exactly 1 at f = 0. On AVX-512, vroundscaleps gives n and
// vscalefps multiplies by 2^n: 2.1 ns a vector on a Xeon core against 3.6 for
// the integer shifts below with the Taylor series to degree 7 that this
// replaced (docs/perf/cpu.md v18).
inline Vec exp2_nonpositive(Vec x) {
  const Vec lo = splat(-127.0f);
  const Vec t = x > lo ? x : lo;  // NaN-blind: the arithmetic below stays finite
#if FLASHATTN_CPU_LANES == 16 && defined(__x86_64__)
  // The zero-masked forms: the plain ones start from an undefined register,
  // which GCC 12 warns of.
  const __m512 n =
      _mm512_maskz_roundscale_ps(0xffff, (__m512)t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
  // Round to nearest by adding and subtracting 1.5·2^23 (exact for |t| < 2^22).
  const Vec round = splat(12582912.0f);
  const Vec n = (t + round) - round;
#endif
  const Vec f = t - (Vec)n;
  Vec q = splat(1.321867248e-3f);
  q = q * f + splat(9.671697938e-3f);
  q = q * f + splat(5.550892952e-2f);
  q = q * f + splat(2.402223800e-1f);
  q = q * f + splat(6.931468559e-1f);
  const Vec e = q * f + splat(1.0f);
#if FLASHATTN_CPU_LANES == 16 && defined(__x86_64__)
  const Vec normal = (Vec)_mm512_maskz_scalef_ps(0xffff, (__m512)e, n);
#else
  const IVec bits = (__builtin_convertvector(n, IVec) + 127) << 23;
  const Vec normal = e * as_float(bits);
#endif
  const Vec min_exp = splat(-126.0f);
  return x >= min_exp ? normal : (x < min_exp ? Vec{} : x);
}

// tanh x, lane by lane, to a few fp32 ulps (softcap's scores are held to fp32
// accuracy). Near 0, 1 − 2/(e^(2x) + 1) would lose x's low bits to the
// cancellation, so below |x| = 1/2 the odd Taylor series to degree 15 (the
// first term left out is under 1e-8 relative); from there t = e^(−2|x|) and
// (1 − t)/(1 + t), where 1 − t >= 0.63 cancels nothing; signed as x. ±inf
// gives ±1, NaN gives NaN.
inline Vec tanh_lanes(Vec x) {
  const IVec sign = as_int(x) & splat_int(INT32_MIN);
  const Vec magnitude = as_float(as_int(x) & splat_int(INT32_MAX));
  const Vec t = exp2_nonpositive(magnitude * splat(-2.0f * 1.44269504088896341f));
  const Vec far = as_float(as_int((1.0f - t) / (1.0f + t)) | sign);
  const Vec y = x * x;
  Vec series = splat(-929569.0f / 638512875);
  series = series * y + splat(21844.0f / 6081075);
  series = series * y + splat(-1382.0f / 155925);
  series = series * y + splat(62.0f / 2835);
  series = series * y + splat(-17.0f / 315);
  series = series * y + splat(2.0f / 15);
  series = series * y + splat(-1.0f / 3);
  const Vec near = x + x * (series * y);
  return magnitude < splat(0.5f) ? near : far;
}

// kLanes 16-bit floats to fp32: bf16 is the high half of an fp32; fp16's
// exponent and mantissa move up 13 bits and a multiply by 2^112 rebiases the
// exponent (exact, subnormals included), except Inf and NaN, which keep an
// all-ones exponent.
inline Vec bf16_to_vec(const uint16_t* p) {
  HVec h;
  __builtin_memcpy(&h, p, sizeof h);
  return as_float(__builtin_convertvector(h, IVec) << 16);
}
inline Vec f16_to_vec(const uint16_t* p) {
  HVec h16;
  __builtin_memcpy(&h16, p, sizeof h16);
  const IVec h = __builtin_convertvector(h16, IVec);
  const IVec sign = (h & 0x8000) << 16;
  const IVec shifted = (h & 0x7fff) << 13;
  const IVec finite = as_int(as_float(shifted) * splat(0x1p112f));
  const IVec special = shifted | 0x7f800000;
  return as_float(((h & 0x7c00) == 0x7c00 ? special : finite) | sign);
}
