#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "bias.h"

namespace flashattn::cli {
namespace {

std::string dashed(std::string_view name) { return "--" + std::string(name); }

}  // namespace

Options::Options(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) words_.push_back({argv[i]});
}

bool Options::help() const {
  for (const Word& w : words_)
    if (w.text == "--help" || w.text == "-h") return true;
  return false;
}

int Options::find(std::string_view name) const {
  const std::string option = dashed(name);
  int found = -1;
  for (int i = 0; i < int(words_.size()); ++i) {
    const std::string& t = words_[i].text;
    if (words_[i].used || !(t == option || t.rfind(option + "=", 0) == 0)) continue;
    if (found >= 0) throw UsageError(option + " is given more than once");
    found = i;
  }
  return found;
}

bool Options::flag(std::string_view name) {
  const int i = find(name);
  if (i < 0) return false;
  if (words_[i].text != dashed(name)) throw UsageError(dashed(name) + " takes no value");
  words_[i].used = true;
  return true;
}

std::optional<std::string> Options::value(std::string_view name) {
  const int i = find(name);
  if (i < 0) return std::nullopt;
  words_[i].used = true;
  const std::string& t = words_[i].text;
  if (t.size() > dashed(name).size()) return t.substr(dashed(name).size() + 1);
  if (i + 1 >= int(words_.size()) || words_[i + 1].text.rfind("--", 0) == 0)
    throw UsageError(dashed(name) + " needs a value");
  words_[i + 1].used = true;
  return words_[i + 1].text;
}

std::optional<std::string> Options::value_or_bare(std::string_view name, std::string_view bare) {
  const int i = find(name);
  if (i < 0) return std::nullopt;
  words_[i].used = true;
  const std::string& t = words_[i].text;
  if (t.size() > dashed(name).size()) return t.substr(dashed(name).size() + 1);
  // No subcommand takes positional arguments, so a following plain word is the value.
  if (i + 1 < int(words_.size()) && words_[i + 1].text.rfind("-", 0) != 0) {
    words_[i + 1].used = true;
    return words_[i + 1].text;
  }
  return std::string(bare);
}

std::optional<int64_t> Options::integer(std::string_view name, int64_t min, int64_t max) {
  const std::optional<std::string> text = value(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(dashed(name) + " is '" + *text + "', must be an integer");
  if (v < min || v > max)
    throw UsageError(dashed(name) + " is " + *text + ", must be in [" + std::to_string(min) +
                     ", " + std::to_string(max) + "]");
  return v;
}

std::optional<double> Options::number(std::string_view name) {
  const std::optional<std::string> text = value(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text->c_str(), &end);
  if (text->empty() || *end != '\0') throw UsageError(dashed(name) + " is '" + *text + "', must be a number");
  return v;
}

void Options::finish() const {
  for (const Word& w : words_) {
    if (w.used || w.text == "--help" || w.text == "-h") continue;
    if (w.text.rfind("-", 0) == 0) throw UsageError("unknown option '" + w.text + "'");
    throw UsageError("unexpected argument '" + w.text + "'");
  }
}

Device parse_device(Options& options) {
  const std::optional<std::string> text = options.value("device");
  const int gpus = cuda_device_count();
  if (!text) return gpus > 0 ? Device{DeviceKind::cuda, 0} : Device{DeviceKind::cpu, 0};
  if (*text == "cpu") return {DeviceKind::cpu, 0};
  if (text->rfind("cuda", 0) != 0)
    throw UsageError("--device is '" + *text + "', must be cpu, cuda or cuda:N");
  int index = 0;
  if (text->size() > 4) {
    char* end = nullptr;
    index = int(std::strtol(text->c_str() + 5, &end, 10));
    if ((*text)[4] != ':' || text->size() == 5 || *end != '\0' || index < 0)
      throw UsageError("--device is '" + *text + "', must be cpu, cuda or cuda:N");
  }
  if (gpus == 0)
    throw UsageError("--device is " + *text +
                     " but no CUDA device is visible (or this build has no CUDA support)");
  if (index >= gpus)
    throw UsageError("--device is " + *text + " but only " + std::to_string(gpus) +
                     " CUDA device(s) are visible");
  return {DeviceKind::cuda, index};
}

Mask parse_mask(Options& options) {
  const std::optional<std::string> text = options.value_or_bare("causal", "top_left");
  if (!text || *text == "none") return Mask::none;
  if (*text == "top_left") return Mask::causal_top_left;
  if (*text == "bottom_right") return Mask::causal_bottom_right;
  throw UsageError("--causal is '" + *text + "', must be top_left, bottom_right or none");
}

namespace {

// x with the 9 significant digits that read back as the same float.
std::string number_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", x);
  return text;
}

// One side of --window: an integer >= -1 (-1: open).
int window_side(const std::string& text, const std::string& whole) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < -1 || v > INT32_MAX)
    throw UsageError("--window is '" + whole +
                     "', must be LEFT,RIGHT: integers >= -1 (-1: that side open)");
  return int(v);
}

}  // namespace

VariantOptions parse_variants(Options& options) {
  VariantOptions v;
  if (const std::optional<std::string> window = options.value("window")) {
    const size_t comma = window->find(',');
    if (comma == std::string::npos)
      throw UsageError("--window is '" + *window +
                       "', must be LEFT,RIGHT: integers >= -1 (-1: that side open)");
    v.window_left = window_side(window->substr(0, comma), *window);
    v.window_right = window_side(window->substr(comma + 1), *window);
  }
  if (const std::optional<double> softcap = options.number("softcap")) {
    if (!std::isfinite(*softcap) || *softcap < 0)
      throw UsageError("--softcap is " + number_text(*softcap) +
                       ", must be a finite number >= 0 (0: none)");
    v.softcap = float(*softcap);
  }
  v.alibi = options.flag("alibi");
  if (const std::optional<double> dropout = options.number("dropout")) {
    if (!(*dropout >= 0 && *dropout <= 1))
      throw UsageError("--dropout is " + number_text(*dropout) + ", must be in [0, 1] (0: none)");
    v.dropout = float(*dropout);
  }
  return v;
}

void VariantOptions::apply_to(harness::Case& c) const {
  c.window_left = window_left;
  c.window_right = window_right;
  c.softcap = softcap;
  c.alibi = alibi;
  c.dropout.p = dropout;
}

std::string VariantOptions::command_line() const {
  std::string out;
  if (window_left >= 0 || window_right >= 0)
    out += " --window " + std::to_string(window_left) + "," + std::to_string(window_right);
  if (softcap > 0.0f) out += " --softcap " + number_text(softcap);
  if (alibi) out += " --alibi";
  if (dropout > 0.0f) out += " --dropout " + number_text(dropout);
  return out;
}

BiasOptions parse_bias(Options& options) {
  const std::optional<std::string> type = options.value("bias");
  const std::optional<std::string> broadcast = options.value("bias-broadcast");
  BiasOptions b;
  if (!type) {
    if (broadcast) throw UsageError("--bias-broadcast needs --bias");
    return b;
  }
  const std::optional<BiasType> t = harness::bias_type_from_string(*type);
  if (!t) throw UsageError("--bias is '" + *type + "', must be f32, f16, bf16 or bool");
  const std::string dims = broadcast.value_or("none");
  if (dims != "none" && dims != "batch" && dims != "heads" && dims != "both")
    throw UsageError("--bias-broadcast is '" + dims + "', must be none, batch, heads or both");
  b.bias = harness::Case::Bias{*t, dims == "batch" || dims == "both",
                               dims == "heads" || dims == "both", false};
  return b;
}

void BiasOptions::apply_to(harness::Case& c) const { c.bias = bias; }

std::string BiasOptions::command_line() const {
  if (!bias) return "";
  const std::string dims = harness::bias_broadcast_name(*bias);
  return " --bias " + harness::bias_type_name(bias->type) +
         (dims == "none" ? "" : " --bias-broadcast " + dims);
}

bool has_variants(const harness::Case& c) {
  return c.window_left >= 0 || c.window_right >= 0 || c.softcap > 0.0f || c.alibi ||
         c.bias.has_value() || c.dropout.p > 0.0f;
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) items.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

std::string device_label(Device device) {
  return device.kind == DeviceKind::cpu ? "cpu" : "cuda:" + std::to_string(device.index);
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? std::string(separator) : "") + items[i];
  return out;
}

}  // namespace flashattn::cli
