// The error helpers of every layer: each message names the argument (or the
// call) and the rule it broke; Error itself is the public flashattn::Error.
#pragma once

#include <sstream>
#include <string>

#include "flashattn/flashattn.hpp"

namespace flashattn {

template <typename... Parts>
[[noreturn]] void fail(Status status, const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw Error(status, message.str());
}

template <typename... Parts>
void require(bool condition, const Parts&... parts) {
  if (!condition) fail(Status::invalid_argument, parts...);
}

}  // namespace flashattn
