/* flashattn C ABI: the same calls as flashattn::forward and flashattn::backward,
 * for other languages.
 *
 * flashattn_forward, flashattn_backward and flashattn_get_backend_info return
 * FLASHATTN_OK or an error code; flashattn_last_error() then gives the message (thread-local, valid
 * until the next of those calls on the thread, "" after a success). Nothing
 * is written to the outputs when an argument is rejected.
 *
 * Compatibility: a binary built against this header keeps working with later
 * libraries. The layout of flashattn_params and flashattn_tensor is frozen; a
 * capability that needs new fields comes as a new struct whose first field is
 * its size in bytes (struct_size, set by the caller to sizeof the struct it was
 * built with), and the library reads or writes only the fields that size covers,
 * so such structs grow at the end without breaking older binaries.
 * flashattn_backend_info, flashattn_backward_params, flashattn_variants,
 * flashattn_sequences, flashattn_kv_cache and flashattn_forward_options are
 * such structs. Enum
 * values are never reused. */
#ifndef FLASHATTN_H_
#define FLASHATTN_H_

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  FLASHATTN_OK = 0,
  FLASHATTN_ERR_INVALID_ARGUMENT = 1,
  FLASHATTN_ERR_UNSUPPORTED = 2,
  FLASHATTN_ERR_CUDA = 3,
  FLASHATTN_ERR_INTERNAL = 4
} flashattn_status;

typedef enum { FLASHATTN_F32 = 0, FLASHATTN_F16 = 1, FLASHATTN_BF16 = 2 } flashattn_dtype;
typedef enum { FLASHATTN_CPU = 0, FLASHATTN_CUDA = 1 } flashattn_device;

typedef enum {
  FLASHATTN_MASK_NONE = 0,
  FLASHATTN_MASK_CAUSAL_TOP_LEFT = 1,
  FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT = 2
} flashattn_mask;

/* The element type of a bias (flashattn_variants.bias): a float added to the
 * scores, or a boolean mask of one byte per element (nonzero: attend). */
typedef enum {
  FLASHATTN_BIAS_F32 = 0,
  FLASHATTN_BIAS_F16 = 1,
  FLASHATTN_BIAS_BF16 = 2,
  FLASHATTN_BIAS_BOOL = 3
} flashattn_bias_type;

typedef enum {
  FLASHATTN_BACKEND_AUTO = 0,
  FLASHATTN_BACKEND_REFERENCE = 1,
  FLASHATTN_BACKEND_CPU = 2,
  FLASHATTN_BACKEND_CUDA_NAIVE = 3,
  FLASHATTN_BACKEND_CUDA_TILED = 4,
  FLASHATTN_BACKEND_CUDA_TF32X3 = 5,
  FLASHATTN_BACKEND_CUDA_MMA = 6,
  FLASHATTN_BACKEND_CUDA_WGMMA = 7,
  FLASHATTN_BACKEND_CUDA_F16X3 = 8
} flashattn_backend;

/* A (batch, seqlen, heads, head_dim) view; strides in elements. batch and seqlen
 * may be 0 (data may then be NULL); heads and head_dim must be >= 1. */
typedef struct {
  void* data;
  int32_t dtype;        /* flashattn_dtype */
  int64_t shape[4];
  int64_t strides[4];
  int32_t device;       /* flashattn_device */
  int32_t device_index; /* CUDA ordinal */
} flashattn_tensor;

typedef struct {
  flashattn_tensor q, k, v, out; /* out: q's shape with v's head_dim */
  float* lse;         /* optional: float32 (batch, heads_q, seqlen_q), or NULL */
  int32_t has_scale;  /* 0: scale = 1/sqrt(head_dim); else scale, any finite value */
  float scale;
  int32_t mask;       /* flashattn_mask */
  int32_t backend;    /* flashattn_backend */
  void* stream;       /* cudaStream_t, or NULL for the default stream */
} flashattn_params;

/* One backend, from the library's table (the same one flashattn::backends(), the
 * CLI and Python read). */
typedef struct {
  uint32_t struct_size;       /* the caller sets sizeof(flashattn_backend_info) */
  int32_t backend;            /* flashattn_backend value */
  const char* name;           /* "cuda_mma", ...: static storage */
  int32_t device;             /* flashattn_device its tensors live on */
  uint32_t dtypes;            /* bit (1 << flashattn_dtype) for each dtype it takes */
  int32_t max_head_dim;       /* 0: any head_dim */
  int32_t compute_capability; /* 0: any GPU of 8.0 or newer; else only this one (major*10+minor) */
  const char* summary;        /* how it computes, in one line: static storage */
  int32_t backward_max_head_dim; /* -1: no backward on this backend; 0: any head_dim; else the limit */
  int32_t takes_sequences;    /* nonzero: its forward runs variable-length batches (flashattn_sequences) */
  int32_t takes_kv_cache;     /* nonzero: runs KV-cache calls (flashattn_kv_cache) */
  int32_t takes_paged_kv;     /* nonzero: runs paged KV caches */
  int32_t takes_backward_sequences; /* nonzero: its backward runs variable-length batches */
  int32_t takes_head_dim_v;   /* nonzero: its forward runs v's head_dim ≠ q's and k's */
  int32_t takes_backward_head_dim_v; /* nonzero: its backward does too */
} flashattn_backend_info;

/* Number of backends (FLASHATTN_BACKEND_AUTO excluded); index them 0 .. count-1. */
int32_t flashattn_backend_count(void);

/* Fills *info (its first info->struct_size bytes) with backend `index`. */
flashattn_status flashattn_get_backend_info(int32_t index, flashattn_backend_info* info);

/* Fills a contiguous view of data. */
flashattn_tensor flashattn_contiguous(void* data, flashattn_dtype dtype, int64_t batch,
                                      int64_t seqlen, int64_t heads, int64_t head_dim,
                                      flashattn_device device, int32_t device_index);

/* A params struct with q, k, v, out set and every option at its default. */
flashattn_params flashattn_default_params(flashattn_tensor q, flashattn_tensor k,
                                          flashattn_tensor v, flashattn_tensor out);

flashattn_status flashattn_forward(const flashattn_params* params);

/* Variants of the scores and the mask (flashattn::Variants in flashattn.hpp says
 * the math). A sized struct: start from flashattn_variants_defaults() (every
 * variant off), then set what you need; fields a later header adds come at the
 * end, and the library gives fields beyond a caller's struct_size their defaults. */
typedef struct {
  uint32_t struct_size;        /* sizeof(flashattn_variants) as the caller was built */
  int32_t window_left;         /* -1: no left end */
  int32_t window_right;        /* -1: no right end */
  float softcap;               /* > 0: s -> softcap * tanh(s / softcap); 0: none */
  const float* alibi_slopes;   /* float32 (heads_q) on the tensors' device, or NULL */
  /* Since the second generation: an additive bias or a boolean mask (PyTorch's
   * attn_mask; flashattn::ScoreBias says the math), element (b, h, i, j) of a
   * (batch|1, heads_q|1, seqlen_q, seqlen_k) tensor at bias + the strides' sum. */
  const void* bias;            /* NULL: none */
  int32_t bias_type;           /* a flashattn_bias_type */
  int64_t bias_shape[4];
  int64_t bias_strides[4];     /* in elements */
  /* Since the third generation: dropout on the probabilities (flashattn::Dropout
   * says the math): kept with probability 1 - dropout_p, scaled by 1/(1 - p). */
  float dropout_p;             /* in [0, 1]; 0: none */
  uint64_t dropout_seed;
  uint64_t dropout_offset;     /* streams offset + b * heads_q + h */
} flashattn_variants;

static inline flashattn_variants flashattn_variants_defaults(void) {
  flashattn_variants v;
  memset(&v, 0, sizeof v);
  v.struct_size = (uint32_t)sizeof v;
  v.window_left = -1;
  v.window_right = -1;
  return v;
}

/* flashattn_forward with variants; variants may be NULL (none). */
flashattn_status flashattn_forward_variants(const flashattn_params* params,
                                            const flashattn_variants* variants);

/* A variable-length batch (flashattn::Sequences in flashattn.hpp says the
 * layout): `batch` sequences packed along seqlen in tensors of batch 1, split by
 * int32 prefix sums (batch + 1 entries, on the tensors' device). A sized struct:
 * start from flashattn_sequences_defaults() (a dense batch). */
typedef struct {
  uint32_t struct_size;          /* sizeof(flashattn_sequences) as the caller was built */
  const int32_t* cu_seqlens_q;   /* NULL: a dense batch */
  const int32_t* cu_seqlens_k;
  int32_t batch;                 /* the number of sequences */
  /* Since the second generation: FlashAttention's max_seqlen_q and max_seqlen_k,
   * -1 (the default) when not given, else at least the longest sequence, checked
   * on the library's own host copy of the prefix sums. */
  int64_t max_seqlen_q;
  int64_t max_seqlen_k;
  /* Since the third generation: nonzero (the default) checks the prefix sums on
   * the host (for CUDA tensors the call waits for the stream); 0, for CUDA
   * tensors, checks them on the device without waiting: max_seqlen_q and
   * max_seqlen_k are then required, and prefix sums that break a rule give NaN
   * in every element of the outputs (flashattn::Sequences says the rules). */
  int32_t checked;
} flashattn_sequences;

static inline flashattn_sequences flashattn_sequences_defaults(void) {
  flashattn_sequences s;
  memset(&s, 0, sizeof s);
  s.struct_size = (uint32_t)sizeof s;
  s.max_seqlen_q = -1;
  s.max_seqlen_k = -1;
  s.checked = 1;
  return s;
}

/* A KV cache (flashattn::KVCache in flashattn.hpp says the layouts and the
 * math): params' k and v are the cache; seqlens (batch) and block_table
 * (batch, pages_per_sequence) are int32 on the tensors' device. A sized struct:
 * start from flashattn_kv_cache_defaults() (no cache, checked lengths). */
typedef struct {
  uint32_t struct_size;          /* sizeof(flashattn_kv_cache) as the caller was built */
  const int32_t* seqlens;        /* keys cached per sequence before the call; NULL: no cache */
  flashattn_tensor k_new;        /* keys to append (data NULL: none) */
  flashattn_tensor v_new;        /* values to append */
  const int32_t* block_table;    /* NULL: a contiguous cache */
  int32_t pages_per_sequence;
  int32_t checked;               /* nonzero: lengths and pages checked on the host (waits) */
  int32_t key_splits;            /* 0: automatic; 1: none; at most 128 */
} flashattn_kv_cache;

static inline flashattn_kv_cache flashattn_kv_cache_defaults(void) {
  flashattn_kv_cache c;
  memset(&c, 0, sizeof c);
  c.struct_size = (uint32_t)sizeof c;
  c.checked = 1;
  return c;
}

/* What a forward call takes beyond flashattn_params, each part optional (NULL:
 * its defaults). A sized struct: start from flashattn_forward_options_defaults();
 * a capability that a later header adds comes as a field at the end. */
typedef struct {
  uint32_t struct_size;                 /* sizeof(flashattn_forward_options) as the caller was built */
  const flashattn_variants* variants;   /* NULL: none */
  const flashattn_sequences* sequences; /* NULL: a dense batch */
  const flashattn_kv_cache* kv_cache;   /* NULL: k and v are no cache */
} flashattn_forward_options;

static inline flashattn_forward_options flashattn_forward_options_defaults(void) {
  flashattn_forward_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = (uint32_t)sizeof o;
  return o;
}

/* flashattn_forward with options; options may be NULL (every default). */
flashattn_status flashattn_forward_with(const flashattn_params* params,
                                        const flashattn_forward_options* options);

/* The gradients dq, dk, dv of attention given dout, the gradient with respect to
 * the forward's output (flashattn::backward in flashattn.hpp says the math).
 * A sized struct: start from flashattn_backward_defaults(), which sets
 * struct_size to the size this header declares, then set the tensors. Fields a
 * later header adds come after `stream`; the library gives fields beyond a
 * caller's struct_size their defaults. */
typedef struct {
  uint32_t struct_size;      /* sizeof(flashattn_backward_params) as the caller was built */
  flashattn_tensor q, k, v;
  flashattn_tensor out;      /* the forward's output (q's shape, v's head_dim) */
  flashattn_tensor dout;     /* gradient with respect to out (out's shape) */
  const float* lse;          /* the forward's lse: float32 (batch, heads_q, seqlen_q) */
  flashattn_tensor dq, dk, dv; /* written: the shapes of q, k, v */
  int32_t has_scale;         /* 0: scale = 1/sqrt(head_dim); else scale, any finite value */
  float scale;
  int32_t mask;              /* flashattn_mask */
  int32_t backend;           /* flashattn_backend */
  int32_t deterministic;     /* nonzero: bit-identical gradients from run to run */
  void* stream;              /* cudaStream_t, or NULL for the default stream */
  const flashattn_variants* variants; /* the forward's variants, or NULL (none) */
  const flashattn_sequences* sequences; /* the forward's layout, or NULL (dense) */
} flashattn_backward_params;

/* Every field zero (automatic backend, default scale, no mask, no variants) and struct_size
 * set; inline, so struct_size is the size the caller was compiled with. */
static inline flashattn_backward_params flashattn_backward_defaults(void) {
  flashattn_backward_params p;
  memset(&p, 0, sizeof p);
  p.struct_size = (uint32_t)sizeof p;
  return p;
}

flashattn_status flashattn_backward(const flashattn_backward_params* params);

/* Which elements dropout (flashattn_variants.dropout_*) keeps, for a dense
 * (batch, heads_q, seqlen_q, seqlen_k) problem: keep[((b * heads_q + h) *
 * seqlen_q + i) * seqlen_k + j] = 1 where element (b, h, i, j) is kept, else 0
 * (host memory). Sequence b of a variable-length batch is batch 1 at offset
 * dropout_offset + b * heads_q. */
flashattn_status flashattn_dropout_keep_mask(float dropout_p, uint64_t seed, uint64_t offset,
                                             int32_t batch, int32_t heads_q, int32_t seqlen_q,
                                             int32_t seqlen_k, uint8_t* keep);

/* The message of the last failed call on this thread ("" after a success). */
const char* flashattn_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_H_ */
