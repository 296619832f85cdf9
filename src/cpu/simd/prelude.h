// Everything the vector kernels (cpu/simd/*.h) use from outside, included by
// each instruction-set translation unit (cpu/isa/*.cpp) before it switches the
// target: these headers' inline functions then compile for the default target
// in every unit, so the linker's choice among their copies never hands a
// baseline caller an AVX-512 body.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>  // the AVX-512 unit's exp2 (vec.h)
#endif

#include "core/half.h"
#include "core/mask.h"
#include "core/parallel.h"
#include "core/params.h"
#include "core/softmax.h"
#include "core/variant.h"
#include "cpu/aligned_buffer.h"
