// The GPU baseline in a build without CUDA: constructing it reports that this
// build cannot run it, so callers need no #ifdefs.
#include "core/error.h"
#include "standard_cuda.h"

namespace flashattn::baselines {

struct StandardCuda::State {};

StandardCuda::StandardCuda(const AttnParams&) {
  fail(Status::unsupported, "standard (cuda): this build has no CUDA support");
}

StandardCuda::~StandardCuda() = default;

void StandardCuda::run() {
  fail(Status::unsupported, "standard (cuda): this build has no CUDA support");
}

}  // namespace flashattn::baselines
