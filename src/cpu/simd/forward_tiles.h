// The forward's per-thread tiles and sizes, shared by the matrix path
// (forward.h) and the few-rows path (few_rows.h). No include guard (see vec.h).

namespace forward {

constexpr int kBlockN = 64;

inline int padded(int n) { return (n + kLanes - 1) / kLanes * kLanes; }

// Query rows per item: as many as keep Qᵀ and O (rows × head_dim each) within
// a core's L2 beside the K and V tiles.
inline int block_rows(int head_dim) { return head_dim <= 256 ? 64 : 32; }

// One worker's tiles, carved from a buffer kept by its thread.
struct Tiles {
  float* q_t;       // head_dim × lanes: Q·scale, transposed, zero past the rows;
                    // or, for few rows, rows × padded head_dim, not transposed
  float* k;         // kBlockN × padded head_dim: K as fp32, when not read in place
  float* v;         // kBlockN × padded head_dim: V as fp32, when not read in place
  float* s;         // kBlockN × lanes: Sᵀ, then Pᵀ; or, for few rows, rows ×
                    // kBlockN: S, then P, keys across the lanes (few_rows.h)
  float* o;         // rows × padded head_dim
  float* m;         // lanes: running max
  float* l;         // lanes: running sum
  float* alpha;     // lanes: this tile's rescale
  int32_t* key_end;   // lanes: each row's key_end (0 past the rows)
  int32_t* key_begin; // lanes: each row's key_begin (0 past the rows)
};

inline Tiles tiles(int head_dim, int max_rows) {
  thread_local AlignedBuffer buffer;
  const size_t lanes = size_t(padded(max_rows)), dp = size_t(padded(head_dim));
  const size_t sizes[] = {dp * lanes, kBlockN * dp, kBlockN * dp, kBlockN * lanes, lanes * dp,
                          lanes,      lanes,        lanes,        lanes,           lanes};
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
