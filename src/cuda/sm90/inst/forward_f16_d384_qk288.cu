// One instantiation of the Hopper forward: f16, head-dim bucket 384 with Q·Kᵀ
// 288 columns deep and P·V 288 wide (q's and v's head dims 257-288).
#include "cuda/sm90/launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_forward<__half, 384, 384, 288>(const AttnParams& p);
}  // namespace flashattn::cuda::sm90
