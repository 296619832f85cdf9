// One instantiation of the Hopper forward: f16, head-dim bucket 384 with Q·Kᵀ
// 320 columns deep and P·V 320 wide (q's and v's head dims 289-320).
#include "cuda/sm90/launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_forward<__half, 384, 384, 320>(const AttnParams& p);
}  // namespace flashattn::cuda::sm90
