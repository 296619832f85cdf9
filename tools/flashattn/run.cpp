// `flashattn run`: attention on NumPy files, on the CPU or copied to a GPU and back.
#include <array>
#include <chrono>
#include <iostream>
#include <optional>

#include "commands.h"
#include "device_memory.h"
#include "format.h"
#include "npy.h"

namespace flashattn::cli {
namespace {

constexpr const char* kHelp = R"(usage: flashattn run --q Q.npy --k K.npy --v V.npy --out O.npy [options]

Computes out = softmax(q·kᵀ·scale)·v and writes it with q's dtype and shape
(with v's head_dim, where v's differs from q's and k's).
Arrays are (batch, seqlen, heads, head_dim), or (seqlen, d_model) with --heads
(then batch 1 and head_dim = d_model / heads). k and v may have another seqlen
than q, and fewer heads (grouped-query attention). Supported .npy files:
format 1.0 or 2.0, C order, dtype '<f4' (float32) or '<f2' (float16); q, k
and v share one dtype.

options:
  --q FILE, --k FILE, --v FILE   the inputs
  --out FILE                     the output (overwritten)
  --heads H                      heads of a 2-d q (and of 2-d k, v unless --heads-kv)
  --heads-kv H                   heads of 2-d k and v
  --causal[=top_left|bottom_right|none]
                                 causal mask; plain --causal is top_left (key j is
                                 visible to query i iff j <= i); bottom_right aligns
                                 the last query with the last key (j <= i + Nk - Nq)
  --scale S                      score scale (default 1/sqrt(head_dim))
  --backend NAME                 auto (default) or a backend that `flashattn
                                 backends` lists with its dtypes and limits
  --device cpu|cuda[:N]          where to run (default: cuda when a GPU is visible)
)";

struct Input {
  const char* name;  // "q", "k", "v": the library's names in its error messages
  std::string path;
  NpyArray array;
  std::array<int64_t, 4> shape{};  // (batch, seqlen, heads, head_dim)
};

std::string required(Options& options, const char* name) {
  std::optional<std::string> path = options.value(name);
  if (!path) throw UsageError(std::string("--") + name + " FILE is required");
  return *path;
}

// Interprets an input as (batch, seqlen, heads, head_dim).
void resolve_shape(Input& in, std::optional<int64_t> heads, const char* heads_option) {
  const std::vector<int64_t>& s = in.array.shape;
  if (s.size() == 4) {
    if (heads)
      throw UsageError(std::string(heads_option) + " splits 2-d (seqlen, d_model) inputs, but " +
                       in.path + " is 4-d " + shape_string(s));
    in.shape = {s[0], s[1], s[2], s[3]};
    return;
  }
  if (s.size() != 2)
    throw std::runtime_error(in.path + ": shape " + shape_string(s) +
                             " has " + std::to_string(s.size()) +
                             " dimensions; expected 4 (batch, seqlen, heads, head_dim), or 2 "
                             "(seqlen, d_model) with --heads");
  if (!heads)
    throw UsageError(in.path + " is 2-d " + shape_string(s) + " (seqlen, d_model): give " +
                     heads_option + " to split d_model into heads");
  if (s[1] % *heads != 0)
    throw UsageError(std::string(heads_option) + " is " + std::to_string(*heads) + ", but " +
                     in.path + "'s d_model " + std::to_string(s[1]) + " is not divisible by it");
  in.shape = {1, s[0], *heads, s[1] / *heads};
}

// Reads q, k and v, checks they share a dtype, and gives each its 4-d shape:
// --heads splits a 2-d q, --heads-kv (default --heads) a 2-d k and v.
void load_inputs(std::vector<Input>& inputs, std::optional<int64_t> heads,
                 std::optional<int64_t> heads_kv) {
  for (Input& in : inputs) in.array = read_npy(in.path);
  const Input& q = inputs[0];
  for (Input& in : inputs) {
    if (in.array.dtype != q.array.dtype)
      throw std::runtime_error(in.path + ": dtype " + std::string(to_string(in.array.dtype)) +
                               " differs from " + q.path + "'s " +
                               std::string(to_string(q.array.dtype)));
    if (&in == &q) resolve_shape(in, heads, "--heads");
    else if (heads_kv) resolve_shape(in, heads_kv, "--heads-kv");
    else resolve_shape(in, heads, "--heads");
  }
}

Backend parse_backend(Options& options) {
  const std::string name = options.value("backend").value_or("auto");
  const std::optional<Backend> backend = backend_from_string(name);
  if (!backend)
    throw UsageError("--backend is '" + name + "', must be one of " + backend_names());
  return *backend;
}

std::string describe_inputs(const std::vector<Input>& inputs) {
  std::string out;
  for (const Input& in : inputs)
    out += std::string(out.empty() ? "" : ", ") + in.name + " = " + in.path + " as " +
           shape_string({in.shape.begin(), in.shape.end()});
  return out;
}

// Runs forward on host arrays (and ALiBi's host slopes, if p has them), through
// device copies when device is a GPU; returns the backend that ran.
Backend forward_on(Device device, Params p, std::vector<Input>& inputs, NpyArray& out) {
  if (device.kind == DeviceKind::cpu) {
    forward(p);
    return select_backend(p);
  }
  std::vector<harness::DeviceBuffer> buffers;
  TensorView* views[] = {&p.q, &p.k, &p.v};
  for (size_t i = 0; i < inputs.size(); ++i) {
    buffers.emplace_back(inputs[i].array.data.size(), device.index);
    buffers.back().upload(inputs[i].array.data.data());
    views[i]->data = buffers.back().data();
  }
  if (p.variants.alibi_slopes) {
    buffers.emplace_back(size_t(p.q.shape[2]) * sizeof(float), device.index);
    buffers.back().upload(p.variants.alibi_slopes);
    p.variants.alibi_slopes = static_cast<const float*>(buffers.back().data());
  }
  harness::DeviceBuffer out_device(out.data.size(), device.index);
  p.out.data = out_device.data();
  forward(p);
  harness::device_synchronize(device.index);
  out_device.download(out.data.data());
  return select_backend(p);
}

}  // namespace

int run_main(Options& options) {
  if (options.help()) {
    std::cout << kHelp << kVariantsHelp;
    return 0;
  }
  std::vector<Input> inputs = {{"q", required(options, "q"), {}},
                               {"k", required(options, "k"), {}},
                               {"v", required(options, "v"), {}}};
  const std::string out_path = required(options, "out");
  const std::optional<int64_t> heads = options.integer("heads", 1, INT32_MAX);
  const std::optional<int64_t> heads_kv = options.integer("heads-kv", 1, INT32_MAX);
  Params p;
  p.mask = parse_mask(options);
  if (const std::optional<double> scale = options.number("scale")) p.scale = float(*scale);
  p.backend = parse_backend(options);
  const Device device = parse_device(options);
  harness::Case variants;  // only its variant fields are read
  parse_variants(options).apply_to(variants);
  options.finish();

  load_inputs(inputs, heads, heads_kv);
  // out: q's shape with v's head_dim (which may differ from q's), laid out as q is.
  std::array<int64_t, 4> out_shape = inputs[0].shape;
  out_shape[3] = inputs[2].shape[3];
  std::vector<int64_t> out_array_shape = inputs[0].array.shape;
  out_array_shape.back() = out_array_shape.size() == 4 ? out_shape[3] : out_shape[2] * out_shape[3];
  const size_t out_elements = size_t(out_shape[0] * out_shape[1] * out_shape[2] * out_shape[3]);
  NpyArray out{inputs[0].array.dtype, out_array_shape,
               std::vector<uint8_t>(out_elements * dtype_size(inputs[0].array.dtype))};
  auto view = [&](void* data, const std::array<int64_t, 4>& s) {
    return contiguous_view(data, out.dtype, s[0], s[1], s[2], s[3], device);
  };
  p.q = view(inputs[0].array.data.data(), inputs[0].shape);
  p.k = view(inputs[1].array.data.data(), inputs[1].shape);
  p.v = view(inputs[2].array.data.data(), inputs[2].shape);
  p.out = view(out.data.data(), out_shape);
  const std::vector<float> slopes = harness::alibi_slopes(int(inputs[0].shape[2]));
  p.variants = harness::variants_of(variants, slopes.data());

  Backend chosen;
  const auto start = std::chrono::steady_clock::now();
  try {
    chosen = forward_on(device, p, inputs, out);
  } catch (const Error& e) {
    throw std::runtime_error(std::string(e.what()) + " [" + describe_inputs(inputs) + "]");
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  write_npy(out_path, out);
  std::cout << out_path << ": wrote " << shape_string(out.shape) << " " << to_string(out.dtype)
            << " (backend " << to_string(chosen) << " on " << device_label(device) << ", "
            << format_fixed(ms, 3) << " ms)\n";
  return 0;
}

}  // namespace flashattn::cli
