// Layout: "\x93NUMPY", version bytes, header length (uint16 LE in 1.0, uint32 LE
// in 2.0), a Python dict literal padded with spaces to a newline so the data
// starts on a 64-byte boundary, then the raw data.
#include "npy_io.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace flashattn::test {
namespace {

const std::string kMagic = "\x93NUMPY";

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

}  // namespace

void write_npy(const std::string& path, const NpyFloat32& array) {
  std::string shape;  // a Python tuple: "(2, 3)", "(5,)"
  for (size_t d = 0; d < array.shape.size(); ++d)
    shape += (d ? ", " : "") + std::to_string(array.shape[d]);
  if (array.shape.size() == 1) shape += ",";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape + "), }";
  const size_t preamble = kMagic.size() + 2 + 2;
  header.append(63 - (preamble + header.size()) % 64, ' ');
  header += '\n';

  std::ofstream out(path, std::ios::binary);
  const uint16_t length = uint16_t(header.size());
  const char version[2] = {1, 0};
  const char length_le[2] = {char(length & 0xFF), char(length >> 8)};
  out.write(kMagic.data(), std::streamsize(kMagic.size()));
  out.write(version, 2);
  out.write(length_le, 2);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(reinterpret_cast<const char*>(array.values.data()),
            std::streamsize(array.values.size() * sizeof(float)));
  if (!out) bad(path, "write failed");
}

NpyFloat32 read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path, "cannot open");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.compare(0, kMagic.size(), kMagic) != 0) bad(path, "not a .npy file");
  const int major = bytes.size() > 6 ? bytes[6] : 0;
  if (major != 1 && major != 2) bad(path, "unknown .npy version " + std::to_string(major));
  const size_t length_size = major == 1 ? 2 : 4;
  size_t header_length = 0;
  for (size_t b = 0; b < length_size; ++b)
    header_length |= size_t(uint8_t(bytes.at(8 + b))) << (8 * b);
  const size_t data_start = 8 + length_size + header_length;
  const std::string header = bytes.substr(8 + length_size, header_length);

  if (header.find("'descr': '<f4'") == std::string::npos)
    bad(path, "dtype is not '<f4': " + header);
  if (header.find("'fortran_order': False") == std::string::npos)
    bad(path, "not C order: " + header);
  const size_t open = header.find("'shape': (");
  if (open == std::string::npos) bad(path, "no shape: " + header);
  NpyFloat32 array;
  int64_t elements = 1;
  for (size_t pos = open + 10; header[pos] != ')';) {
    size_t used = 0;
    array.shape.push_back(std::stoll(header.substr(pos), &used));
    elements *= array.shape.back();
    pos += used;
    while (header[pos] == ',' || header[pos] == ' ') ++pos;
  }
  if (bytes.size() != data_start + size_t(elements) * sizeof(float))
    bad(path, "data is " + std::to_string(bytes.size() - data_start) + " bytes, shape needs " +
                  std::to_string(elements * 4));
  array.values.resize(size_t(elements));
  std::memcpy(array.values.data(), bytes.data() + data_start, array.values.size() * sizeof(float));
  return array;
}

}  // namespace flashattn::test
