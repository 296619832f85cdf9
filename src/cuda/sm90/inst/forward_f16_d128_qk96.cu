// One instantiation of the Hopper forward: f16, head-dim bucket 128 with Q·Kᵀ
// 96 columns deep (q's head_dim 88-96: Phi-3's 96).
#include "cuda/sm90/launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_forward<__half, 128, 128, 96>(const AttnParams& p);
}  // namespace flashattn::cuda::sm90
