// The forward's per-thread tiles and sizes, shared by the matrix path
// (forward.h) and the few-rows path (few_rows.h). No include guard (see vec.h).

namespace forward {

constexpr int kBlockN = 64;

inline int padded(int n) { return (n + kLanes - 1) / kLanes * kLanes; }

// K and V bytes of one head that a query tile reads, beyond which they no
// longer stay in the cache from one of the head's tiles to the next
// (measured: docs/perf/cpu.md v13).
constexpr int64_t kStreamedKeyBytes = int64_t(4) << 20;

// Query rows per item. Each item reads the keys its rows see, so the rows per
// tile set how often K and V are read. 64 rows keep Qᵀ and O (rows ×
// head_dim each) within a core's L2 beside the K and V tiles at any head_dim
// up to 256 (32 beyond). Where the keys a tile reads come from memory for
// every tile (over kStreamedKeyBytes, counted at the middle row, which sees
// the average of a causal problem's), up to 256 rows at head dims to 128 read
// them a quarter as often (Qᵀ, O and Sᵀ then take 320 KiB at head_dim 128),
// as far as the tiles (slices: batch × query heads of them per query block)
// still give every thread four items, so that uneven (causal) rows balance.
// Wider causal tiles also compute more of the masked triangle at the
// diagonal, which the middle-row count keeps to long sequences. Where v's
// head_dim differs from q's, the wider one is held to the bounds, and K and V
// count at their own.
inline int block_rows(const AttnParams& p, int64_t slices) {
  const Sizes& sz = p.sizes;
  const int widest = sz.widest_head_dim();
  if (widest > 256) return 32;
  const int64_t middle = sz.seqlen_q / 2;
  const int64_t keys = p.mask.key_end(middle) - p.mask.key_begin(middle);
  const int64_t key_bytes = keys * (sz.head_dim + sz.head_dim_v) * (p.dtype == DType::f32 ? 4 : 2);
  if (widest > 128 || sz.seqlen_q <= 64 || key_bytes < kStreamedKeyBytes) return 64;
  int rows = 256;
  while (rows > 64 && slices * ((sz.seqlen_q + rows - 1) / rows) < 4 * int64_t(thread_count()))
    rows /= 2;
  return rows;
}

// One worker's tiles, carved from a buffer kept by its thread.
struct Tiles {
  float* q_t;       // head_dim × lanes: Q·scale, transposed, zero past the rows;
                    // or, for few rows, rows × padded head_dim, not transposed
  float* k;         // kBlockN × padded head_dim: K as fp32, when not read in place
  float* v;         // kBlockN × padded head_dim_v: V as fp32, when not read in place
  float* s;         // kBlockN × lanes: Sᵀ, then Pᵀ; or, for few rows, rows ×
                    // kBlockN: S, then P, keys across the lanes (few_rows.h)
  float* o;         // rows × padded head_dim_v
  float* m;         // lanes: running max
  float* l;         // lanes: running sum
  float* alpha;     // lanes: this tile's rescale
  int32_t* key_end;   // lanes: each row's key_end (0 past the rows)
  int32_t* key_begin; // lanes: each row's key_begin (0 past the rows)
};

inline Tiles tiles(const Sizes& sz, int max_rows) {
  thread_local AlignedBuffer buffer;
  const size_t lanes = size_t(padded(max_rows));
  const size_t dp = size_t(padded(sz.head_dim)), dp_v = size_t(padded(sz.head_dim_v));
  const size_t sizes[] = {dp * lanes, kBlockN * dp, kBlockN * dp_v, kBlockN * lanes, lanes * dp_v,
                          lanes,      lanes,        lanes,          lanes,           lanes};
  // Each part starts on a 64-byte boundary.
  auto rounded = [](size_t n) { return (n + 15) / 16 * 16; };
  size_t total = 0;
  for (size_t n : sizes) total += rounded(n);
  float* part[10];
  float* at = buffer.reserve(total);
  for (int i = 0; i < 10; ++i) {
    part[i] = at;
    at += rounded(sizes[i]);
  }
  return {part[0], part[1], part[2], part[3], part[4], part[5], part[6], part[7],
          reinterpret_cast<int32_t*>(part[8]), reinterpret_cast<int32_t*>(part[9])};
}

// Whether a tile of `rows` query rows computes its scores as dot products
// along head_dim (few_rows.h) instead of the matrix kernel, whose lanes span
// the rows. Per key, the dot products take rows·head_dim/kLanes multiply-adds
// and the softmax rows/kLanes exp2 vectors; the matrix kernel head_dim and one
// whatever the rows. Up to half the lanes the dot products do at most half
// the work (their price, one load of K per multiply-add, is paid from L1):
// 1, 4 and 8 query rows ran 1.5–2.4× faster so (B1 Nk8192–16384 H8 d64/128,
// two AVX-512 cores).
inline bool few_rows(int rows) { return rows <= kLanes / 2; }

}  // namespace forward
