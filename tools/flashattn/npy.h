// NumPy .npy files, format versions 1.0 and 2.0: C-order, little-endian
// float32 ('<f4') and float16 ('<f2') arrays, which is what `flashattn run`
// reads and writes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/flashattn.hpp"

namespace flashattn::cli {

struct NpyArray {
  DType dtype = DType::f32;  // f32 for '<f4', f16 for '<f2'
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // C order, little-endian
  int64_t elements() const;
};

// Both throw std::runtime_error starting "PATH: " and saying what is wrong.
NpyArray read_npy(const std::string& path);
void write_npy(const std::string& path, const NpyArray& array);

std::string shape_string(const std::vector<int64_t>& shape);  // "(2, 3)", "(5,)"

}  // namespace flashattn::cli
