// The CPU's vector instruction sets: the CPU backend is compiled once per set
// (cpu/isa/*.cpp) and each call runs the widest the CPU has, or the one that
// FLASHATTN_CPU_ISA names (a lower one, to test or compare it).
#pragma once

namespace flashattn::cpu {

enum class Isa {
  baseline,  // the compiler's default target: SSE2 on x86-64, NEON on AArch64
  avx2,      // AVX2 with FMA and F16C (8 lanes)
  avx512,    // AVX-512 F, BW, DQ and VL (16 lanes)
};

const char* isa_name(Isa isa);

// Whether this CPU (and its operating system) runs the set's instructions.
bool isa_supported(Isa isa);

// The set a call runs: the widest supported, or FLASHATTN_CPU_ISA's if set
// (baseline, avx2 or avx512; an unknown or unsupported name is an error).
Isa active_isa();

}  // namespace flashattn::cpu
