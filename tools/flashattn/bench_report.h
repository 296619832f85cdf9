// `flashattn bench` output: the table on stdout, printed row by row, and the
// --json file written at the end.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "bench_measure.h"

namespace flashattn::cli {

// shape_width: the longest shape_label the table will show.
void print_table_header(std::ostream& out, int shape_width);
void print_table_row(std::ostream& out, const BenchRow& row, int shape_width);

struct BenchRecord {
  std::string device;  // GPU name, or "cpu: <model name>"
  std::string commit;
  std::string date;  // ISO 8601, UTC
  std::vector<BenchRow> rows;
};

// {"device", "commit", "date", "rows": [{"impl", "dtype", "batch", ...}]}; throws
// std::runtime_error naming the path when it cannot be written.
void write_json(const std::string& path, const BenchRecord& record);

}  // namespace flashattn::cli
