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

// A head's keys packed once for several of its query tiles (run_with): K as
// fp32 rows head_dim wide and V head_dim_v padded to the lanes, one row after
// another, from key `first`. Read in place, a tile's K and V rows lie a row of
// the tensor apart (heads × head_dim: 8 heads of 64 put 2 KiB between rows,
// so a 64-key tile touches 32 pages and a few of the cache's sets), and every
// query tile of the head reads them so again; 16-bit ones are converted again
// for every query tile. On two AVX-512 cores the two products of a tile loop
// over 2048 such keys ran at 101–115 GFLOP/s from rows 2 KiB apart and at
// 140–142 from a copy made once per 8 query tiles (143–152 from contiguous
// rows; docs/perf/cpu.md v17).
struct PackedKeys {
  const float* k = nullptr;  // null: the tiles read the tensors
  const float* v = nullptr;
  int first = 0;
  MatB k_rows(int n0, int d) const { return {k + int64_t(n0 - first) * d, d}; }
  MatB v_rows(int n0, int dp_v) const { return {v + int64_t(n0 - first) * dp_v, dp_v}; }
};

// Each thread's packed keys, kept between calls, as its tiles.
inline AlignedBuffer& packed_keys_buffer() {
  thread_local AlignedBuffer buffer;
  return buffer;
}

// The most bytes of each of K and V a thread packs (2 MiB: 8192 keys at
// head_dim 64, 4096 at 128); beyond, block_rows streams them in 256-row tiles.
constexpr int64_t kMaxPackedKeyBytes = int64_t(2) << 20;

// Query tiles per work item where a head's keys are packed: as many as leave
// every thread four items (so that uneven causal tiles still balance), at most
// kMaxTilesPerItem and the head's m_blocks; 1 (no packing) below
// kMinTilesPerItem, where the copy's extra pass over the keys is not made up:
// at 128 keys (two tiles an item) 8 heads of 64 ran 0.90–0.94× the tiles
// reading in place, from 4 tiles on 0.99–1.18× (docs/perf/cpu.md v17).
constexpr int kMinTilesPerItem = 4, kMaxTilesPerItem = 16;
inline int tiles_per_item(int64_t query_tiles, int m_blocks) {
  const int64_t per_item = std::min<int64_t>(query_tiles / (4 * int64_t(thread_count())),
                                             std::min(kMaxTilesPerItem, m_blocks));
  return per_item >= kMinTilesPerItem ? int(per_item) : 1;
}

// Whether the matrix tiles of a problem read packed keys: where they would
// otherwise read rows apart or convert them (16-bit), and a head's keys fit
// kMaxPackedKeyBytes.
inline bool packs_keys(const AttnParams& p, int bm) {
  const Sizes& sz = p.sizes;
  const bool in_place = p.dtype == DType::f32 && p.k.row_stride == sz.head_dim &&
                        p.v.row_stride == sz.head_dim_v && sz.head_dim_v % kLanes == 0;
  const int64_t widest = std::max(sz.head_dim, padded(sz.head_dim_v));
  return !in_place && !few_rows(bm) &&
         int64_t(sz.seqlen_k) * widest * int64_t(sizeof(float)) <= kMaxPackedKeyBytes;
}

}  // namespace forward
