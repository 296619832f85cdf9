// Text formatting shared by the subcommands' tables.
#pragma once

#include <cstddef>
#include <string>

#include "problem.h"

namespace flashattn::cli {

std::string format_bytes(size_t bytes);          // "0 B", "56.3 KiB", "1.00 GiB"
std::string format_fixed(double x, int digits);  // "%.*f"
std::string format_sci(double x);                // "1.2e-07"
std::string counter(size_t i, size_t n);         // "[ 3/40]"
// "B1 N1024 H16 d64 f16 causal-br", with "Nq.. Nk.." and "Hq.. Hkv.." where they differ,
// and the variants: "window(4096,0) softcap 30 alibi bias bool broadcast heads".
std::string shape_label(const harness::Case& c);
std::string mask_name(Mask mask);  // "none", "top_left", "bottom_right"

}  // namespace flashattn::cli
