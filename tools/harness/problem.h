// One attention problem with fresh random inputs, on the CPU or a GPU, that
// tests, `flashattn check` and `flashattn bench` run backends on and score
// against the float64 reference.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "device_memory.h"
#include "flashattn/flashattn.hpp"
#include "core/params.h"

namespace flashattn::harness {

struct Shape {
  int batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1, head_dim = 1;
  int head_dim_v = 0;  // v's and out's head_dim; 0: head_dim's
};

// v's and out's head_dim.
inline int value_head_dim(const Shape& s) { return s.head_dim_v > 0 ? s.head_dim_v : s.head_dim; }

struct Case {
  Shape shape;
  DType dtype = DType::f32;
  Mask mask = Mask::none;
  // Strided views: q and out are slices of wider (heads + 1, head_dim + pad)
  // tensors; k and v are (batch, heads, seqlen, head_dim) tensors transposed.
  // pad 3 leaves 16-bit rows unaligned; 8 keeps them on 16 bytes, as TMA needs.
  bool strided = false;
  int strided_pad = 3;
  std::optional<float> scale;
  float input_std = 1.0f;  // inputs are normal(0, input_std), rounded to dtype
  // Variants (flashattn::Variants): a sliding window's sides (-1: open), the
  // softcap (0: none), and ALiBi with alibi_slopes(heads_q).
  int window_left = -1, window_right = -1;
  float softcap = 0.0f;
  bool alibi = false;
  // A bias or boolean mask (flashattn::ScoreBias) of this element type, drawn
  // at random per problem (bias.h says the pattern), of size 1 on the
  // dimensions it broadcasts over; strided cases pad its rows. key_major: each
  // (seqlen_q, seqlen_k) slice stored transposed (row stride 1, key stride
  // seqlen_q + pad).
  struct Bias {
    BiasType type = BiasType::f32;
    bool broadcast_batch = false, broadcast_heads = false;
    bool key_major = false;
  };
  std::optional<Bias> bias;
  // Dropout (flashattn::Dropout) at rate dropout.p; a problem draws the seed
  // and offset from its own seed when p > 0, so each run drops afresh.
  Dropout dropout;
  // A variable-length batch (flashattn::Sequences): these sequences packed
  // along seqlen in tensors of batch 1; shape.batch is their number and
  // shape.seqlen_q/k the longest (packed_case() sets both). Empty: dense.
  std::vector<SequenceLengths> sequences;
  // Packed: false passes the prefix sums unchecked (Sequences::checked), with
  // maxima above the longest sequences, so that the GPU checks them and the
  // grids are wider than the batch needs.
  bool checked_sequences = true;
  // A KV-cache call (flashattn::KVCache), or none.
  struct Cache {
    std::vector<int> cached;  // keys per sequence in the cache before the call
    int appended = 0;         // keys the call appends to every sequence
    int capacity = 0;         // keys a sequence's cache holds
    int page_size = 0;        // paged: keys per page; 0: contiguous
    bool checked = true;
    int key_splits = 0;
  };
  std::optional<Cache> cache;
};

// c as a KV-cache call: q of seqlen_q rows per sequence against a cache the
// spec describes; shape.batch and shape.seqlen_k (the longest length) follow it.
Case cache_case(Case c, Case::Cache cache);
bool is_cache(const Case& c);

// c as a packed batch of `sequences`.
Case packed_case(Case c, std::vector<SequenceLengths> sequences);
bool is_packed(const Case& c);
// The tensors' seqlen: every sequence's rows (keys) packed, or shape's.
int64_t total_q(const Case& c);
int64_t total_k(const Case& c);
// Sequence b of a packed case as a dense case of batch 1.
Case sequence_case(const Case& c, int b);
// Prefix sums of the sequences' query (or key) lengths, batch + 1 entries.
std::vector<int32_t> prefix_sums(const Case& c, bool queries);

std::string describe(const Case& c);
// 2·B·Hq·Nq·Nk·(d + d_v) (4·B·Hq·Nq·Nk·d where v's head_dim is q's), halved for
// causal; with a window, 2·B·Hq·(d + d_v) times the (row, key) pairs it leaves visible.
double flop_count(const Case& c);

// ALiBi's standard slopes for `heads` query heads: 2^(−8(h+1)/heads).
std::vector<float> alibi_slopes(int heads);
// The public Variants of case c, with ALiBi's slopes at `slopes` (on the
// tensors' device) if c.alibi, and `bias` (BiasBuffer::on; data null: none).
Variants variants_of(const Case& c, const float* slopes, const ScoreBias& bias = {});
// c with its dropout's seed and offset drawn from rng (p > 0; else c).
Case with_dropout_seed(Case c, std::mt19937_64& rng);

// A case's ALiBi slopes (none without ALiBi) on the host and, for a problem
// on a GPU, on its device too.
struct SlopeBuffer {
  std::vector<float> host;
  DeviceBuffer device;

  SlopeBuffer() = default;
  SlopeBuffer(const Case& c, Device where);
  const float* on(DeviceKind kind) const;  // the copy on the CPU or the GPU
};

// A packed case's prefix sums on the host and, for a problem on a GPU, on its
// device too; as public Sequences (dense: none).
struct SequenceBuffer {
  std::vector<int32_t> cu_q, cu_k;
  DeviceBuffer cu_q_device, cu_k_device;
  bool checked = true;
  int64_t max_seqlen_q = -1, max_seqlen_k = -1;  // given where unchecked

  SequenceBuffer() = default;
  SequenceBuffer(const Case& c, Device where);
  Sequences on(DeviceKind kind) const;
};

struct Accuracy {
  double rel_l2 = 0;           // ‖out − ref‖ / ‖ref‖ over the checked rows
  double max_abs = 0;
  double lse_max_abs = 0;      // over rows with a finite reference lse
  double standard_rel_l2 = 0;  // standard attention computed in the dtype (16-bit only)
  double tolerance = 0;        // the bound rel_l2 must meet
  int64_t unwritten = 0;       // output elements still NaN (poison) anywhere
  int64_t cache_mismatches = 0;  // a KV cache's appended elements not equal to k_new's and v_new's
  int checked_rows = 0;
  bool passed = false;
  std::string summary() const;
};

class Problem {
 public:
  Problem(const Case& c, Device device, uint64_t seed);
  ~Problem();

  const Case& spec() const { return case_; }
  Params params(Backend backend) const;  // views over this problem's buffers
  void poison_output();                  // NaN into every out and lse element
  // Scores the output `backend` wrote against a float64 oracle on at most
  // max_rows query rows (all rows when seqlen_q <= max_rows): the reference
  // backend for every other backend, and for the reference backend itself the
  // harness's own float64 standard attention (standard.h), so that no backend
  // is checked against its own code.
  Accuracy evaluate(Backend backend, int max_rows = 256);
  // The output as the backend left it, as floats in (batch, seqlen_q, heads_q,
  // head_dim) order (waits for the device).
  std::vector<float> output();
  // A paged KV-cache case's block table (host copy; empty otherwise).
  const std::vector<int32_t>& block_table() const;
  // Bytes of q, k, v and out as the kernels see them (for bandwidth floors).
  double io_bytes() const;

 private:
  struct Storage;
  struct Part;
  Params views(Backend backend, Device device) const;
  std::vector<Part> parts(int max_rows) const;
  void make_cache(std::mt19937_64& rng);
  int64_t check_appended();
  Case case_;
  Device device_;
  std::unique_ptr<Storage> storage_;
};

}  // namespace flashattn::harness
