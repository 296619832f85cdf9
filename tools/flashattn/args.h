// Option parsing shared by the subcommands. Options are GNU style, "--name value"
// or "--name=value"; each getter takes its option out of the list, and finish()
// rejects whatever is left, so a misspelt option is an error, never ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "flashattn/flashattn.hpp"
#include "problem.h"

namespace flashattn::cli {

// A bad command line: main prints it with a pointer to --help and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Options {
 public:
  Options(int argc, char** argv);  // argv[0] is the first option, not the program

  bool help() const;                              // --help or -h anywhere
  bool flag(std::string_view name);               // --name
  std::optional<std::string> value(std::string_view name);  // --name V | --name=V
  // --name=V, --name V (V not starting with "-"), or plain --name meaning `bare`.
  std::optional<std::string> value_or_bare(std::string_view name, std::string_view bare);
  std::optional<int64_t> integer(std::string_view name, int64_t min, int64_t max);
  std::optional<double> number(std::string_view name);
  void finish() const;  // throws UsageError naming the first unused word

 private:
  struct Word {
    std::string text;
    bool used = false;
  };
  // Index of the word "--name" or "--name=...", or -1; a repeated option is an error.
  int find(std::string_view name) const;
  std::vector<Word> words_;
};

// Shared option meanings.
Device parse_device(Options& options);  // --device cpu|cuda[:N]; default cuda if a GPU is visible
Mask parse_mask(Options& options);      // --causal[=top_left|bottom_right|none]
// The variant options --window LEFT,RIGHT, --softcap C, --alibi and --dropout P, as
// harness::Case holds them.
struct VariantOptions {
  int window_left = -1, window_right = -1;  // -1: open
  float softcap = 0.0f;                     // 0: none
  bool alibi = false;
  float dropout = 0.0f;                     // 0: none
  void apply_to(harness::Case& c) const;
  std::string command_line() const;  // " --window 4096,0 --softcap 30 --alibi", "" for none
};
VariantOptions parse_variants(Options& options);
// The bias options of check and bench, --bias TYPE and --bias-broadcast DIMS, as
// harness::Case holds them.
struct BiasOptions {
  std::optional<harness::Case::Bias> bias;  // none: no bias
  void apply_to(harness::Case& c) const;
  std::string command_line() const;  // " --bias bool --bias-broadcast heads", "" for none
};
BiasOptions parse_bias(Options& options);
// Whether c has a window, softcap, ALiBi, a bias or dropout (standard attention has none).
bool has_variants(const harness::Case& c);
// The variant options' --help lines, the same for every subcommand that takes them.
inline constexpr const char* kVariantsHelp = R"(
variants (each off by default; any combination, with --causal too):
  --window LEFT,RIGHT  sliding window: query i sees keys j with i+off-LEFT <= j
                       <= i+off+RIGHT, off 0 for --causal top_left, else Nk-Nq;
                       -1 leaves a side open (--causal --window 4096,0: each
                       query sees itself and the 4096 keys before it)
  --softcap C          each scaled score s becomes C*tanh(s/C) (C > 0)
  --alibi              ALiBi: score i, j of query head h gets -slope_h*|i+off-j|,
                       slope_h = 2^(-8(h+1)/H) for H query heads
  --dropout P          dropout on the probabilities at rate P in [0, 1], seed
                       drawn per case (the backward drops the same elements)
)";
// The bias options' --help lines (check and bench).
inline constexpr const char* kBiasHelp = R"(
bias (off by default; with any variant and --causal too):
  --bias f32|f16|bf16|bool
                       a bias tensor (B, H, Nq, Nk) added to each scaled score
                       after softcap and ALiBi, or a boolean mask (zero: the
                       key is masked), drawn at random per case: normal values
                       of standard deviation 2 with a tenth of them -inf, or 7
                       in 10 keys kept; every 7th row and 128x128 blocks wholly
                       masked (a row with only -inf scores gives 0, lse -inf)
  --bias-broadcast none|batch|heads|both
                       the dimensions the bias has size 1 on, broadcast
                       (default none)
)";
std::vector<std::string> split_list(const std::string& list);  // "a,b,c"
std::string device_label(Device device);  // "cpu", "cuda:0"
std::string join(const std::vector<std::string>& items, std::string_view separator);

}  // namespace flashattn::cli
