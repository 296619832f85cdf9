#include "seed.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

namespace flashattn::test {

uint64_t fresh_seed() {
  uint64_t seed;
  if (const char* forced = std::getenv("FLASHATTN_TEST_SEED")) {
    seed = std::strtoull(forced, nullptr, 0);
  } else {
    std::random_device device;
    seed = (uint64_t(device()) << 32) | device();
  }
  testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

std::string replay_hint(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (replay: FLASHATTN_TEST_SEED=" + std::to_string(seed) +
         ")";
}

}  // namespace flashattn::test
