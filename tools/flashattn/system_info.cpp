#include "system_info.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>

// FLASHATTN_SOURCE_DIR and FLASHATTN_BUILD_COMMIT come from CMakeLists.txt.

namespace flashattn::cli {
namespace {

// The value after "key<spaces or tabs>:" on the first matching line of a /proc file.
std::optional<std::string> proc_field(const char* file, const std::string& key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos || line.find_first_not_of(" \t", key.size()) != colon) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return std::nullopt;
}

std::string trimmed_output(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return "";
  std::string out;
  std::array<char, 128> buffer;
  while (fgets(buffer.data(), int(buffer.size()), pipe.get())) out += buffer.data();
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

std::string cpu_model() { return proc_field("/proc/cpuinfo", "model name").value_or("unknown"); }

std::optional<size_t> host_available_bytes() {
  const std::optional<std::string> kib = proc_field("/proc/meminfo", "MemAvailable");
  if (!kib) return std::nullopt;
  return size_t(std::stoull(*kib)) * 1024;  // the field reads "<n> kB"
}

std::string git_commit() {
  // A copied tree without git history (a GPU machine) is told its commit.
  const char* given = std::getenv("FLASHATTN_COMMIT");
  if (given && *given) return given;
  const std::string now = trimmed_output("git -C '" FLASHATTN_SOURCE_DIR "' rev-parse --short HEAD 2>/dev/null");
  const bool is_hash = !now.empty() && now.find_first_not_of("0123456789abcdef") == std::string::npos;
  return is_hash ? now : "unknown";
}

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace flashattn::cli
