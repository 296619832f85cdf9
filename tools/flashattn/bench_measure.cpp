#include "bench_measure.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <new>

#include "args.h"
#include "problem.h"
#include "format.h"
#include "gpu.h"
#include "heap_tracker.h"
#include "standard_cpu.h"
#include "standard_cuda.h"
#include "system_info.h"

namespace flashattn::cli {
namespace {

constexpr double kTimeBudgetMs = 1000;  // stop adding timed runs after about this much
constexpr int kMinReps = 3;
// cuda_naive is one thread per query row; past this many flops a run takes minutes.
constexpr double kNaiveFlopLimit = 2e12;

double time_once(Device device, const std::function<void()>& run) {
  if (device.kind == DeviceKind::cuda) return gpu::time_ms(device.index, run);
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Median of at least kMinReps timed runs (fewer only if max_reps is), adding
// runs until max_reps or about kTimeBudgetMs in all.
double median_ms(Device device, const std::function<void()>& run, int max_reps) {
  std::vector<double> times;
  double total = 0;
  const int min_reps = std::min(kMinReps, max_reps);
  while (int(times.size()) < max_reps && (int(times.size()) < min_reps || total < kTimeBudgetMs)) {
    times.push_back(time_once(device, run));
    total += times.back();
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  return n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
}

// An implementation bound to the problem's buffers, or the reason it is not run.
struct Runner {
  std::function<void()> run;
  Backend backend = Backend::automatic;  // the library backend it runs, if any
  size_t device_bytes = 0;  // GPU memory it holds beyond the problem's tensors
  std::string skip;
};

Runner standard_runner(const harness::Problem& problem, Device device) {
  const AttnParams attn = attn_params(problem.params(Backend::automatic));
  Runner r;
  if (has_variants(problem.spec())) {
    r.skip = "skipped: standard attention (tools/baselines) has no window, softcap, ALiBi or bias";
    return r;
  }
  if (device.kind == DeviceKind::cpu) {
    const size_t need = baselines::standard_cpu_score_bytes(attn.sizes);
    const std::optional<size_t> available = host_available_bytes();
    if (available && need > *available)
      r.skip = "out of memory: needs " + format_bytes(need) + " for the score matrix, " +
               format_bytes(*available) + " available";
    else
      r.run = [attn] { baselines::standard_cpu_forward(attn); };
    return r;
  }
  // Throws DeviceOutOfMemory when S does not fit; the row then says so.
  auto standard = std::make_shared<baselines::StandardCuda>(attn);
  r.run = [standard] { standard->run(); };
  r.device_bytes = baselines::standard_cuda_bytes(attn.sizes, attn.dtype);
  return r;
}

Runner flash_runner(const harness::Problem& problem, Backend backend) {
  Runner r;
  r.backend = backend;
  const double flops = harness::flop_count(problem.spec());
  if (!backend_supports(backend, problem.spec().dtype, problem.spec().shape.head_dim)) {
    r.skip = std::string("skipped: ") + std::string(to_string(backend)) + " does not take " +
             std::string(to_string(problem.spec().dtype)) + " at head_dim " +
             std::to_string(problem.spec().shape.head_dim);
    return r;
  }
  if (backend == Backend::cuda_naive && flops > kNaiveFlopLimit) {
    r.skip = "skipped: cuda_naive is one thread per query row; " + format_fixed(flops / 1e12, 1) +
             " TFLOP would take minutes";
    return r;
  }
  const Params p = problem.params(backend);
  r.run = [p] { forward(p); };
  // The CUDA backends launch kernels on the caller's tensors and allocate no
  // device memory (src/cuda has no cudaMalloc), so their extra memory is 0. A
  // cudaMemGetInfo difference would only show CUDA loading kernel modules lazily.
  r.device_bytes = 0;
  return r;
}

void measure(harness::Problem& problem, const Runner& runner, const BenchConfig& config,
             BenchRow& row) {
  const Device device = config.device;
  problem.poison_output();
  // The warm-up run is the one checked for accuracy; on the CPU its heap
  // high-water mark above the starting point is the peak extra memory.
  heap::reset_peak();
  const size_t heap_before = heap::current_bytes();
  runner.run();
  if (device.kind == DeviceKind::cuda) harness::device_synchronize(device.index);
  row.peak_extra_bytes =
      device.kind == DeviceKind::cpu ? heap::peak_bytes() - heap_before : runner.device_bytes;
  const harness::Accuracy accuracy = problem.evaluate(runner.backend);
  row.max_abs = accuracy.max_abs;
  row.rel_l2 = accuracy.rel_l2;
  row.ms = median_ms(device, runner.run, config.max_reps);
  row.tflops = harness::flop_count(row.shape) / (row.ms * 1e9);
}

BenchRow bench_impl(harness::Problem& problem, const std::string& impl, const BenchConfig& config) {
  BenchRow row;
  row.impl = impl;
  row.shape = problem.spec();
  try {
    const Runner runner = impl == kStandard
                              ? standard_runner(problem, config.device)
                              : flash_runner(problem, *backend_from_string(impl));
    if (!runner.skip.empty()) row.note = runner.skip;
    else measure(problem, runner, config, row);
  } catch (const baselines::DeviceOutOfMemory& e) {
    row.note = "out of memory: needs " + format_bytes(e.bytes()) + " of device memory";
  } catch (const std::bad_alloc&) {
    row.note = "out of memory (host)";
  } catch (const std::exception& e) {
    row.note = std::string("error: ") + e.what();
  }
  return row;
}

bool stderr_is_terminal() { return isatty(STDERR_FILENO); }

}  // namespace

void progress(const std::string& message) {
  if (stderr_is_terminal()) std::cerr << "\r\033[K" << message << std::flush;
  else std::cerr << message << "\n";
}

void clear_progress() {
  if (stderr_is_terminal()) std::cerr << "\r\033[K" << std::flush;
}

std::vector<BenchRow> bench_shape(const harness::Case& shape, const std::vector<std::string>& impls,
                                  const BenchConfig& config, const std::string& progress_prefix,
                                  const std::function<void(const BenchRow&)>& on_row) {
  const std::string label = progress_prefix + shape_label(shape);
  progress(label + ": generating inputs");
  harness::Problem problem(shape, config.device, config.seed);
  std::vector<BenchRow> rows;
  std::optional<double> standard_ms;
  for (const std::string& impl : impls) {
    progress(label + ": running " + impl);
    BenchRow row = bench_impl(problem, impl, config);
    if (impl == kStandard && row.measured()) standard_ms = row.ms;
    if (impl != kStandard && standard_ms && row.measured()) row.speedup = *standard_ms / row.ms;
    clear_progress();
    on_row(row);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace flashattn::cli
