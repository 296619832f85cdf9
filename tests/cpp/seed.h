// Seeds for randomised tests. Each test draws a fresh one, so repeated runs cover
// more inputs; a failure prints it, and FLASHATTN_TEST_SEED=<seed> in the
// environment makes every test use that seed again.
#pragma once

#include <cstdint>
#include <string>

namespace flashattn::test {

// FLASHATTN_TEST_SEED if set, else a fresh random seed. Also records the seed
// as the current test's "seed" property (in --gtest_output=xml reports).
uint64_t fresh_seed();

// "seed N (replay: FLASHATTN_TEST_SEED=N)", for SCOPED_TRACE.
std::string replay_hint(uint64_t seed);

}  // namespace flashattn::test
