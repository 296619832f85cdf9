#include "bench_report.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "args.h"
#include "bias.h"
#include "format.h"

namespace flashattn::cli {
namespace {

constexpr int kImplWidth = 11;

std::string pad(const std::string& text, int width, bool right_align) {
  if (int(text.size()) >= width) return text;
  const std::string fill(width - text.size(), ' ');
  return right_align ? fill + text : text + fill;
}

std::string format_ms(double ms) { return format_fixed(ms, ms < 1 ? 4 : ms < 1000 ? 3 : 1); }

// Two significant digits below 0.1 ("0.0097x"), else two decimals ("1.35x").
std::string format_speedup(double x) {
  if (x >= 0.1) return format_fixed(x, 2) + "x";
  char text[32];
  std::snprintf(text, sizeof text, "%.2gx", x);
  return text;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\u%04x", c);
      out += escape;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// JSON has no inf or NaN: they become null.
std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", x);
  return text;
}

std::string json_row(const BenchRow& row) {
  const harness::Shape& s = row.shape.shape;
  const bool m = row.measured();
  std::string out = "{\"impl\": " + json_string(row.impl) +
                    ", \"dtype\": " + json_string(std::string(to_string(row.shape.dtype))) +
                    ", \"batch\": " + std::to_string(s.batch) +
                    ", \"seqlen_q\": " + std::to_string(s.seqlen_q) +
                    ", \"seqlen_k\": " + std::to_string(s.seqlen_k) +
                    ", \"heads_q\": " + std::to_string(s.heads_q) +
                    ", \"heads_kv\": " + std::to_string(s.heads_kv) +
                    ", \"head_dim\": " + std::to_string(s.head_dim) +
                    ", \"causal\": " + json_string(mask_name(row.shape.mask)) +
                    ", \"ms\": " + (m ? json_number(row.ms) : "null") +
                    ", \"tflops\": " + (m ? json_number(row.tflops) : "null") +
                    ", \"peak_extra_bytes\": " + (m ? std::to_string(row.peak_extra_bytes) : "null") +
                    ", \"rel_l2_err\": " + (m ? json_number(row.rel_l2) : "null") +
                    ", \"max_abs_err\": " + (m ? json_number(row.max_abs) : "null") +
                    ", \"speedup_vs_standard\": " + (row.speedup ? json_number(*row.speedup) : "null");
  if (has_variants(row.shape))
    out += ", \"window_left\": " + std::to_string(row.shape.window_left) +
           ", \"window_right\": " + std::to_string(row.shape.window_right) +
           ", \"softcap\": " + json_number(row.shape.softcap) +
           ", \"alibi\": " + (row.shape.alibi ? "true" : "false") +
           ", \"bias\": " +
           (row.shape.bias ? json_string(harness::bias_type_name(row.shape.bias->type)) : "null") +
           ", \"bias_broadcast\": " +
           (row.shape.bias ? json_string(harness::bias_broadcast_name(*row.shape.bias)) : "null") +
           ", \"dropout\": " + json_number(row.shape.dropout.p);
  if (!m) out += ", \"note\": " + json_string(row.note);
  return out + "}";
}

}  // namespace

void print_table_header(std::ostream& out, int shape_width) {
  out << pad("shape", shape_width + 1, false) << pad("impl", kImplWidth, false) << pad("ms", 11, true)
      << pad("TFLOP/s", 9, true) << pad("peak extra", 12, true) << pad("max abs err", 13, true)
      << pad("rel L2 err", 12, true) << pad("vs standard", 13, true) << "\n";
}

void print_table_row(std::ostream& out, const BenchRow& row, int shape_width) {
  out << pad(shape_label(row.shape), shape_width, false) << " "
      << pad(row.impl, kImplWidth - 1, false) << " ";
  if (!row.measured()) {
    out << row.note << "\n" << std::flush;
    return;
  }
  out << pad(format_ms(row.ms), 10, true) << pad(format_fixed(row.tflops, row.tflops < 1 ? 3 : 2), 9, true)
      << pad(format_bytes(row.peak_extra_bytes), 12, true) << pad(format_sci(row.max_abs), 13, true)
      << pad(format_sci(row.rel_l2), 12, true)
      << pad(row.speedup ? format_speedup(*row.speedup) : "", 13, true) << "\n"
      << std::flush;
}

void write_json(const std::string& path, const BenchRecord& record) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw std::runtime_error(path + ": cannot create: " + std::strerror(errno));
  out << "{\n  \"device\": " << json_string(record.device) << ",\n  \"commit\": "
      << json_string(record.commit) << ",\n  \"date\": " << json_string(record.date)
      << ",\n  \"rows\": [";
  for (size_t i = 0; i < record.rows.size(); ++i)
    out << (i ? ",\n    " : "\n    ") << json_row(record.rows[i]);
  out << "\n  ]\n}\n";
  out.close();
  if (!out) throw std::runtime_error(path + ": write failed");
}

}  // namespace flashattn::cli
