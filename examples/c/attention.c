/* The flashattn C ABI in one program (C99): list the backends, run attention on
 * small host tensors, check the result against a float64 loop, and show how a
 * rejected call reports its error. Exits 0 only if every check passes.
 *
 * The problem: batch 2, 7 queries, 5 keys, 4 query heads sharing 2 key/value
 * heads (grouped-query attention), head_dim 8, float32, causal mask aligned
 * bottom-right. With more queries than keys, queries 0 and 1 see no key: their
 * output is 0 and their lse -inf. */
#include <flashattn/flashattn.h>

#include <math.h>
#include <stdio.h>

enum { BATCH = 2, SEQ_Q = 7, SEQ_K = 5, HEADS_Q = 4, HEADS_KV = 2, DIM = 8 };

/* Offset of element (b, s, h, d) of a contiguous (batch, seqlen, heads, head_dim) tensor. */
static int at(int b, int s, int h, int d, int seqlen, int heads) {
  return ((b * seqlen + s) * heads + h) * DIM + d;
}

/* Deterministic values in [-1, 1). */
static void fill(float* x, int n, int seed) {
  for (int i = 0; i < n; ++i) x[i] = (float)((i * 7 + seed) % 19) / 9.5f - 1.0f;
}

/* Standard attention in float64: scores, mask, max, exp, sum. Bottom-right
 * alignment: key j is visible to query i iff j <= i + (SEQ_K - SEQ_Q). */
static void reference(const float* q, const float* k, const float* v, double* out, double* lse) {
  const double scale = 1.0 / sqrt((double)DIM); /* the default scale */
  for (int b = 0; b < BATCH; ++b)
    for (int h = 0; h < HEADS_Q; ++h)
      for (int i = 0; i < SEQ_Q; ++i) {
        const int hk = h / (HEADS_Q / HEADS_KV); /* the key/value head of query head h */
        int keys = i + (SEQ_K - SEQ_Q) + 1;      /* keys 0 .. keys-1 are visible */
        if (keys < 0) keys = 0;
        if (keys > SEQ_K) keys = SEQ_K;
        double p[SEQ_K], m = -INFINITY, sum = 0.0;
        for (int j = 0; j < keys; ++j) {
          double s = 0.0;
          for (int d = 0; d < DIM; ++d)
            s += (double)q[at(b, i, h, d, SEQ_Q, HEADS_Q)] * k[at(b, j, hk, d, SEQ_K, HEADS_KV)];
          p[j] = s * scale;
          if (p[j] > m) m = p[j];
        }
        for (int j = 0; j < keys; ++j) {
          p[j] = exp(p[j] - m);
          sum += p[j];
        }
        for (int d = 0; d < DIM; ++d) {
          double o = 0.0;
          for (int j = 0; j < keys; ++j) o += p[j] * v[at(b, j, hk, d, SEQ_K, HEADS_KV)];
          out[at(b, i, h, d, SEQ_Q, HEADS_Q)] = keys == 0 ? 0.0 : o / sum;
        }
        lse[(b * HEADS_Q + h) * SEQ_Q + i] = keys == 0 ? -INFINITY : m + log(sum);
      }
}

static int close_to(double got, double want) {
  if (isinf(want)) return got == want;
  return fabs(got - want) <= 1e-5 * (1.0 + fabs(want));
}

/* Number of elements of out and lse that differ from the reference. */
static int mismatches(const float* out, const float* lse, const double* want_out,
                      const double* want_lse) {
  int bad = 0;
  for (int i = 0; i < BATCH * SEQ_Q * HEADS_Q * DIM; ++i) bad += !close_to(out[i], want_out[i]);
  for (int i = 0; i < BATCH * HEADS_Q * SEQ_Q; ++i) bad += !close_to(lse[i], want_lse[i]);
  return bad;
}

static void list_backends(void) {
  static const char* const dtype_names[] = {"f32", "f16", "bf16"};
  const int32_t count = flashattn_backend_count();
  printf("%d backends:\n", (int)count);
  for (int32_t i = 0; i < count; ++i) {
    flashattn_backend_info info;
    info.struct_size = sizeof(flashattn_backend_info); /* the size this program knows */
    if (flashattn_get_backend_info(i, &info) != FLASHATTN_OK) {
      printf("  backend %d: %s\n", (int)i, flashattn_last_error());
      continue;
    }
    printf("  %-12s %-4s", info.name, info.device == FLASHATTN_CUDA ? "cuda" : "cpu");
    for (int d = FLASHATTN_F32; d <= FLASHATTN_BF16; ++d)
      if (info.dtypes & (1u << d)) printf(" %s", dtype_names[d]);
    if (info.max_head_dim > 0) printf(", head_dim <= %d", (int)info.max_head_dim);
    printf("\n");
  }
}

int main(void) {
  static float q[BATCH * SEQ_Q * HEADS_Q * DIM], out[BATCH * SEQ_Q * HEADS_Q * DIM];
  static float k[BATCH * SEQ_K * HEADS_KV * DIM], v[BATCH * SEQ_K * HEADS_KV * DIM];
  static float lse[BATCH * HEADS_Q * SEQ_Q];
  static double want_out[BATCH * SEQ_Q * HEADS_Q * DIM], want_lse[BATCH * HEADS_Q * SEQ_Q];
  int failures = 0;

  list_backends();

  fill(q, BATCH * SEQ_Q * HEADS_Q * DIM, 1);
  fill(k, BATCH * SEQ_K * HEADS_KV * DIM, 5);
  fill(v, BATCH * SEQ_K * HEADS_KV * DIM, 11);
  reference(q, k, v, want_out, want_lse);

  /* Contiguous host views; flashattn_default_params sets every option to its
   * default (no mask, default scale, automatic backend, no lse). */
  flashattn_params p = flashattn_default_params(
      flashattn_contiguous(q, FLASHATTN_F32, BATCH, SEQ_Q, HEADS_Q, DIM, FLASHATTN_CPU, 0),
      flashattn_contiguous(k, FLASHATTN_F32, BATCH, SEQ_K, HEADS_KV, DIM, FLASHATTN_CPU, 0),
      flashattn_contiguous(v, FLASHATTN_F32, BATCH, SEQ_K, HEADS_KV, DIM, FLASHATTN_CPU, 0),
      flashattn_contiguous(out, FLASHATTN_F32, BATCH, SEQ_Q, HEADS_Q, DIM, FLASHATTN_CPU, 0));
  p.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  p.lse = lse; /* float32 (batch, heads_q, seqlen_q) */

  flashattn_status status = flashattn_forward(&p);
  if (status != FLASHATTN_OK) {
    printf("flashattn_forward failed (%d): %s\n", (int)status, flashattn_last_error());
    return 1;
  }
  int bad = mismatches(out, lse, want_out, want_lse);
  printf("forward: %d of %d values differ from the float64 loop; lse of query 0: %g\n", bad,
         BATCH * SEQ_Q * HEADS_Q * DIM + BATCH * HEADS_Q * SEQ_Q, lse[0]);
  failures += bad != 0;

  /* An error: k with head_dim 4 against q's 8. The call is refused before any
   * work, returns a status, and the message names the argument and the rule. */
  flashattn_params wrong = p;
  wrong.k.shape[3] = 4;
  status = flashattn_forward(&wrong);
  printf("mismatched head_dim: status %d, \"%s\"\n", (int)status, flashattn_last_error());
  failures += status != FLASHATTN_ERR_INVALID_ARGUMENT;
  failures += flashattn_last_error()[0] == '\0';
  /* A rejected call writes nothing: out and lse still hold the first call's result. */
  failures += mismatches(out, lse, want_out, want_lse) != 0;

  printf(failures == 0 ? "ok\n" : "FAILED\n");
  return failures == 0 ? 0 : 1;
}
