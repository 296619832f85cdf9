// One instantiation of the Hopper forward: bf16, q's and k's head-dim bucket 192,
// v's 128 (multi-head latent attention).
#include "cuda/sm90/launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_forward<__nv_bfloat16, 192, 128>(const AttnParams& p);
}  // namespace flashattn::cuda::sm90
