#include "cpu/isa.h"

#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace flashattn::cpu {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::baseline: return "baseline";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::baseline: return true;
#if defined(__x86_64__) && defined(__GNUC__)
    // __builtin_cpu_supports also asks the OS (XCR0) whether it saves the
    // registers, so a set the kernel leaves disabled reads as unsupported.
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::avx512:
      return isa_supported(Isa::avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
#else
    default: return false;
#endif
  }
  return false;
}

Isa active_isa() {
  if (const char* env = std::getenv("FLASHATTN_CPU_ISA"); env && *env) {
    const std::string_view name(env);
    for (Isa isa : {Isa::baseline, Isa::avx2, Isa::avx512}) {
      if (name != isa_name(isa)) continue;
      if (!isa_supported(isa))
        fail(Status::unsupported, "FLASHATTN_CPU_ISA=", name, ": this CPU does not run ", name);
      return isa;
    }
    fail(Status::invalid_argument, "FLASHATTN_CPU_ISA=", name,
         ": must be one of baseline, avx2, avx512");
  }
  return isa_supported(Isa::avx512) ? Isa::avx512
         : isa_supported(Isa::avx2) ? Isa::avx2
                                    : Isa::baseline;
}

}  // namespace flashattn::cpu
