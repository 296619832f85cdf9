// Just enough of NumPy's .npy format (version 1.0, little-endian float32, C
// order) for the CLI test to write inputs and read outputs independently of the
// CLI's own reader and writer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flashattn::test {

struct NpyFloat32 {
  std::vector<int64_t> shape;
  std::vector<float> values;  // C order
};

// Throws std::runtime_error on I/O failure.
void write_npy(const std::string& path, const NpyFloat32& array);

// Reads a '<f4' C-order file of version 1.0 or 2.0; throws std::runtime_error
// saying what is wrong with anything else.
NpyFloat32 read_npy(const std::string& path);

}  // namespace flashattn::test
