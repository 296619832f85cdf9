#include "problem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "bias.h"
#include "buffer.h"
#include "core/half.h"
#include "core/mask.h"
#include "core/parallel.h"
#include "normal.h"
#include "score_rule.h"
#include "standard.h"

namespace flashattn::harness {

// One problem the oracles compute on their own: the whole batch (dense), or
// one sequence of a packed batch as a dense batch of one. Its output rows are
// rows q_row0 + rows[r] of the packed tensors, its lse rows likewise.
struct Problem::Part {
  Params params;  // dense host views, reference backend
  Case spec;      // the part as a dense case (score_rule's alignment)
  int64_t batch0 = 0;  // its batch index in out and lse (a KV cache's sequence)
  int64_t q_row0 = 0;
  std::vector<int> rows;
  std::vector<double> ref, ref_lse, standard;
  std::vector<double> independent, independent_lse;  // standard_rows_float64
};

// A KV-cache call's buffers: the cache is k and v themselves (contiguous, or
// pages in a random order with NaN in every row no sequence holds, so that a
// kernel reading past a length shows), the keys to append, the lengths and the
// block table, and each sequence's keys as a dense batch of one as they must
// be after the call (the oracle's k and v).
struct CacheBuffers {
  Buffer k_new, v_new;
  std::vector<int32_t> seqlens, block_table;
  DeviceBuffer seqlens_device, block_table_device;
  int pages_per_sequence = 0;
  std::vector<Buffer> keys, values;
};

struct Problem::Storage {
  Buffer q, k, v, out;
  CacheBuffers cache;
  std::vector<float> lse;
  DeviceBuffer lse_device;
  SlopeBuffer slopes;
  BiasBuffer bias;
  SequenceBuffer sequences;
  std::vector<Part> parts;
};

Case packed_case(Case c, std::vector<SequenceLengths> sequences) {
  c.shape.batch = int(sequences.size());
  c.shape.seqlen_q = c.shape.seqlen_k = 0;
  for (const SequenceLengths& s : sequences) {
    c.shape.seqlen_q = std::max(c.shape.seqlen_q, s.seqlen_q);
    c.shape.seqlen_k = std::max(c.shape.seqlen_k, s.seqlen_k);
  }
  c.sequences = std::move(sequences);
  return c;
}

bool is_packed(const Case& c) { return !c.sequences.empty(); }

Case cache_case(Case c, Case::Cache cache) {
  c.shape.batch = int(cache.cached.size());
  c.shape.seqlen_k = 0;
  for (int n : cache.cached) c.shape.seqlen_k = std::max(c.shape.seqlen_k, n + cache.appended);
  c.cache = std::move(cache);
  return c;
}

bool is_cache(const Case& c) { return c.cache.has_value(); }

int64_t total_q(const Case& c) {
  if (!is_packed(c)) return c.shape.seqlen_q;
  int64_t n = 0;
  for (const SequenceLengths& s : c.sequences) n += s.seqlen_q;
  return n;
}

int64_t total_k(const Case& c) {
  if (!is_packed(c)) return c.shape.seqlen_k;
  int64_t n = 0;
  for (const SequenceLengths& s : c.sequences) n += s.seqlen_k;
  return n;
}

Case sequence_case(const Case& c, int b) {
  Case one = c;
  one.sequences.clear();
  one.shape.batch = 1;
  if (is_cache(c)) {
    one.shape.seqlen_k = c.cache->cached[b] + c.cache->appended;
    one.cache.reset();
    return one;
  }
  one.shape.seqlen_q = c.sequences[b].seqlen_q;
  one.shape.seqlen_k = c.sequences[b].seqlen_k;
  one.dropout.offset += uint64_t(b) * uint64_t(c.shape.heads_q);  // sequence b's streams
  return one;
}

std::vector<int32_t> prefix_sums(const Case& c, bool queries) {
  std::vector<int32_t> cu{0};
  for (const SequenceLengths& s : c.sequences)
    cu.push_back(cu.back() + (queries ? s.seqlen_q : s.seqlen_k));
  return cu;
}

SequenceBuffer::SequenceBuffer(const Case& c, Device where) {
  if (!is_packed(c)) return;
  cu_q = prefix_sums(c, true);
  cu_k = prefix_sums(c, false);
  if (!c.checked_sequences) {
    // Above the longest, as a caller's bound may be: the grids grow past the batch.
    constexpr int kSlack = 37;
    checked = false;
    max_seqlen_q = c.shape.seqlen_q + kSlack;
    max_seqlen_k = c.shape.seqlen_k + kSlack;
  }
  if (where.kind != DeviceKind::cuda) return;
  for (auto [host, device] : {std::pair{&cu_q, &cu_q_device}, std::pair{&cu_k, &cu_k_device}}) {
    *device = DeviceBuffer(host->size() * sizeof(int32_t), where.index);
    device->upload(host->data());
  }
}

Sequences SequenceBuffer::on(DeviceKind kind) const {
  if (cu_q.empty()) return {};
  const bool gpu = kind == DeviceKind::cuda;
  return {gpu ? static_cast<const int32_t*>(cu_q_device.data()) : cu_q.data(),
          gpu ? static_cast<const int32_t*>(cu_k_device.data()) : cu_k.data(),
          int(cu_q.size()) - 1, max_seqlen_q, max_seqlen_k, checked};
}

std::string describe(const Case& c) {
  const Shape& s = c.shape;
  std::ostringstream out;
  out << "B" << s.batch << " Nq" << s.seqlen_q << " Nk" << s.seqlen_k << " Hq" << s.heads_q
      << " Hkv" << s.heads_kv << " d" << s.head_dim
      << (s.head_dim_v > 0 && s.head_dim_v != s.head_dim ? " dv" + std::to_string(s.head_dim_v) : "")
      << " " << to_string(c.dtype)
      << (c.mask == Mask::causal_top_left       ? " causal-tl"
          : c.mask == Mask::causal_bottom_right ? " causal-br"
                                                : "")
      << (c.strided ? " strided" : "") << (c.strided && c.strided_pad % 8 == 0 ? "-aligned" : "");
  if (is_packed(c)) {
    out << " packed(";
    for (size_t b = 0; b < c.sequences.size(); ++b)
      out << (b ? " " : "") << c.sequences[b].seqlen_q << "x" << c.sequences[b].seqlen_k;
    out << (c.checked_sequences ? "" : ", unchecked") << ")";
  }
  if (is_cache(c)) {
    out << " cache(" << (c.cache->page_size ? "paged " + std::to_string(c.cache->page_size) + ", "
                                             : std::string())
        << "capacity " << c.cache->capacity << ", +" << c.cache->appended << ":";
    for (int n : c.cache->cached) out << " " << n;
    out << (c.cache->checked ? "" : ", unchecked") << ")";
  }
  if (c.window_left >= 0 || c.window_right >= 0)
    out << " window(" << c.window_left << "," << c.window_right << ")";
  if (c.softcap > 0.0f) out << " softcap " << c.softcap;
  if (c.alibi) out << " alibi";
  if (c.bias) {
    const Case::Bias& b = *c.bias;
    out << " bias " << bias_type_name(b.type);
    if (b.broadcast_batch || b.broadcast_heads) out << " broadcast " << bias_broadcast_name(b);
    if (b.key_major) out << " key-major";
  }
  if (c.dropout.p > 0.0f) out << " dropout " << c.dropout.p;
  return out.str();
}

double flop_count(const Case& c) {
  if (is_packed(c)) {
    double sum = 0;
    for (int b = 0; b < c.shape.batch; ++b) sum += flop_count(sequence_case(c, b));
    return sum;
  }
  const Shape& s = c.shape;
  const double per_pair = 2.0 * s.batch * s.heads_q * (s.head_dim + value_head_dim(s));
  if (c.window_left < 0 && c.window_right < 0)
    return per_pair * s.seqlen_q * s.seqlen_k / (c.mask == Mask::none ? 1 : 2);
  const RowMask mask = resolve({c.mask != Mask::none, c.mask != Mask::causal_top_left,
                                c.window_left, c.window_right},
                               {s.seqlen_q, s.seqlen_k});
  double pairs = 0;
  for (int i = 0; i < s.seqlen_q; ++i) pairs += std::max(0, mask.key_end(i) - mask.key_begin(i));
  return per_pair * pairs;
}

std::vector<float> alibi_slopes(int heads) {
  std::vector<float> slopes(heads);
  for (int h = 0; h < heads; ++h) slopes[h] = std::exp2(-8.0f * float(h + 1) / float(heads));
  return slopes;
}

SlopeBuffer::SlopeBuffer(const Case& c, Device where) {
  if (!c.alibi) return;
  host = alibi_slopes(c.shape.heads_q);
  if (where.kind != DeviceKind::cuda) return;
  device = DeviceBuffer(host.size() * sizeof(float), where.index);
  device.upload(host.data());
}

const float* SlopeBuffer::on(DeviceKind kind) const {
  return kind == DeviceKind::cuda ? static_cast<const float*>(device.data()) : host.data();
}

Variants variants_of(const Case& c, const float* slopes, const ScoreBias& bias) {
  Variants v;
  v.window_left = c.window_left;
  v.window_right = c.window_right;
  v.softcap = c.softcap;
  v.alibi_slopes = c.alibi ? slopes : nullptr;
  v.bias = bias;
  v.dropout = c.dropout;
  return v;
}

Case with_dropout_seed(Case c, std::mt19937_64& rng) {
  if (c.dropout.p > 0.0f) {
    c.dropout.seed = rng();
    c.dropout.offset = rng() >> 32;
  }
  return c;
}

Problem::Problem(const Case& c, Device device, uint64_t seed)
    : case_(c), device_(device), storage_(std::make_unique<Storage>()) {
  const Shape& s = c.shape;
  Storage& st = *storage_;
  const int pad = c.strided_pad;
  // Packed: one batch index of every sequence's rows.
  const int batch = is_packed(c) ? 1 : s.batch;
  const int nq = int(total_q(c)), nk = int(total_k(c));
  layout(st.q, c.dtype, batch, nq, s.heads_q, s.head_dim, c.strided, pad, false);
  layout(st.k, c.dtype, batch, nk, s.heads_kv, s.head_dim, false, pad, c.strided);
  layout(st.v, c.dtype, batch, nk, s.heads_kv, value_head_dim(s), false, pad, c.strided);
  layout(st.out, c.dtype, batch, nq, s.heads_q, value_head_dim(s), c.strided, pad, false);
  st.lse.assign(size_t(batch) * s.heads_q * nq, 0.0f);
  st.sequences = SequenceBuffer(c, device);

  std::mt19937_64 rng(seed);
  // A KV cache's k and v are drawn as the cache (make_cache).
  if (is_cache(c)) fill_normal({&st.q}, c.dtype, c.input_std, seed);
  else fill_normal({&st.q, &st.k, &st.v}, c.dtype, c.input_std, seed);
  case_ = with_dropout_seed(case_, rng);
  st.slopes = SlopeBuffer(c, device);
  st.bias = BiasBuffer(c, device, rng);
  if (is_cache(c)) make_cache(rng);
  if (device.kind == DeviceKind::cuda) {
    std::vector<Buffer*> buffers = {&st.q, &st.k, &st.v, &st.out};
    if (is_cache(c)) buffers.insert(buffers.end(), {&st.cache.k_new, &st.cache.v_new});
    for (Buffer* buf : buffers) {
      buf->device = DeviceBuffer(buf->host.size(), device.index);
      buf->device.upload(buf->host.data());
    }
    st.lse_device = DeviceBuffer(st.lse.size() * sizeof(float), device.index);
    for (auto [host, dev] : {std::pair{&st.cache.seqlens, &st.cache.seqlens_device},
                             std::pair{&st.cache.block_table, &st.cache.block_table_device}}) {
      if (host->empty()) continue;
      *dev = DeviceBuffer(host->size() * sizeof(int32_t), device.index);
      dev->upload(host->data());
    }
  }
  poison_output();
}

// The cache of a KV-cache case (CacheBuffers): k and v re-laid as the cache,
// random keys in every sequence's first cached rows and NaN elsewhere; the
// block table a random permutation of the pages (two spare ones never used).
void Problem::make_cache(std::mt19937_64& rng) {
  const Case& c = case_;
  const Shape& s = c.shape;
  const Case::Cache& spec = *c.cache;
  Storage& st = *storage_;
  CacheBuffers& cb = st.cache;
  const bool paged = spec.page_size > 0;
  cb.pages_per_sequence = paged ? (spec.capacity + spec.page_size - 1) / spec.page_size : 0;
  const int pages = s.batch * cb.pages_per_sequence + 2;
  const int rows = paged ? spec.page_size : spec.capacity;
  for (Buffer* buf : {&st.k, &st.v})
    layout(*buf, c.dtype, paged ? pages : s.batch, rows, s.heads_kv,
           buf == &st.k ? s.head_dim : value_head_dim(s), false, c.strided_pad, c.strided);
  fill({&st.k, &st.v}, c.dtype, [] { return std::numeric_limits<float>::quiet_NaN(); });
  if (paged) {
    std::vector<int32_t> order(pages);
    for (int i = 0; i < pages; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    cb.block_table.assign(order.begin(), order.begin() + s.batch * cb.pages_per_sequence);
  }
  cb.seqlens.assign(spec.cached.begin(), spec.cached.end());
  for (Buffer* buf : {&cb.k_new, &cb.v_new})
    layout(*buf, c.dtype, s.batch, spec.appended, s.heads_kv,
           buf == &cb.k_new ? s.head_dim : value_head_dim(s), c.strided, c.strided_pad, false);
  // Streams 0 and 1 of cache_seed: the new keys and values; 2 and 3: the cached ones.
  const uint64_t cache_seed = rng();
  fill_normal({&cb.k_new, &cb.v_new}, c.dtype, c.input_std, cache_seed);
  // Where key j of sequence b lies in the cache (batch or page, row).
  const auto place = [&](int b, int j) {
    if (!paged) return std::pair<int64_t, int64_t>{b, j};
    return std::pair<int64_t, int64_t>{
        cb.block_table[size_t(b) * cb.pages_per_sequence + j / spec.page_size], j % spec.page_size};
  };
  cb.keys.resize(s.batch);
  cb.values.resize(s.batch);
  for (int b = 0; b < s.batch; ++b) {
    const int length = spec.cached[b] + spec.appended;
    uint64_t stream = 2;
    for (auto [cache, fresh, dense] : {std::tuple{&st.k, &cb.k_new, &cb.keys[b]},
                                       std::tuple{&st.v, &cb.v_new, &cb.values[b]}}) {
      const int cols = cache == &st.k ? s.head_dim : value_head_dim(s);
      layout(*dense, c.dtype, 1, length, s.heads_kv, cols, false, 0, false);
      parallel_for(length, [&](int64_t j, int) {
        const bool old = j < spec.cached[b];
        for (int h = 0; h < s.heads_kv; ++h)
          for (int e = 0; e < cols; ++e) {
            const uint64_t index = ((uint64_t(b) * spec.capacity + j) * s.heads_kv + h) * cols + e;
            const float x = old ? c.input_std * standard_normal(cache_seed, stream, index)
                                : load_float(fresh->host.data(), c.dtype,
                                             offset(*fresh, b, j - spec.cached[b], h, e));
            store_float(dense->host.data(), c.dtype, offset(*dense, 0, j, h, e), x);
            if (old) {
              const auto [at, row] = place(b, int(j));
              store_float(cache->host.data(), c.dtype, offset(*cache, at, row, h, e), x);
            }
          }
      });
      ++stream;
    }
  }
}

Problem::~Problem() = default;

Params Problem::params(Backend backend) const { return views(backend, device_); }

// Views over the host copies (device cpu) or the device copies (device cuda).
Params Problem::views(Backend backend, Device device) const {
  const Storage& st = *storage_;
  const bool on_gpu = device.kind == DeviceKind::cuda;
  auto view = [&](const Buffer& buf) { return view_of(buf, case_.dtype, device); };
  Params p;
  p.q = view(st.q);
  p.k = view(st.k);
  p.v = view(st.v);
  p.out = view(st.out);
  p.lse = on_gpu ? static_cast<float*>(st.lse_device.data()) : const_cast<float*>(st.lse.data());
  p.scale = case_.scale;
  p.mask = case_.mask;
  p.variants = variants_of(case_, st.slopes.on(device.kind), st.bias.on(device.kind));
  p.sequences = st.sequences.on(device.kind);
  if (is_cache(case_)) {
    const CacheBuffers& cb = st.cache;
    KVCache& kv = p.kv_cache;
    kv.seqlens = on_gpu ? static_cast<const int32_t*>(cb.seqlens_device.data()) : cb.seqlens.data();
    if (case_.cache->appended > 0) {
      kv.k_new = view(cb.k_new);
      kv.v_new = view(cb.v_new);
    }
    if (!cb.block_table.empty())
      kv.block_table = on_gpu ? static_cast<const int32_t*>(cb.block_table_device.data())
                              : cb.block_table.data();
    kv.pages_per_sequence = cb.pages_per_sequence;
    kv.checked = case_.cache->checked;
    kv.key_splits = case_.cache->key_splits;
  }
  p.backend = backend;
  return p;
}

// Dense: the whole problem, its rows sampled (every row when seqlen_q <=
// max_rows, else first, last and evenly spaced ones between). Packed: each
// sequence with rows, sampled likewise; a KV cache, each sequence likewise.
std::vector<Problem::Part> Problem::parts(int max_rows) const {
  const Storage& st = *storage_;
  const auto sample = [&](int rows) {
    std::vector<int> out;
    const int n = std::min(rows, std::max(max_rows, 2));
    for (int r = 0; r < n; ++r) out.push_back(n == rows ? r : int(int64_t(r) * (rows - 1) / (n - 1)));
    return out;
  };
  std::vector<Part> out;
  if (!is_packed(case_) && !is_cache(case_)) {
    Part whole;
    whole.params = views(Backend::reference, Device{});
    whole.params.lse = nullptr;
    whole.spec = case_;
    whole.rows = sample(case_.shape.seqlen_q);
    out.push_back(std::move(whole));
    return out;
  }
  for (int b = 0; b < case_.shape.batch; ++b) {
    Part one;
    one.spec = sequence_case(case_, b);
    const Shape& s = one.spec.shape;
    if (s.seqlen_q == 0) continue;
    if (is_cache(case_)) {  // batch index b of q and out; the keys as the call must leave them
      one.batch0 = b;
      one.params.q = batch_view(st.q, case_.dtype, b);
      one.params.k = view_of(st.cache.keys[b], case_.dtype, Device{});
      one.params.v = view_of(st.cache.values[b], case_.dtype, Device{});
      one.params.out = batch_view(st.out, case_.dtype, b);
    } else {  // packed: the sequence's rows and keys
      one.q_row0 = st.sequences.cu_q[b];
      const int64_t k0 = st.sequences.cu_k[b];
      one.params.q = rows_view(st.q, case_.dtype, one.q_row0, s.seqlen_q);
      one.params.k = rows_view(st.k, case_.dtype, k0, s.seqlen_k);
      one.params.v = rows_view(st.v, case_.dtype, k0, s.seqlen_k);
      one.params.out = rows_view(st.out, case_.dtype, one.q_row0, s.seqlen_q);
    }
    one.params.scale = case_.scale;
    one.params.mask = case_.mask;
    one.params.variants = variants_of(case_, st.slopes.host.data());
    one.params.backend = Backend::reference;
    one.rows = sample(s.seqlen_q);
    out.push_back(std::move(one));
  }
  return out;
}

void Problem::poison_output() {
  Storage& st = *storage_;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const size_t elems = st.out.host.size() / dtype_size(case_.dtype);
  for (size_t e = 0; e < elems; ++e) store_float(st.out.host.data(), case_.dtype, int64_t(e), nan);
  std::fill(st.lse.begin(), st.lse.end(), nan);
  if (device_.kind == DeviceKind::cuda) {
    st.out.device.upload(st.out.host.data());
    st.lse_device.upload(st.lse.data());
  }
}

std::vector<float> Problem::output() {
  Storage& st = *storage_;
  if (device_.kind == DeviceKind::cuda) {
    device_synchronize(device_.index);
    st.out.device.download(st.out.host.data());
  }
  std::vector<float> out;
  for (int64_t b = 0; b < st.out.shape[0]; ++b)
    for (int64_t i = 0; i < st.out.shape[1]; ++i)
      for (int64_t h = 0; h < st.out.shape[2]; ++h)
        for (int64_t c = 0; c < st.out.shape[3]; ++c)
          out.push_back(load_float(st.out.host.data(), case_.dtype, offset(st.out, b, i, h, c)));
  return out;
}

const std::vector<int32_t>& Problem::block_table() const { return storage_->cache.block_table; }

double Problem::io_bytes() const {
  const Shape& s = case_.shape;
  const int batch = is_packed(case_) ? 1 : s.batch;
  const int dv = value_head_dim(s);
  const double q = double(batch) * total_q(case_) * s.heads_q * (s.head_dim + dv);
  const double kv = double(batch) * total_k(case_) * s.heads_kv * (s.head_dim + dv);
  return (q + kv) * dtype_size(case_.dtype);
}

Accuracy Problem::evaluate(Backend backend, int max_rows) {
  Storage& st = *storage_;
  const Shape& s = case_.shape;
  if (device_.kind == DeviceKind::cuda) {
    device_synchronize(device_.index);
    st.out.device.download(st.out.host.data());
    st.lse_device.download(st.lse.data());
  }
  const int64_t cache_mismatches = check_appended();
  if (st.parts.empty()) st.parts = parts(max_rows);
  const bool independent = backend == Backend::reference;
  const int64_t lse_rows = total_q(case_);  // lse's row count per (batch index, head)

  Accuracy acc;
  double err2 = 0, ref2 = 0, std_err2 = 0;
  for (Part& part : st.parts) {
    const ScoreRule rule = score_rule(part.spec, st.slopes.host.data(), st.bias.addends());
    const AttnParams part_params = attn_params(part.params);
    if (independent && part.independent.empty())
      part.independent =
          standard_rows_float64(part_params, rule, part.rows, part.independent_lse);
    if (!independent && part.ref.empty())
      part.ref = reference_rows(part.params, part.rows, &part.ref_lse);
    if (case_.dtype != DType::f32 && part.standard.empty())
      part.standard = standard_rows_in_dtype(part_params, rule, part.rows);
    const std::vector<double>& oracle = independent ? part.independent : part.ref;
    const std::vector<double>& oracle_lse = independent ? part.independent_lse : part.ref_lse;
    const int64_t n = int64_t(part.rows.size());
    acc.checked_rows += int(n);
    for (int64_t b = 0; b < part.spec.shape.batch; ++b)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t h = 0; h < s.heads_q; ++h) {
          const int64_t row = part.q_row0 + part.rows[r];
          const int64_t base = offset(st.out, part.batch0 + b, row, h, 0);
          const double* ref = &oracle[((b * n + r) * s.heads_q + h) * value_head_dim(s)];
          for (int64_t c = 0; c < value_head_dim(s); ++c) {
            const double got = load_float(st.out.host.data(), case_.dtype, base + c);
            const double diff = got - ref[c];
            err2 += diff * diff;
            ref2 += ref[c] * ref[c];
            acc.max_abs = std::max(acc.max_abs, std::isnan(diff) ? INFINITY : std::fabs(diff));
            if (!part.standard.empty()) {
              const double sd = part.standard[&ref[c] - oracle.data()] - ref[c];
              std_err2 += sd * sd;
            }
          }
          const double ref_lse = oracle_lse[(b * s.heads_q + h) * n + r];
          const float got_lse = st.lse[((part.batch0 + b) * s.heads_q + h) * lse_rows + row];
          const double lse_err = std::isinf(ref_lse) ? (got_lse == ref_lse ? 0.0 : INFINITY)
                                                     : std::fabs(got_lse - ref_lse);
          acc.lse_max_abs = std::max(acc.lse_max_abs, std::isnan(lse_err) ? INFINITY : lse_err);
        }
  }
  const double denom = std::sqrt(std::max(ref2, 1e-300));
  acc.rel_l2 = ref2 > 0 ? std::sqrt(err2) / denom : std::sqrt(err2);
  if (std::isnan(acc.rel_l2)) acc.rel_l2 = INFINITY;
  acc.standard_rel_l2 = ref2 > 0 ? std::sqrt(std_err2) / denom : std::sqrt(std_err2);

  for (int64_t b = 0; b < st.out.shape[0]; ++b)
    for (int64_t i = 0; i < st.out.shape[1]; ++i)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t c = 0; c < value_head_dim(s); ++c)
          acc.unwritten += std::isnan(load_float(st.out.host.data(), case_.dtype,
                                                 offset(st.out, b, i, h, c)));
  for (float x : st.lse) acc.unwritten += std::isnan(x);

  // fp32: exact to 1e-5. 16-bit: twice standard attention's error in that dtype,
  // plus the rounding of the output itself (2^-12 for f16, 2^-9 for bf16, relative:
  // a quarter of the dtype's ulp at 1).
  const double out_rounding = case_.dtype == DType::bf16 ? 0x1p-9 : 0x1p-12;
  acc.tolerance = case_.dtype == DType::f32 ? 1e-5 : 2 * acc.standard_rel_l2 + out_rounding;
  acc.cache_mismatches = cache_mismatches;
  acc.passed = acc.unwritten == 0 && acc.cache_mismatches == 0 && acc.rel_l2 <= acc.tolerance &&
               acc.lse_max_abs <= 1e-3;
  return acc;
}

// A KV-cache case's appended rows as the call left them in the cache: every
// element equal to k_new's (v_new's), bit for bit. 0 without a cache.
int64_t Problem::check_appended() {
  if (!is_cache(case_) || case_.cache->appended == 0) return 0;
  Storage& st = *storage_;
  const Shape& s = case_.shape;
  const Case::Cache& spec = *case_.cache;
  const CacheBuffers& cb = st.cache;
  int64_t mismatches = 0;
  for (auto [cache, fresh] : {std::pair{&st.k, &cb.k_new}, std::pair{&st.v, &cb.v_new}}) {
    std::vector<uint8_t> now = cache->host;
    if (device_.kind == DeviceKind::cuda) cache->device.download(now.data());
    for (int b = 0; b < s.batch; ++b)
      for (int r = 0; r < spec.appended; ++r) {
        const int j = spec.cached[b] + r;
        const int64_t at = spec.page_size ? cb.block_table[size_t(b) * cb.pages_per_sequence +
                                                          j / spec.page_size]
                                          : b;
        const int64_t row = spec.page_size ? j % spec.page_size : j;
        const size_t bytes = dtype_size(case_.dtype);
        for (int h = 0; h < s.heads_kv; ++h)
          mismatches += std::memcmp(now.data() + offset(*cache, at, row, h, 0) * bytes,
                                    fresh->host.data() + offset(*fresh, b, r, h, 0) * bytes,
                                    bytes * (cache == &st.k ? s.head_dim : value_head_dim(s))) != 0;
      }
  }
  return mismatches;
}

std::string Accuracy::summary() const {
  std::ostringstream out;
  out << "rel_l2 " << rel_l2 << " (tolerance " << tolerance << "), max_abs " << max_abs
      << ", lse_max_abs " << lse_max_abs << ", unwritten " << unwritten << ", rows checked "
      << checked_rows;
  if (cache_mismatches > 0) out << ", appended cache rows wrong " << cache_mismatches;
  if (standard_rel_l2 > 0) out << ", standard-in-dtype rel_l2 " << standard_rel_l2;
  return out.str();
}

}  // namespace flashattn::harness
