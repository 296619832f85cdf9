// `flashattn check`: a randomised accuracy sweep of the backends against the
// float64 reference (harness::Problem::evaluate), replayable from its seed.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>

#include "check_cases.h"
#include "commands.h"
#include "format.h"
#include "grad_problem.h"
#include "problem.h"

namespace flashattn::cli {
namespace {

constexpr const char* kHelp = R"(usage: flashattn check [options]

Runs each backend on a sweep of cases and scores its output and lse against the
float64 reference: fixed awkward shapes first (seqlen 1, 17, 1000; head_dim 1,
3, 80, 200; seqlen_q != seqlen_k; grouped-query heads; strided views; both
causal alignments; on the GPU also head_dim 1024 and seqlen 4097), then random
shapes, dtypes, masks, scales and input spreads. The variant and bias options
apply to every case. Prints PASS or FAIL per case and backend (with the error
summary for failures; SKIP where the backend declines the case), then "N passed,
M failed"; exits 1 if any case failed.

options:
  --device cpu|cuda[:N]  default: cuda when a GPU is visible, else cpu
  --backends LIST        comma-separated backend names (default: all that run
                         on the device, the reference included)
  --cases N              number of cases (default 100)
  --seed S               replay a sweep (default: a fresh random seed, printed)
  --quick                small cases only (default 12), e.g. under compute-sanitizer
  --backward             check the backward instead: each backend with one runs
                         its forward, then its backward, and dq, dk and dv are
                         scored each against the float64 reference (cases whose
                         whole reference backward would take long are left out)
)";

// --backward: the reference backward runs on every row, so cases above this many
// forward flops are left out (a few seconds of float64 on two cores).
constexpr double kBackwardFlopLimit = 3e8;

std::vector<Backend> chosen_backends(Options& options, DeviceKind device) {
  const std::vector<Backend> available = available_backends(device);
  std::vector<std::string> names;
  for (Backend b : available) names.emplace_back(to_string(b));
  const std::optional<std::string> list = options.value("backends");
  if (!list) return available;
  std::vector<Backend> chosen;
  for (const std::string& name : split_list(*list)) {
    const std::optional<Backend> b = backend_from_string(name);
    if (!b || std::find(available.begin(), available.end(), *b) == available.end())
      throw UsageError("--backends names '" + name + "', which is not one of " +
                       join(names, ", ") + " on this device");
    if (std::find(chosen.begin(), chosen.end(), *b) == chosen.end()) chosen.push_back(*b);
  }
  if (chosen.empty()) throw UsageError("--backends is empty");
  return chosen;
}

std::string case_label(const harness::Case& c) {
  std::string label = shape_label(c);
  if (c.scale) label += " scale " + format_fixed(*c.scale, 3);
  if (c.input_std != 1.0f) label += " std " + format_fixed(c.input_std, 2);
  return label;
}

struct Outcome {
  enum { passed, failed, skipped } kind;
  std::string detail;  // what went wrong, or why the backend declined the case
};

// Runs score() (the backend on one problem, scored), turning a declined case
// (unsupported, e.g. cuda_wgmma and strides TMA cannot describe) into a skip and
// any other error into a failure.
template <typename Score>
Outcome guarded(Score&& score) {
  try {
    const auto [passed, summary] = score();
    return passed ? Outcome{Outcome::passed, ""} : Outcome{Outcome::failed, summary};
  } catch (const Error& e) {
    if (e.status() == Status::unsupported) return {Outcome::skipped, e.what()};
    return {Outcome::failed, std::string("error: ") + e.what()};
  } catch (const std::exception& e) {
    return {Outcome::failed, std::string("error: ") + e.what()};
  }
}

Outcome check_backend(harness::Problem& problem, Backend backend) {
  return guarded([&] {
    problem.poison_output();
    forward(problem.params(backend));
    const harness::Accuracy accuracy = problem.evaluate(backend);
    return std::pair{accuracy.passed, accuracy.summary()};
  });
}

Outcome check_backward(harness::GradProblem& problem, Backend backend) {
  return guarded([&] {
    problem.run(backend);
    const harness::GradAccuracy accuracy = problem.evaluate(backend);
    return std::pair{accuracy.passed(), accuracy.summary()};
  });
}

bool runs(Backend backend, const harness::Case& c, bool backward) {
  if (!backward) return backend_supports(backend, c.dtype, c.shape.head_dim);
  for (const BackendInfo& info : flashattn::backends())
    if (info.backend == backend)
      return info.has_backward() && info.takes(c.dtype) &&
             info.takes_backward_head_dim(c.shape.head_dim);
  return false;
}

}  // namespace

int check_main(Options& options) {
  if (options.help()) {
    std::cout << kHelp << kVariantsHelp << kBiasHelp;
    return 0;
  }
  const Device device = parse_device(options);
  const std::vector<Backend> backends = chosen_backends(options, device.kind);
  const bool quick = options.flag("quick");
  const bool backward = options.flag("backward");
  const VariantOptions variants = parse_variants(options);
  const BiasOptions bias = parse_bias(options);
  const int count =
      int(options.integer("cases", 1, 1000000).value_or(default_check_cases(quick)));
  const std::optional<int64_t> given_seed = options.integer("seed", 0, INT64_MAX);
  options.finish();
  const uint64_t seed = given_seed ? uint64_t(*given_seed) : std::random_device{}() >> 1;

  std::vector<std::string> names;
  for (Backend b : backends) names.emplace_back(to_string(b));
  std::cout << "seed " << seed << ": " << count << " cases on " << device_label(device)
            << " for " << join(names, ", ") << "\nreplay: flashattn check --device "
            << device_label(device) << " --backends " << join(names, ",") << " --cases " << count
            << (quick ? " --quick" : "") << (backward ? " --backward" : "")
            << variants.command_line() << bias.command_line() << " --seed " << seed << "\n";

  const auto start = std::chrono::steady_clock::now();
  int passed = 0, failed = 0, skipped = 0;
  std::vector<CheckCase> cases = check_cases(device.kind, count, seed, quick);
  for (CheckCase& c : cases) {
    variants.apply_to(c.spec);
    bias.apply_to(c.spec);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string index = counter(i + 1, cases.size());
    if (backward && harness::flop_count(cases[i].spec) > kBackwardFlopLimit) continue;
    std::optional<harness::Problem> problem;
    std::optional<harness::GradProblem> grad_problem;
    if (backward) grad_problem.emplace(cases[i].spec, device, cases[i].seed);
    else problem.emplace(cases[i].spec, device, cases[i].seed);
    for (Backend b : backends) {
      if (!runs(b, cases[i].spec, backward)) continue;
      const Outcome outcome =
          backward ? check_backward(*grad_problem, b) : check_backend(*problem, b);
      std::string name(to_string(b));
      name.resize(std::max<size_t>(name.size(), 11), ' ');
      static constexpr const char* kLabel[] = {"PASS ", "FAIL ", "SKIP "};
      std::cout << kLabel[outcome.kind] << index << " " << name << case_label(cases[i].spec)
                << (outcome.detail.empty() ? "" : "\n     " + outcome.detail) << "\n"
                << std::flush;
      (outcome.kind == Outcome::passed ? passed : outcome.kind == Outcome::failed ? failed : skipped) += 1;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << passed << " passed, " << failed << " failed, " << skipped
            << " skipped (declined as unsupported) (" << format_fixed(seconds, 1)
            << " s, seed " << seed << ")\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace flashattn::cli
