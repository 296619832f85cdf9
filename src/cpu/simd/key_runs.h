// Where a sequence's keys lie in k and v, as runs of rows at one stride, so
// that a tile of keys is addressed once per run and never per key: a dense or
// packed batch and a contiguous cache hold each sequence's keys in one run; a
// paged cache (core/seqlen.h) holds them in one run per page, of any page size,
// so a key tile may straddle several. No include guard (see vec.h).

// Keys [key, key + count) of a sequence: rows row0 … row0 + count − 1 of
// index `slab` of k's and v's first extent (the sequence's batch index, or a
// page of the cache).
struct KeyRun {
  int slab;
  int row0;
  int count;
};

// The run that starts at key `key` of sequence b (seq), cut at key `end`.
inline KeyRun key_run(const AttnParams& p, int b, const Sequence& seq, int key, int end) {
  const KeyCache& c = p.seqs.cache;
  if (!c.paged()) return {b, int(seq.k_row0) + key, end - key};
  const int in_page = key % c.page_size;
  return {c.block_table[int64_t(b) * c.pages_per_sequence + key / c.page_size], in_page,
          std::min(end - key, c.page_size - in_page)};
}

// f(run, at) for each run of keys [begin, end) of sequence b, `at` its first
// key counted from begin.
template <typename F>
void for_each_run(const AttnParams& p, int b, const Sequence& seq, int begin, int end, F f) {
  for (int key = begin; key < end;) {
    const KeyRun run = key_run(p, b, seq, key, end);
    f(run, key - begin);
    key += run.count;
  }
}

// The run's rows of head h of t (k or v, fp32) where they lie.
inline MatB run_rows(const TensorRef& t, const KeyRun& run, int h) {
  return {static_cast<const float*>(t.data) + row_index(t, run.slab, h, run.row0), t.row_stride};
}

// Keys [n0, n0 + cols) of head h of t (k or v, head_dim wide: k's or v's) as
// rows of fp32: read where they lie when `in_place` (fp32 rows the caller can
// read at any stride) and they form one run; else converted into `tile`
// (cols × ld) run by run.
inline MatB key_tile(const AttnParams& p, const TensorRef& t, int head_dim, int b,
                     const Sequence& seq, int h, int n0, int cols, bool in_place, float* tile,
                     int ld) {
  const KeyRun first = key_run(p, b, seq, n0, n0 + cols);
  if (in_place && first.count == cols) return run_rows(t, first, h);
  for_each_run(p, b, seq, n0, n0 + cols, [&](const KeyRun& run, int at) {
    load_tile(p.dtype, t, head_dim, run.slab, h, run.row0, run.count,
              tile + int64_t(at) * ld, ld);
  });
  return {tile, ld};
}
