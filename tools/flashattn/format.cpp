#include "format.h"

#include <cstdio>

#include "bias.h"

namespace flashattn::cli {

std::string format_bytes(size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = double(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return std::to_string(bytes) + " B";
  return format_fixed(value, value < 10 ? 2 : value < 100 ? 1 : 0) + " " + kUnits[unit];
}

std::string format_fixed(double x, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, x);
  return text;
}

std::string format_sci(double x) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1e", x);
  return text;
}

std::string counter(size_t i, size_t n) {
  const int width = int(std::to_string(n).size());
  char text[64];
  std::snprintf(text, sizeof text, "[%*zu/%zu]", width, i, n);
  return text;
}

std::string shape_label(const harness::Case& c) {
  const harness::Shape& s = c.shape;
  std::string out = std::string("B") + std::to_string(s.batch);
  out += s.seqlen_q == s.seqlen_k
             ? " N" + std::to_string(s.seqlen_q)
             : " Nq" + std::to_string(s.seqlen_q) + " Nk" + std::to_string(s.seqlen_k);
  out += s.heads_q == s.heads_kv
             ? " H" + std::to_string(s.heads_q)
             : " Hq" + std::to_string(s.heads_q) + " Hkv" + std::to_string(s.heads_kv);
  out += " d" + std::to_string(s.head_dim) + " " + std::string(to_string(c.dtype));
  if (c.mask == Mask::causal_top_left) out += " causal-tl";
  if (c.mask == Mask::causal_bottom_right) out += " causal-br";
  if (c.strided) out += " strided";
  if (c.window_left >= 0 || c.window_right >= 0)
    out += " window(" + std::to_string(c.window_left) + "," + std::to_string(c.window_right) + ")";
  if (c.softcap > 0.0f) {
    char softcap[32];
    std::snprintf(softcap, sizeof softcap, " softcap %g", double(c.softcap));
    out += softcap;
  }
  if (c.alibi) out += " alibi";
  if (c.bias) {
    out += " bias " + harness::bias_type_name(c.bias->type);
    if (c.bias->broadcast_batch || c.bias->broadcast_heads)
      out += " broadcast " + harness::bias_broadcast_name(*c.bias);
  }
  if (c.dropout.p > 0.0f) {
    char dropout[32];
    std::snprintf(dropout, sizeof dropout, " dropout %g", double(c.dropout.p));
    out += dropout;
  }
  return out;
}

std::string mask_name(Mask mask) {
  switch (mask) {
    case Mask::none: return "none";
    case Mask::causal_top_left: return "top_left";
    case Mask::causal_bottom_right: return "bottom_right";
  }
  return "unknown";
}

}  // namespace flashattn::cli
