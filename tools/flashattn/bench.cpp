// `flashattn bench`: standard attention against the flash backends on a table
// of shapes (or one shape given by flags), on the GPU when one is visible.
#include <algorithm>
#include <iostream>

#include "bench_report.h"
#include "commands.h"
#include "format.h"
#include "gpu.h"
#include "system_info.h"

namespace flashattn::cli {
namespace {

constexpr const char* kHelp = R"(usage: flashattn bench [options]

Times standard attention (the N×N score matrix materialised: cuBLAS + a softmax
kernel on the GPU, fp32 loops on the CPU) and each flash backend of the device,
and prints per shape and implementation: median time in ms (warm-up first, then
at least 3 runs, more until --reps or about 1 s), TFLOP/s (4·B·H·Nq·Nk·d, halved
for causal), peak extra memory (CPU: measured heap high-water mark; GPU: device
buffers held), max abs and relative L2 error against the float64 reference
(on at most 256 sampled query rows) and the speed-up over standard attention.
Without shape options it runs a default table for the device. The variant and
bias options apply to every shape (TFLOP/s then count the (row, key) pairs a
window leaves visible, masked by a bias or not); standard attention has no
variants and is skipped with them.

shape options (any of them benchmarks that one shape instead of the table):
  --batch B            default 1
  --seqlen N           sets --seqlen-q and --seqlen-k (default 1024)
  --seqlen-q N, --seqlen-k N
  --heads H            query heads (default 8)
  --heads-kv H         key/value heads, dividing --heads (default --heads)
  --head-dim D         default 64
  --dtype f32|f16|bf16 default f32
  --causal[=top_left|bottom_right]
                       causal mask; plain --causal is top_left
other options:
  --device cpu|cuda[:N]  default: cuda when a GPU is visible, else cpu
  --backends LIST      comma-separated, from 'standard' and the device's flash
                       backends (default: all of them; 'reference' is the
                       accuracy oracle and is not benchmarked)
  --reps N             most timed runs per implementation (default 30)
  --seed S             input seed (default 1)
  --json FILE          also write the results as JSON
)";

harness::Case make_case(int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv,
                        int head_dim, DType dtype, Mask mask = Mask::none) {
  harness::Case c;
  c.shape = {batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim};
  c.dtype = dtype;
  c.mask = mask;
  return c;
}

// Small enough to finish in well under a minute on two cores.
std::vector<harness::Case> default_cpu_table() {
  return {make_case(1, 512, 512, 4, 4, 64, DType::f32),
          make_case(1, 1024, 1024, 4, 4, 64, DType::f32, Mask::causal_top_left),
          make_case(1, 1024, 1024, 2, 2, 64, DType::bf16)};
}

// The last shape shows the tiled kernel at seqlen 32768 with O(N) memory, where
// standard attention needs 32 GiB for S (or reports that it does not fit).
std::vector<harness::Case> default_gpu_table() {
  return {make_case(1, 1000, 1000, 16, 16, 64, DType::f32),
          make_case(1, 4096, 4096, 16, 16, 64, DType::f32),
          make_case(1, 4096, 4096, 16, 16, 64, DType::f32, Mask::causal_top_left),
          make_case(4, 2048, 2048, 16, 16, 64, DType::f16),
          make_case(2, 4096, 4096, 16, 16, 128, DType::bf16, Mask::causal_top_left),
          make_case(1, 32768, 32768, 16, 16, 64, DType::f16)};
}

// The one shape the flags give, or nullopt when none of them is present.
std::optional<harness::Case> shape_from_flags(Options& options) {
  const int64_t max = INT32_MAX;
  const auto batch = options.integer("batch", 1, max);
  const auto seqlen = options.integer("seqlen", 1, max);
  const auto seqlen_q = options.integer("seqlen-q", 1, max);
  const auto seqlen_k = options.integer("seqlen-k", 1, max);
  const auto heads = options.integer("heads", 1, max);
  const auto heads_kv = options.integer("heads-kv", 1, max);
  const auto head_dim = options.integer("head-dim", 1, max);
  const auto dtype_name = options.value("dtype");
  const Mask mask = parse_mask(options);
  if (!batch && !seqlen && !seqlen_q && !seqlen_k && !heads && !heads_kv && !head_dim &&
      !dtype_name && mask == Mask::none)
    return std::nullopt;
  const std::optional<DType> dtype = dtype_from_string(dtype_name.value_or("f32"));
  if (!dtype) throw UsageError("--dtype is '" + *dtype_name + "', must be f32, f16 or bf16");
  const int hq = int(heads.value_or(8)), hkv = int(heads_kv.value_or(hq));
  if (hq % hkv != 0)
    throw UsageError("--heads-kv is " + std::to_string(hkv) + ", must divide --heads (" +
                     std::to_string(hq) + ")");
  const int n = int(seqlen.value_or(1024));
  return make_case(int(batch.value_or(1)), int(seqlen_q.value_or(n)), int(seqlen_k.value_or(n)),
                   hq, hkv, int(head_dim.value_or(64)), *dtype, mask);
}

// Standard attention first (the speed-up baseline), then the flash backends.
std::vector<std::string> implementations(Options& options, DeviceKind device) {
  std::vector<std::string> available = {kStandard};
  for (Backend b : available_backends(device))
    if (b != Backend::reference) available.emplace_back(to_string(b));
  const std::optional<std::string> list = options.value("backends");
  if (!list) return available;
  const std::vector<std::string> wanted = split_list(*list);
  if (wanted.empty()) throw UsageError("--backends is empty");
  for (const std::string& name : wanted)
    if (std::find(available.begin(), available.end(), name) == available.end())
      throw UsageError("--backends names '" + name + "', which is not one of " +
                       join(available, ", ") + " on this device" +
                       (name == "reference" ? " (reference is the oracle, not benchmarked)" : ""));
  std::vector<std::string> ordered;
  for (const std::string& name : available)
    if (std::find(wanted.begin(), wanted.end(), name) != wanted.end()) ordered.push_back(name);
  return ordered;
}

}  // namespace

int bench_main(Options& options) {
  if (options.help()) {
    std::cout << kHelp << kVariantsHelp << kBiasHelp;
    return 0;
  }
  BenchConfig config;
  config.device = parse_device(options);
  const std::optional<harness::Case> one_shape = shape_from_flags(options);
  const VariantOptions variants = parse_variants(options);
  const BiasOptions bias = parse_bias(options);
  const std::vector<std::string> impls = implementations(options, config.device.kind);
  config.max_reps = int(options.integer("reps", 1, 1000000).value_or(config.max_reps));
  config.seed = uint64_t(options.integer("seed", 0, INT64_MAX).value_or(int64_t(config.seed)));
  const std::optional<std::string> json_path = options.value("json");
  options.finish();

  const bool on_gpu = config.device.kind == DeviceKind::cuda;
  std::vector<harness::Case> shapes = one_shape ? std::vector<harness::Case>{*one_shape}
                                      : on_gpu  ? default_gpu_table()
                                                : default_cpu_table();
  for (harness::Case& c : shapes) {
    variants.apply_to(c);
    bias.apply_to(c);
  }
  BenchRecord record{on_gpu ? gpu::device_name(config.device.index) : "cpu: " + cpu_model(),
                     git_commit(), utc_now_iso8601(), {}};
  std::cout << "device: " << record.device << " (" << device_label(config.device) << ")\n";
  int shape_width = 0;
  for (const harness::Case& c : shapes) shape_width = std::max(shape_width, int(shape_label(c).size()));
  print_table_header(std::cout, shape_width);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string step = counter(i + 1, shapes.size()) + " ";
    const std::vector<BenchRow> rows =
        bench_shape(shapes[i], impls, config, step,
                    [&](const BenchRow& row) { print_table_row(std::cout, row, shape_width); });
    record.rows.insert(record.rows.end(), rows.begin(), rows.end());
  }
  if (json_path) {
    write_json(*json_path, record);
    std::cerr << "wrote " << *json_path << "\n";
  }
  return 0;
}

}  // namespace flashattn::cli
