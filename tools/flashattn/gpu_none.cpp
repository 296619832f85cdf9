#include "core/error.h"
#include "gpu.h"

namespace flashattn::cli::gpu {

std::string device_name(int) {
  fail(Status::unsupported, "device: this build has no CUDA support");
}

double time_ms(int, const std::function<void()>&) {
  fail(Status::unsupported, "device: this build has no CUDA support");
}

}  // namespace flashattn::cli::gpu
