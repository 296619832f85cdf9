#include "bias.h"

#include <algorithm>
#include <limits>

#include "core/half.h"

namespace flashattn::harness {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kBoolKeep = 0.7;   // a boolean mask's kept share
constexpr double kFloatKeep = 0.9;  // a float bias's finite share
constexpr float kFloatStd = 2.0f;
constexpr int kRowPeriod = 7;
constexpr int64_t kBlock = 128;

// Whether the pattern's structure masks element (b, h, i, j) (bias.h): whole
// rows, first halves of rows, and blocks of whole tiles.
bool structurally_masked(int64_t b, int64_t h, int64_t i, int64_t j, int64_t seqlen_k) {
  const int64_t row_class = (b + h + i) % kRowPeriod;
  if (row_class == 3) return true;
  if (row_class == 5 && j < (seqlen_k + 1) / 2) return true;
  return (i / kBlock + j / kBlock) % 3 == 1;
}

int64_t element_bytes(BiasType type) {
  return type == BiasType::f32 ? 4 : type == BiasType::boolean ? 1 : 2;
}

DType float_dtype(BiasType type) {
  return type == BiasType::f16 ? DType::f16 : type == BiasType::bf16 ? DType::bf16 : DType::f32;
}

}  // namespace

std::string bias_type_name(BiasType type) {
  switch (type) {
    case BiasType::f32: return "f32";
    case BiasType::f16: return "f16";
    case BiasType::bf16: return "bf16";
    case BiasType::boolean: return "bool";
  }
  return "unknown";
}

std::optional<BiasType> bias_type_from_string(std::string_view name) {
  for (BiasType t : {BiasType::f32, BiasType::f16, BiasType::bf16, BiasType::boolean})
    if (name == bias_type_name(t)) return t;
  return std::nullopt;
}

std::string bias_broadcast_name(const Case::Bias& b) {
  if (b.broadcast_batch) return b.broadcast_heads ? "both" : "batch";
  return b.broadcast_heads ? "heads" : "none";
}

float BiasAddends::at(int64_t b, int64_t h, int64_t i, int64_t j) const {
  const int64_t at = (shape[0] == 1 ? 0 : b * stride[0]) + (shape[1] == 1 ? 0 : h * stride[1]) +
                     i * stride[2] + j * stride[3];
  if (type == BiasType::boolean) return bytes[at] != 0 ? 0.0f : kNegInf;
  return load_float(bytes, float_dtype(type), at);
}

// The layout: (batch or 1, heads or 1, seqlen_q, seqlen_k) with rows of
// seqlen_k + pad elements (strided cases: pad = strided_pad, else 0), or, key
// major, keys of seqlen_q + pad. A broadcast dimension's stride is 0, or in
// strided cases one past the whole tensor: the library must not use it.
BiasBuffer::BiasBuffer(const Case& c, Device where, std::mt19937_64& rng) {
  if (!c.bias) return;
  const Shape& s = c.shape;
  present_ = true;
  BiasAddends& a = addends_;
  a.type = c.bias->type;
  const int64_t full[4] = {c.bias->broadcast_batch ? 1 : s.batch,
                           c.bias->broadcast_heads ? 1 : s.heads_q, s.seqlen_q, s.seqlen_k};
  std::copy(full, full + 4, a.shape);
  const int64_t pad = c.strided ? c.strided_pad : 0;
  const bool key_major = c.bias->key_major;
  const int64_t line = (key_major ? s.seqlen_q : s.seqlen_k) + pad;  // a key's (a row's) elements
  a.stride[3] = key_major ? line : 1;
  a.stride[2] = key_major ? 1 : line;
  a.stride[1] = (key_major ? s.seqlen_k : s.seqlen_q) * line;
  a.stride[0] = full[1] * a.stride[1];
  const int64_t elements = full[0] * a.stride[0];
  for (int d = 0; d < 2; ++d)
    if (full[d] == 1) a.stride[d] = c.strided ? elements : 0;

  // At least one byte: a bias over no elements still has a non-null pointer.
  host_.assign(size_t(std::max<int64_t>(elements * element_bytes(a.type), 1)), 0);
  a.bytes = host_.data();
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<float> normal(0.0f, kFloatStd);
  for (int64_t b = 0; b < full[0]; ++b)
    for (int64_t h = 0; h < full[1]; ++h)
      for (int64_t i = 0; i < full[2]; ++i)
        for (int64_t j = 0; j < full[3]; ++j) {
          // b and h are 0 on a broadcast dimension, whose stride is never used.
          const int64_t at = b * a.stride[0] + h * a.stride[1] + i * a.stride[2] + j * a.stride[3];
          const bool masked = structurally_masked(b, h, i, j, s.seqlen_k);
          if (a.type == BiasType::boolean) {
            const bool keep = !masked && unit(rng) < kBoolKeep;
            host_[size_t(at)] = keep ? uint8_t(1 + rng() % 255) : 0;
          } else {
            const bool finite = !masked && unit(rng) < kFloatKeep;
            store_float(host_.data(), float_dtype(a.type), at, finite ? normal(rng) : kNegInf);
          }
        }
  if (where.kind != DeviceKind::cuda) return;
  device_ = DeviceBuffer(host_.size(), where.index);
  device_.upload(host_.data());
}

ScoreBias BiasBuffer::on(DeviceKind kind) const {
  ScoreBias b;
  if (!present_) return b;
  b.data = kind == DeviceKind::cuda ? device_.data() : static_cast<const void*>(host_.data());
  b.type = addends_.type;
  std::copy(addends_.shape, addends_.shape + 4, b.shape);
  std::copy(addends_.stride, addends_.stride + 4, b.stride);
  return b;
}

}  // namespace flashattn::harness
