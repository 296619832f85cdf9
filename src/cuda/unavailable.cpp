// The CUDA backends in a build without CUDA: no devices, and every kernel entry
// point reports that this build cannot run it.
#include "core/error.h"
#include "cuda/backends.h"

namespace flashattn::cuda {
namespace {

[[noreturn]] void not_built(const char* backend) {
  fail(Status::unsupported, "backend: ", backend, " is not built (no CUDA support)");
}

}  // namespace

int device_count() { return 0; }

int compute_capability(int) {
  fail(Status::unsupported, "device: this flashattn build has no CUDA support");
}

void copy_to_host(std::initializer_list<HostCopy>, int, void*) {
  fail(Status::unsupported, "device: this flashattn build has no CUDA support");
}

void require_device_pointer(const void*, int, const char*) {
  fail(Status::unsupported, "device: this flashattn build has no CUDA support");
}

void append_to_cache(const AttnParams&) {
  fail(Status::unsupported, "device: this flashattn build has no CUDA support");
}

bool forward_appends(void (*)(const AttnParams&), const AttnParams&) { return false; }

void naive_forward(const AttnParams&) { not_built("cuda_naive"); }
void tiled_forward(const AttnParams&) { not_built("cuda_tiled"); }
void tf32x3_forward(const AttnParams&) { not_built("cuda_tf32x3"); }
void f16x3_forward(const AttnParams&) { not_built("cuda_f16x3"); }
void mma_forward(const AttnParams&) { not_built("cuda_mma"); }
void wgmma_forward(const AttnParams&) { not_built("cuda_wgmma"); }
void tiled_backward(const BwdParams&) { not_built("cuda_tiled"); }
void mma_backward(const BwdParams&) { not_built("cuda_mma"); }
void wgmma_backward(const BwdParams&) { not_built("cuda_wgmma"); }

std::string wgmma_unsupported(const AttnParams&) {
  return "backend: cuda_wgmma is not built (no CUDA support)";
}
std::string wgmma_backward_unsupported(const BwdParams& p) { return wgmma_unsupported(p); }

void run_forward(void (*)(const AttnParams&), const AttnParams&) {
  fail(Status::unsupported, "device: this flashattn build has no CUDA support");
}

void run_backward(void (*)(const BwdParams&), const BwdParams&) {
  fail(Status::unsupported, "device: this flashattn build has no CUDA support");
}

}  // namespace flashattn::cuda
