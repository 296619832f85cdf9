// `flashattn backends`: the library's backend table (flashattn::backends(), the
// registry in src/api/registry.cpp), as text or as the Markdown table that the
// README and docs/guide.md embed (a test keeps them equal to this output).
#include <iostream>
#include <sstream>
#include <string>

#include "commands.h"

namespace flashattn::cli {
namespace {

constexpr const char* kHelp = R"(usage: flashattn backends [--markdown]

Lists the library's backends: where each runs, the dtypes and head dims it
takes, whether it has a backward (and its head_dim limit), the GPUs it needs,
and how it computes. Every limit that the docs,
--help texts and error messages state comes from this one table.

options:
  --markdown   print a Markdown table (as README.md and docs/guide.md embed it)
)";

std::string dtypes_of(const BackendInfo& b) {
  std::string out;
  for (DType d : {DType::f32, DType::f16, DType::bf16})
    if (b.takes(d)) out += (out.empty() ? "" : ", ") + std::string(to_string(d));
  return out;
}

// ", v's may differ": where v's head_dim may be other than q's and k's.
std::string v_differs(bool takes_head_dim_v) { return takes_head_dim_v ? ", v's may differ" : ""; }

std::string head_dims_of(const BackendInfo& b) {
  return (b.max_head_dim == 0 ? "any" : "<= " + std::to_string(b.max_head_dim)) +
         v_differs(b.takes_head_dim_v);
}

std::string backward_of(const BackendInfo& b) {
  if (!b.has_backward()) return "no";
  return (b.backward_max_head_dim == 0 ? "any head_dim"
                                       : "head_dim <= " + std::to_string(b.backward_max_head_dim)) +
         v_differs(b.takes_backward_head_dim_v);
}

std::string gpus_of(const BackendInfo& b) {
  if (b.device == DeviceKind::cpu) return "none (host tensors)";
  if (b.compute_capability == 0) return "compute capability 8.0+";
  return "compute capability " + std::to_string(b.compute_capability / 10) + "." +
         std::to_string(b.compute_capability % 10) + " only";
}

}  // namespace

std::string backend_table_markdown() {
  std::ostringstream out;
  out << "| backend | tensors on | dtypes | head_dim | backward | GPU | how it computes |\n"
      << "|---|---|---|---|---|---|---|\n";
  for (const BackendInfo& b : backends())
    out << "| `" << b.name << "` | " << (b.device == DeviceKind::cpu ? "cpu" : "cuda") << " | "
        << dtypes_of(b) << " | " << head_dims_of(b) << " | " << backward_of(b) << " | "
        << gpus_of(b) << " | " << b.summary << " |\n";
  return out.str();
}

std::string backend_names() {
  std::string out = "auto";
  for (const BackendInfo& b : backends()) out += ", " + std::string(b.name);
  return out;
}

int backends_main(Options& options) {
  if (options.help()) {
    std::cout << kHelp;
    return 0;
  }
  const bool markdown = options.flag("markdown");
  options.finish();
  if (markdown) {
    std::cout << backend_table_markdown();
    return 0;
  }
  for (const BackendInfo& b : backends())
    std::cout << b.name << std::string(b.name.size() < 13 ? 13 - b.name.size() : 1, ' ')
              << (b.device == DeviceKind::cpu ? "cpu " : "cuda") << "  " << dtypes_of(b)
              << ", head_dim " << head_dims_of(b) << ", backward: " << backward_of(b) << ", "
              << gpus_of(b) << "\n"
              << std::string(19, ' ') << b.summary << "\n";
  return 0;
}

}  // namespace flashattn::cli
