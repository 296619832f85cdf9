// One instantiation of the Hopper forward: f16, head-dim bucket 192 with Q·Kᵀ
// 160 columns deep (q's head_dim 136-160: diffusion U-Nets' 160).
#include "cuda/sm90/launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_forward<__half, 192, 192, 160>(const AttnParams& p);
}  // namespace flashattn::cuda::sm90
