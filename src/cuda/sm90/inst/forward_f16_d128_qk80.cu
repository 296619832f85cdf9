// One instantiation of the Hopper forward: f16, head-dim bucket 128 with Q·Kᵀ
// 80 columns deep (q's head_dim 65-80: vision transformers, diffusion U-Nets).
#include "cuda/sm90/launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_forward<__half, 128, 128, 80>(const AttnParams& p);
}  // namespace flashattn::cuda::sm90
