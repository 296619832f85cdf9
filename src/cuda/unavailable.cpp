// The CUDA backends in a build without CUDA: no devices, and every kernel entry
// point reports that this build cannot run it.
#include "api/fail.h"
#include "cuda/backends.h"

namespace flashattn::cuda {

int device_count() { return 0; }

int compute_capability(int) {
  fail(Status::unsupported, "device: this flashattn build has no CUDA support");
}

void require_device_pointer(const void*, int, const char*) {
  fail(Status::unsupported, "device: this flashattn build has no CUDA support");
}

void naive_forward(const AttnParams&) {
  fail(Status::unsupported, "backend: cuda_naive is not built (no CUDA support)");
}

void tiled_forward(const AttnParams&) {
  fail(Status::unsupported, "backend: cuda_tiled is not built (no CUDA support)");
}

void tf32x3_forward(const AttnParams&) {
  fail(Status::unsupported, "backend: cuda_tf32x3 is not built (no CUDA support)");
}

void f16x3_forward(const AttnParams&) {
  fail(Status::unsupported, "backend: cuda_f16x3 is not built (no CUDA support)");
}

void mma_forward(const AttnParams&) {
  fail(Status::unsupported, "backend: cuda_mma is not built (no CUDA support)");
}

std::string wgmma_unsupported(const AttnParams&) {
  return "backend: cuda_wgmma is not built (no CUDA support)";
}

void wgmma_forward(const AttnParams&) {
  fail(Status::unsupported, "backend: cuda_wgmma is not built (no CUDA support)");
}

}  // namespace flashattn::cuda
