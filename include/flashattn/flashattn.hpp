// flashattn: exact attention, softmax(Q·Kᵀ·scale)·V, computed without materialising
// the seqlen_q × seqlen_k score matrix.
//
// Tensors are views in the (batch, seqlen, heads, head_dim) layout with strides in
// elements; head_dim must be contiguous (stride 1). q and k share a head_dim; v
// may have another (head_dim_v), which out then has. One call:
//
//   flashattn::Params p;
//   p.q = q; p.k = k; p.v = v; p.out = out;   // TensorView
//   p.mask = flashattn::Mask::causal_bottom_right;
//   flashattn::forward(p);                   // throws flashattn::Error on bad input
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace flashattn {

enum class DType { f32, f16, bf16 };
enum class DeviceKind { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;  // CUDA ordinal; ignored on the CPU
};

// A strided 4-d view: shape and strides are (batch, seqlen, heads, head_dim).
// batch and seqlen may be 0 (data may then be null); heads and head_dim >= 1.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t shape[4] = {0, 0, 0, 0};
  int64_t stride[4] = {0, 0, 0, 0};
  Device device{};
};

// A contiguous (batch, seqlen, heads, head_dim) view of `data`.
TensorView contiguous_view(void* data, DType dtype, int64_t batch, int64_t seqlen,
                           int64_t heads, int64_t head_dim, Device device = {});

// Which keys a query row may see. With off = 0 (top-left, PyTorch's is_causal) or
// off = seqlen_k - seqlen_q (bottom-right, FlashAttention >= 2.1), key j is visible
// to query i iff j <= i + off. A row that sees no key (bottom-right rows with
// i + off < 0; every row when seqlen_k is 0) gets output 0 and lse -inf. Any
// other row follows standard attention's arithmetic, non-finite values included:
// a NaN or +inf score makes its row NaN, a -inf score among finite ones weighs 0,
// and a row whose visible scores are all -inf is NaN (docs/guide.md).
enum class Mask { none, causal_top_left, causal_bottom_right };

// Variants of the scores and the mask, each off by default and combinable with
// each other and with the causal masks (docs/guide.md). With off the mask's
// alignment (0 for causal_top_left; seqlen_k - seqlen_q for causal_bottom_right
// and for no mask, FlashAttention's convention):
// An additive bias or a boolean mask on the scores, PyTorch's attn_mask: element
// (b, h, i, j) of a (batch or 1, heads_q or 1, seqlen_q, seqlen_k) tensor lies at
// data + b·stride[0] + h·stride[1] + i·stride[2] + j·stride[3] (in elements; a
// dimension of size 1 is broadcast and its stride not read), on the tensors'
// device; it is read tile by tile, never expanded. A float bias (f32, f16, bf16,
// whatever q's dtype) is added to the scaled score of query head h, row i and key
// j after the softcap and ALiBi; a boolean mask (one byte per element) keeps the
// score where nonzero and masks it (−inf) where zero. With either, a row whose
// every score is −inf (one the mask leaves without keys) gets output 0, lse −inf
// and zero gradients, as PyTorch's SDPA gives a fully masked row. Dense batches
// only (not with Sequences or KVCache); the bias itself gets no gradient.
enum class BiasType { f32, f16, bf16, boolean };

struct ScoreBias {
  const void* data = nullptr;  // null: none
  BiasType type = BiasType::f32;
  int64_t shape[4] = {0, 0, 0, 0};   // (batch or 1, heads_q or 1, seqlen_q, seqlen_k)
  int64_t stride[4] = {0, 0, 0, 0};  // elements; >= 0
};

// Dropout on the attention probabilities, as in training: each probability
// p_ij of query head h (after the softmax, before the product with V) is kept
// with probability 1 - p and scaled by 1 / (1 - p), or zeroed. Which elements
// are dropped is a function of (seed, offset) and the element's coordinates
// alone (Philox4x32-7, counter-based; docs/variants.md gives the layout), the
// same on every backend: a backward given the forward's Dropout drops the same
// elements without a stored mask, and dropout_keep_mask() below returns them.
// p is rounded to a multiple of 2^-16 (the scale is the rounded rate's exact
// inverse); p = 1 drops everything (out 0). lse is the undropped softmax's.
// A call uses the streams offset + b·heads_q + h for batch index (or sequence)
// b and query head h: a next, independent call with the same seed passes
// offset + batch·heads_q or more. Not with a KV cache.
struct Dropout {
  float p = 0.0f;  // in [0, 1]
  uint64_t seed = 0;
  uint64_t offset = 0;
};

struct Variants {
  // Sliding window: query i sees keys j with i + off - window_left <= j <=
  // i + off + window_right; -1 leaves that side open. A causal mask is
  // window_right = 0 and wins over a wider one. Blocks outside are skipped.
  int window_left = -1;
  int window_right = -1;
  // > 0: each scaled score s becomes softcap * tanh(s / softcap) (Gemma 2, Grok).
  float softcap = 0.0f;
  // ALiBi: float32 slopes (heads_q), on the tensors' device; score i, j of head
  // h gets -slope_h * |i + off - j| after the softcap. Null: none.
  const float* alibi_slopes = nullptr;
  // An additive bias or a boolean mask (ScoreBias above); data null: none.
  ScoreBias bias;
  // Dropout on the attention probabilities (Dropout below); p = 0: none.
  Dropout dropout;
};

// A variable-length batch (FlashAttention's varlen layout): `batch` sequences
// packed one after another along seqlen, without padding. q, out (and dout, dq)
// are (1, total_q, heads_q, head_dim), k and v (and dk, dv) (1, total_k,
// heads_kv, head_dim), each with any strides as in a dense batch. Sequence b's
// query rows are [cu_seqlens_q[b], cu_seqlens_q[b + 1]) and its keys
// [cu_seqlens_k[b], cu_seqlens_k[b + 1]): int32 prefix sums of batch + 1
// entries, on the tensors' device, starting at 0, nondecreasing, ending at
// total_q and total_k. Each sequence is its own attention problem: the mask's
// alignment and the window follow its own lengths, and its rows see only its
// own keys. lse is then float32 (heads_q, total_q). Null cu_seqlens_q: a dense
// batch. max_seqlen_q and max_seqlen_k are FlashAttention's arguments: -1 (not
// given) or at least the longest sequence.
//   - checked (the default): the library reads the prefix sums to check them (a
//     copy to the host for CUDA tensors: the call waits for the stream) and
//     finds the maxima itself, so max_seqlen is optional and a smaller value is a
//     caller's mistake that it reports (on the same host copy, at no cost);
//   - unchecked (CUDA tensors): nothing waits, so a packed call can be captured
//     in a CUDA graph. max_seqlen_q and max_seqlen_k must be given (the grids are
//     sized by them), and the prefix sums are checked on the device before any
//     kernel reads them: where they break a rule (0 first, nondecreasing, the
//     totals last, no sequence longer than its max_seqlen), every element of out
//     and lse (a backward's dq, dk and dv) is NaN, and nothing outside the
//     tensors is read or written. Host tensors are always checked.
struct Sequences {
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int batch = 0;
  int64_t max_seqlen_q = -1;
  int64_t max_seqlen_k = -1;
  bool checked = true;
};

// A KV cache (forward only): the keys and values of Params are the cache, and
// each sequence b of q's batch attends to the first length(b) = seqlens[b] +
// (k_new's seqlen) keys of its own part of it. Two layouts:
//   - contiguous: k and v (batch, capacity, heads_kv, head_dim), sequence b's
//     keys are rows [0, length(b)) of batch b;
//   - paged (block_table set): k and v (pages, page_size, heads_kv, head_dim),
//     sequence b's key j is row j % page_size of page
//     block_table[b · pages_per_sequence + j / page_size]; capacity is
//     pages_per_sequence · page_size.
// With k_new and v_new ((batch, seqlen_new, heads_kv, head_dim)), the call first
// writes them into each sequence's cache at rows [seqlens[b], seqlens[b] +
// seqlen_new), then attends over length(b) keys; seqlens itself is left as it
// is (the caller advances it). The mask's alignment follows each sequence's
// lengths: causal_bottom_right makes q's last row see the sequence's last key.
// seqlens and block_table are int32 on the tensors' device. With checked, the
// library reads them to the host and rejects lengths past the capacity and page
// indices out of range (for CUDA tensors the call then waits for the stream);
// unchecked, nothing waits, so a decode step can be captured in a CUDA graph,
// and the kernel checks on the device instead: a sequence whose length or
// pages are out of range gets NaN output rows and lse, and nothing outside the
// tensors is read or written (cuda_mma; other backends take checked calls only).
struct KVCache {
  const int32_t* seqlens = nullptr;  // (batch,): keys cached before this call; null: no cache
  TensorView k_new, v_new;           // optional keys and values to append (data null: none)
  const int32_t* block_table = nullptr;  // paged: (batch, pages_per_sequence), row-major
  int pages_per_sequence = 0;
  bool checked = true;
  // Splits of each sequence's keys over blocks, merged by their lse (split-KV):
  // 0 chooses from the problem and the GPU, 1 runs none; at most 128.
  int key_splits = 0;
};

// The backends; backends() describes each (device, dtypes, head_dim limit) from
// the library's one table, which the C ABI, the CLI and Python also read.
enum class Backend {
  automatic,  // chosen from the device, dtype, shape and GPU architecture
  reference,
  cpu,
  cuda_naive,
  cuda_tiled,
  cuda_tf32x3,
  cuda_mma,
  cuda_wgmma,
  cuda_f16x3,
};

struct BackendInfo {
  Backend backend;
  std::string_view name;     // as to_string() and backend_from_string() spell it
  DeviceKind device;         // where its tensors live
  uint32_t dtypes;           // bit (1 << int(DType)) for each dtype it takes
  int max_head_dim;          // 0: any head_dim
  int compute_capability;    // 0: any GPU flashattn runs on (8.0 or newer); else only this one
  std::string_view summary;  // how it computes, in one line
  // backward() on this backend: -1 where it has none, else its head_dim limit
  // (0: any). Its dtypes are the forward's.
  int backward_max_head_dim = -1;
  // Whether its forward runs variable-length batches (Sequences).
  bool takes_sequences = false;
  // Whether it runs KV-cache calls (KVCache), and paged caches among them.
  bool takes_kv_cache = false;
  bool takes_paged_kv = false;
  // Whether its backward runs variable-length batches.
  bool takes_backward_sequences = false;
  // Whether its forward, and its backward, run v (and out) with a head_dim other
  // than q's and k's (head_dim_v ≠ head_dim). The head_dim limits hold for both.
  bool takes_head_dim_v = false;
  bool takes_backward_head_dim_v = false;
  bool takes(DType dtype) const { return (dtypes >> int(dtype)) & 1u; }
  bool takes_head_dim(int head_dim) const { return max_head_dim == 0 || head_dim <= max_head_dim; }
  bool has_backward() const { return backward_max_head_dim >= 0; }
  bool takes_backward_head_dim(int head_dim) const {
    return backward_max_head_dim == 0 || head_dim <= backward_max_head_dim;
  }
  // Whether its forward (backward) takes q and k of head_dim with v of head_dim_v:
  // the wider within its limit, and two head dims only where it takes them.
  bool takes_head_dims(int head_dim, int head_dim_v) const {
    return (head_dim_v == head_dim || takes_head_dim_v) &&
           takes_head_dim(head_dim > head_dim_v ? head_dim : head_dim_v);
  }
  bool takes_backward_head_dims(int head_dim, int head_dim_v) const {
    return has_backward() && (head_dim_v == head_dim || takes_backward_head_dim_v) &&
           takes_backward_head_dim(head_dim > head_dim_v ? head_dim : head_dim_v);
  }
};

// Every backend of the library (automatic excluded), in enum order; those this
// build or machine cannot run are listed too (available_backends() says which run).
const std::vector<BackendInfo>& backends();

struct Params {
  TensorView q, k, v, out;  // out: q's shape with v's head_dim
  // Optional log-sum-exp of the scaled scores per row: float32, contiguous
  // (batch, heads_q, seqlen_q) (a variable-length batch: (heads_q, total_q)),
  // on the same device as out. Natural log.
  float* lse = nullptr;
  std::optional<float> scale;  // any finite value; default 1/sqrt(head_dim)
  Mask mask = Mask::none;
  Variants variants;
  Sequences sequences;  // a variable-length batch; default: dense
  KVCache kv_cache;     // k and v are a KV cache; default: none
  void* stream = nullptr;  // cudaStream_t for CUDA tensors; nullptr is the default stream
  Backend backend = Backend::automatic;
};

enum class Status {
  ok = 0,
  invalid_argument = 1,
  unsupported = 2,
  cuda_error = 3,
  internal = 4,
};

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

// Checks every argument, then runs attention. Throws Error; nothing is written to
// out or lse when an argument is rejected.
void forward(const Params& params);

// The backend `forward` would run for these params (after validation).
Backend select_backend(const Params& params);

// The gradients of attention with respect to q, k and v, given the gradient dout
// of a loss with respect to the forward's output. With S = scale·Q·Kᵀ (masked),
// P = softmax(S) row by row, O = P·V:
//   dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P∘(dP − D) with D_i = Σ_c dO_ic·O_ic,
//   dQ = scale·dS·K,  dK = scale·dSᵀ·Q.
// P is recomputed from q, k and the forward's lse, never stored. GQA: dk and dv
// of a kv head sum over the query heads of its group. A row that sees no key gets
// dq 0 and adds nothing to dk and dv; keys no row sees get dk = dv = 0.
struct BackwardParams {
  TensorView q, k, v;
  TensorView out;   // the forward's output for q, k, v (q's shape, v's head_dim)
  TensorView dout;  // the gradient with respect to out (out's shape)
  // The forward's lse: float32, contiguous (batch, heads_q, seqlen_q), on q's
  // device. Required where q has elements.
  const float* lse = nullptr;
  TensorView dq, dk, dv;  // written; the shapes of q, k and v, q's dtype
  std::optional<float> scale;  // as in the forward: any finite value, default 1/sqrt(head_dim)
  Mask mask = Mask::none;
  Variants variants;  // the forward's: the gradients are of the attention they define
  Sequences sequences;  // the forward's layout: a variable-length batch, or dense
  // Bit-identical gradients from run to run (no floating-point atomics whose
  // order varies); on the fastest kernels this costs time (docs/guide.md).
  bool deterministic = false;
  void* stream = nullptr;
  Backend backend = Backend::automatic;
};

// Checks every argument, then computes dq, dk and dv. Throws Error; nothing is
// written to dq, dk or dv when an argument is rejected.
void backward(const BackwardParams& params);

// The backend `backward` would run for these params (after validation).
Backend select_backward_backend(const BackwardParams& params);

// The float64 reference on a sample of query rows of host tensors, for checking
// problems too large to compute whole: outputs laid out (batch, rows.size(),
// heads_q, head_dim) and, if lse is given, lse (batch, heads_q, rows.size()).
// params is checked as by forward(); params.out is not written.
std::vector<double> reference_rows(const Params& params, const std::vector<int>& rows,
                                   std::vector<double>* lse = nullptr);

// Which elements `dropout` keeps in a dense (batch, heads_q, seqlen_q, seqlen_k)
// problem: keep[((b·heads_q + h)·seqlen_q + i)·seqlen_k + j] is 1 where element
// (b, h, i, j) is kept, else 0. Sequence b of a variable-length batch is batch 1
// at offset dropout.offset + b·heads_q. Throws Error on a p outside [0, 1] or a
// negative size.
std::vector<uint8_t> dropout_keep_mask(const Dropout& dropout, int batch, int heads_q,
                                       int seqlen_q, int seqlen_k);

std::string_view to_string(Backend backend);
std::string_view to_string(DType dtype);
std::optional<Backend> backend_from_string(std::string_view name);
std::optional<DType> dtype_from_string(std::string_view name);
size_t dtype_size(DType dtype);

// Whether `backend` takes tensors of `dtype` and this head_dim (backends()'
// table; device, GPU architecture and stride rules are checked by forward()).
bool backend_supports(Backend backend, DType dtype, int head_dim = 1);
// The same for q and k of head_dim and v of head_dim_v.
bool backend_supports(Backend backend, DType dtype, int head_dim, int head_dim_v);

// Backends compiled into this build that can run on tensors of `device`.
std::vector<Backend> available_backends(DeviceKind device);

// Number of CUDA devices visible to this build (0 without CUDA support or GPU).
int cuda_device_count();

}  // namespace flashattn
