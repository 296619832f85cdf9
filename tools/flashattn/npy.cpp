// The .npy layout: the magic "\x93NUMPY", a major and minor version byte, the
// header length (uint16 in 1.0, uint32 in 2.0, little-endian), then the header,
// a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// padded with spaces and a newline so the data starts 64-byte aligned; the data
// follows.
#include "npy.h"

#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace flashattn::cli {
namespace {

// The data bytes are used as they are, which is right on little-endian hosts only.
static_assert(std::endian::native == std::endian::little, "npy.cpp assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr int64_t kMaxElements = int64_t(1) << 40;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

// Position just after "'key':" (or with double quotes) and any spaces.
size_t find_value(const std::string& header, const std::string& key, const std::string& path) {
  for (char quote : {'\'', '"'}) {
    const std::string quoted = quote + key + quote;
    size_t pos = header.find(quoted);
    if (pos == std::string::npos) continue;
    pos += quoted.size();
    while (pos < header.size() && header[pos] == ' ') ++pos;
    if (pos >= header.size() || header[pos] != ':') bad(path, "header entry '" + key + "' has no ':'");
    ++pos;
    while (pos < header.size() && header[pos] == ' ') ++pos;
    return pos;
  }
  bad(path, "header has no '" + key + "' entry");
}

DType parse_descr(const std::string& header, const std::string& path) {
  const size_t pos = find_value(header, "descr", path);
  const char quote = pos < header.size() ? header[pos] : 0;
  const size_t end = quote == '\'' || quote == '"' ? header.find(quote, pos + 1) : std::string::npos;
  if (end == std::string::npos) bad(path, "header's 'descr' is not a quoted string");
  const std::string descr = header.substr(pos + 1, end - pos - 1);
  if (descr == "<f4") return DType::f32;
  if (descr == "<f2") return DType::f16;
  bad(path, "unsupported dtype '" + descr + "' (supported: '<f4' float32, '<f2' float16" +
                (descr.size() > 0 && descr[0] == '>' ? "; big-endian data is not supported)" : ")"));
}

std::vector<int64_t> parse_shape(const std::string& header, const std::string& path) {
  size_t pos = find_value(header, "shape", path);
  if (pos >= header.size() || header[pos] != '(') bad(path, "header's 'shape' is not a tuple");
  const size_t end = header.find(')', pos);
  if (end == std::string::npos) bad(path, "header's 'shape' has no ')'");
  std::vector<int64_t> shape;
  int64_t elements = 1;
  for (++pos; pos < end;) {
    if (header[pos] == ' ' || header[pos] == ',') {
      ++pos;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(header[pos])))
      bad(path, "header's 'shape' is not a tuple of non-negative integers");
    int64_t dim = 0;
    for (; pos < end && std::isdigit(static_cast<unsigned char>(header[pos])); ++pos) {
      dim = dim * 10 + (header[pos] - '0');
      if (dim > kMaxElements) bad(path, "shape is too large");
    }
    elements *= dim;
    if (elements > kMaxElements) bad(path, "shape is too large");
    shape.push_back(dim);
  }
  return shape;
}

}  // namespace

int64_t NpyArray::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path, std::string("cannot open: ") + std::strerror(errno));
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
  if (bytes.size() < kMagicSize + 4 || std::memcmp(bytes.data(), kMagic, kMagicSize) != 0)
    bad(path, "not a .npy file (bad magic; expected \\x93NUMPY)");
  const int major = bytes[6], minor = bytes[7];
  if ((major != 1 && major != 2) || minor != 0)
    bad(path, "unsupported .npy format version " + std::to_string(major) + "." +
                  std::to_string(minor) + " (supported: 1.0, 2.0)");
  const size_t length_size = major == 1 ? 2 : 4;
  size_t header_size = 0;
  for (size_t b = 0; b < length_size; ++b) header_size |= size_t(bytes[8 + b]) << (8 * b);
  const size_t data_start = 8 + length_size + header_size;
  if (data_start > bytes.size()) bad(path, "header is truncated");
  const std::string header(bytes.begin() + 8 + length_size, bytes.begin() + data_start);

  NpyArray array;
  array.dtype = parse_descr(header, path);
  const size_t order = find_value(header, "fortran_order", path);
  if (header.compare(order, 4, "True") == 0)
    bad(path, "Fortran-order arrays are not supported (save np.ascontiguousarray(a))");
  if (header.compare(order, 5, "False") != 0) bad(path, "header's 'fortran_order' is not True or False");
  array.shape = parse_shape(header, path);

  const size_t need = size_t(array.elements()) * dtype_size(array.dtype);
  const size_t have = bytes.size() - data_start;
  if (have != need)
    bad(path, "data is " + std::to_string(have) + " bytes, but shape " + shape_string(array.shape) +
                  " of " + std::string(to_string(array.dtype)) + " needs " + std::to_string(need));
  array.data.assign(bytes.begin() + data_start, bytes.end());
  return array;
}

void write_npy(const std::string& path, const NpyArray& array) {
  std::string header = std::string("{'descr': '") + (array.dtype == DType::f16 ? "<f2" : "<f4") +
                       "', 'fortran_order': False, 'shape': " + shape_string(array.shape) + ", }";
  // Pad with spaces to a newline that ends 64-byte aligned, as NumPy does.
  const size_t prefix = kMagicSize + 2 + 2;
  header.append(63 - (prefix + header.size()) % 64, ' ');
  header += '\n';
  if (header.size() > 0xFFFF) bad(path, "shape is too long for a version 1.0 header");

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) bad(path, std::string("cannot create: ") + std::strerror(errno));
  out.write(kMagic, kMagicSize);
  const char version_and_length[4] = {1, 0, char(header.size() & 0xFF), char(header.size() >> 8)};
  out.write(version_and_length, 4);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(reinterpret_cast<const char*>(array.data.data()), std::streamsize(array.data.size()));
  out.close();
  if (!out) bad(path, std::string("write failed: ") + std::strerror(errno));
}

}  // namespace flashattn::cli
