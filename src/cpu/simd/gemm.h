// The register-blocked matrix kernel both products of a tile run on:
//   C (m × n) = A (m × k) · B (k × n), then, as `Init` says, added to C, or to C
// with each row scaled first (the online softmax's rescale, fused so that the
// output tile is read and written once per key tile).
// B's rows are contiguous (n a multiple of kLanes); A is read one element at a
// time (broadcast), at any strides, so a transposed A costs nothing: the
// forward's P·V reads P out of the transposed score tile this way.
// A block of kRows × kCols·kLanes outputs stays in registers over the whole k
// loop: per k step, kCols loads of B and kRows broadcasts of A feed
// kRows·kCols fused multiply-adds. No include guard (see vec.h).

struct MatA {
  const float* p;
  int64_t row, k;  // A(r, kk) = p[r·row + kk·k]
};
struct MatB {
  const float* p;
  int64_t ld;  // B(kk, c) = p[kk·ld + c]
};
struct MatC {
  float* p;
  int64_t ld;
};

enum class Init {
  zero,       // C = A·B
  add,        // C += A·B
  scale_rows  // C = diag(row_scale)·C + A·B
};

// k ≥ 1 (gemm takes k = 0 itself): where the k loop may run no step, GCC keeps
// a second copy of the accumulators on the stack for that path, 48 more
// stores and loads a block (4-6% of a block at k = 64).
template <int MR, int NV, Init kInit>
void gemm_block(int k, MatA a, MatB b, MatC c, const float* row_scale) {
  if (k < 1) __builtin_unreachable();
  Vec acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      if constexpr (kInit == Init::zero) acc[r][v] = Vec{};
      else if constexpr (kInit == Init::add) acc[r][v] = load(c.p + r * c.ld + v * kLanes);
      else acc[r][v] = load(c.p + r * c.ld + v * kLanes) * splat(row_scale[r]);
    }
  const float* ap = a.p;
  const float* bp = b.p;
  for (int kk = 0; kk < k; ++kk, ap += a.k, bp += b.ld) {
    Vec bv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) bv[v] = load(bp + v * kLanes);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const Vec av = splat(ap[r * a.row]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] += av * bv[v];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) store(c.p + r * c.ld + v * kLanes, acc[r][v]);
}

// gemm_block for a block's actual size (the edges of C), chosen at run time.
template <Init kInit, int MR, int NV = kGemmCols>
void gemm_cols(int nv, int k, MatA a, MatB b, MatC c, const float* row_scale) {
  if (nv == NV) return gemm_block<MR, NV, kInit>(k, a, b, c, row_scale);
  if constexpr (NV > 1) gemm_cols<kInit, MR, NV - 1>(nv, k, a, b, c, row_scale);
}
template <Init kInit, int MR = kGemmRows>
void gemm_rows(int mr, int nv, int k, MatA a, MatB b, MatC c, const float* row_scale) {
  if (mr == MR) return gemm_cols<kInit, MR>(nv, k, a, b, c, row_scale);
  if constexpr (MR > 1) gemm_rows<kInit, MR - 1>(mr, nv, k, a, b, c, row_scale);
}

// C per kInit where k = 0, A·B being 0: zeros, C, or C with its rows scaled.
template <Init kInit>
void gemm_without_terms(int m, int n, MatC c, const float* row_scale) {
  if constexpr (kInit == Init::add) return;
  for (int r = 0; r < m; ++r)
    for (int j = 0; j < n; j += kLanes) {
      float* at = c.p + r * c.ld + j;
      if constexpr (kInit == Init::zero) store(at, Vec{});
      else store(at, load(at) * splat(row_scale[r]));
    }
}

// C (m × n) per kInit; n is a multiple of kLanes. Column blocks outside, so a
// block of B (k × kGemmCols·kLanes) stays in L1 while the row blocks pass.
template <Init kInit>
void gemm(int m, int n, int k, MatA a, MatB b, MatC c, const float* row_scale = nullptr) {
  if (k < 1) return gemm_without_terms<kInit>(m, n, c, row_scale);
  constexpr int kBlockN = kGemmCols * kLanes;
  for (int c0 = 0; c0 < n; c0 += kBlockN) {
    const int nv = std::min(kBlockN, n - c0) / kLanes;
    for (int r0 = 0; r0 < m; r0 += kGemmRows) {
      const int mr = std::min(kGemmRows, m - r0);
      gemm_rows<kInit>(mr, nv, k, {a.p + r0 * a.row, a.row, a.k}, {b.p + c0, b.ld},
                       {c.p + r0 * c.ld + c0, c.ld}, row_scale ? row_scale + r0 : nullptr);
    }
  }
}
