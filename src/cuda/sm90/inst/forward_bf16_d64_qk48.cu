// One instantiation of the Hopper forward: bf16, head-dim bucket 64 with Q·Kᵀ
// 48 columns deep (q's head_dim 33-48: diffusion U-Nets' 40).
#include "cuda/sm90/launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_forward<__nv_bfloat16, 64, 64, 48>(const AttnParams& p);
}  // namespace flashattn::cuda::sm90
