// A case's bias or boolean mask (harness::Case::bias, flashattn::ScoreBias):
// its bytes as the library reads them, on the host and, for a problem on a GPU,
// on its device too, and the addends they stand for, which the harness's own
// standard computations (score_rule.h) add to the scores.
//
// The pattern, fresh from the problem's seed: every element random (a float
// bias normal with standard deviation 2, a tenth of its elements −inf; a
// boolean mask keeping 7 in 10, its kept bytes any nonzero value), and masked
// (false, or −inf) where it empties things a kernel must get right:
//   - every 7th row of each (batch, head), counted from b + h, whole: rows of
//     only −inf scores, which give 0, lse −inf and no gradient;
//   - another row in 7, its first half of the keys: a row's first key tiles
//     empty, its later ones not;
//   - 128 × 128 blocks of rows and keys where (i/128 + j/128) mod 3 = 1: whole
//     key tiles of whole query tiles, leading ones among them.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "device_memory.h"
#include "flashattn/flashattn.hpp"
#include "problem.h"

namespace flashattn::harness {

// "f32", "f16", "bf16", "bool" (the CLI's names), and back.
std::string bias_type_name(BiasType type);
std::optional<BiasType> bias_type_from_string(std::string_view name);
// The dimensions b broadcasts over: "none", "batch", "heads" or "both".
std::string bias_broadcast_name(const Case::Bias& b);

// The addend each bias element gives the scaled score, as flashattn::ScoreBias
// states it: a float bias's value, a boolean mask's 0 (kept, any nonzero byte)
// or −inf (masked); read from the bias's host bytes.
struct BiasAddends {
  const uint8_t* bytes = nullptr;
  BiasType type = BiasType::f32;
  int64_t shape[4] = {}, stride[4] = {};

  // Element (b, h, i, j) of the problem; a dimension of size 1 is broadcast,
  // its stride never used.
  float at(int64_t b, int64_t h, int64_t i, int64_t j) const;
};

class BiasBuffer {
 public:
  BiasBuffer() = default;
  // Draws case c's bias (none without c.bias) from rng.
  BiasBuffer(const Case& c, Device where, std::mt19937_64& rng);

  // The bias as the library takes it, over the host bytes or the device copy;
  // data null without a bias.
  ScoreBias on(DeviceKind kind) const;
  // The addends (host memory), or null without a bias.
  const BiasAddends* addends() const { return present_ ? &addends_ : nullptr; }

 private:
  bool present_ = false;
  std::vector<uint8_t> host_;
  DeviceBuffer device_;
  BiasAddends addends_;  // the type, shape and strides, over host_ (whose buffer a move keeps)
};

}  // namespace flashattn::harness
