/* The multi-head attention exercise's entry point on top of flashattn, usable
 * from C and C++.
 *
 * Q, K, V and output are N x d_model fp32 device matrices, row-major; head i owns
 * columns [i*d_model/h, (i+1)*d_model/h). solve runs on the caller's current
 * CUDA device and the default stream, without synchronising or allocating.
 * Invalid arguments write nothing. */
#ifndef FLASHATTN_SOLVE_H_
#define FLASHATTN_SOLVE_H_

#ifdef __cplusplus
extern "C" {
#endif

void solve(const float* Q, const float* K, const float* V, float* output, int N, int d_model,
           int h);

/* Why the last solve call on this thread failed, or "" after a success. */
const char* solve_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_SOLVE_H_ */
