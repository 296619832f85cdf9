// Facts about the machine and the build that `flashattn bench` records.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace flashattn::cli {

std::string cpu_model();                     // /proc/cpuinfo's "model name", or "unknown"
std::optional<size_t> host_available_bytes();  // /proc/meminfo's MemAvailable
std::string git_commit();  // short hash of the source tree now, else at configure time, else "unknown"
std::string utc_now_iso8601();  // e.g. 2025-01-31T12:00:00Z

}  // namespace flashattn::cli
