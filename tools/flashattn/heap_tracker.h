// Heap accounting for `flashattn bench` on the CPU. heap_tracker.cpp replaces
// the global operator new and delete, so every C++ allocation in this program
// (the statically linked library's included) moves a current and a peak byte
// count. Bytes are malloc_usable_size of each block: what the heap really
// hands out, and what delete can look up without a size.
#pragma once

#include <cstddef>

namespace flashattn::cli::heap {

size_t current_bytes();
size_t peak_bytes();
void reset_peak();  // peak := current, so the next peak_bytes() covers what follows

}  // namespace flashattn::cli::heap
