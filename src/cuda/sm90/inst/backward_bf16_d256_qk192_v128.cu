// One instantiation of the Hopper backward: bf16, head-dim bucket 256, Sᵀ 192 deep
// and dPᵀ 128 deep (multi-head latent attention's q and k 192, v 128), plain attention.
#include "cuda/sm90/backward_launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_narrow_backward<__nv_bfloat16, 256, 128, 192>(const BwdParams& p);
}  // namespace flashattn::cuda::sm90
