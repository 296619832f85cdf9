// The flashattn command-line tool, run as a subprocess: help and usage errors,
// and `flashattn run` on .npy files written here, its output read back and
// compared with the library.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <fstream>
#include <sstream>
#include <string>

#include "flashattn/flashattn.hpp"
#include "npy_io.h"
#include "seed.h"

#ifndef FLASHATTN_CLI_PATH
#error "FLASHATTN_CLI_PATH must name the flashattn binary"
#endif
#ifndef FLASHATTN_SOURCE_DIR
#error "FLASHATTN_SOURCE_DIR must name the source tree (its README and guide quote the CLI)"
#endif

namespace flashattn::test {
namespace {

using testing::HasSubstr;
namespace fs = std::filesystem;

struct CliResult {
  int exit_code;       // -1 if killed by a signal
  std::string output;  // stdout and stderr together
};

// The binary under test: FLASHATTN_CLI from the environment (a build carried to
// another machine), else the one this build made.
std::string cli_path() {
  const char* from_env = std::getenv("FLASHATTN_CLI");
  return from_env && *from_env ? from_env : FLASHATTN_CLI_PATH;
}

CliResult run_cli(const std::string& args) {
  std::string command = "'";
  command.append(cli_path()).append("' ").append(args).append(" 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  std::string output;
  char chunk[4096];
  for (size_t n; (n = fread(chunk, 1, sizeof chunk, pipe)) > 0;) output.append(chunk, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// Attention via the library on contiguous float32 host arrays shaped
// (batch, seqlen, heads, head_dim).
// v_shape: v's where its head_dim differs from k's (then out's head_dim too).
std::vector<float> library_attention(const NpyFloat32& q, const NpyFloat32& k, const NpyFloat32& v,
                                     const int64_t q_shape[4], const int64_t kv_shape[4],
                                     Backend backend, Mask mask, std::optional<float> scale,
                                     const int64_t* v_shape = nullptr) {
  if (v_shape == nullptr) v_shape = kv_shape;
  const int64_t out_shape[4] = {q_shape[0], q_shape[1], q_shape[2], v_shape[3]};
  std::vector<float> out(size_t(out_shape[0] * out_shape[1] * out_shape[2] * out_shape[3]));
  auto view = [](const float* data, const int64_t s[4]) {
    return contiguous_view(const_cast<float*>(data), DType::f32, s[0], s[1], s[2], s[3]);
  };
  Params p;
  p.q = view(q.values.data(), q_shape);
  p.k = view(k.values.data(), kv_shape);
  p.v = view(v.values.data(), v_shape);
  p.out = view(out.data(), out_shape);
  p.backend = backend;
  p.mask = mask;
  p.scale = scale;
  forward(p);
  return out;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t e = 0; e < want.size(); ++e) {
    err += (double(got[e]) - want[e]) * (double(got[e]) - want[e]);
    ref += double(want[e]) * want[e];
  }
  return std::sqrt(err / ref);
}

class Cli : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(cli_path())) << cli_path() << " is not built";
    dir_ =
        fs::temp_directory_path() / ("flashattn_test_cli_" + std::to_string(getpid()) + "_" +
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    seed_ = fresh_seed();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A random float32 array, written to dir/name.
  NpyFloat32 write_random(const std::string& name, std::vector<int64_t> shape) {
    NpyFloat32 array{shape, {}};
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d;
    std::mt19937_64 rng(seed_ + std::hash<std::string>{}(name));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t e = 0; e < elements; ++e) array.values.push_back(normal(rng));
    write_npy(path(name), array);
    return array;
  }

  std::string files() const {
    return "--q '" + path("q.npy") + "' --k '" + path("k.npy") + "' --v '" + path("v.npy") +
           "' --out '" + path("out.npy") + "'";
  }

  fs::path dir_;
  uint64_t seed_ = 0;
};

TEST_F(Cli, HelpExitsZero) {
  const CliResult r = run_cli("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("usage"));
  EXPECT_THAT(r.output, HasSubstr("run"));
  const CliResult run_help = run_cli("run --help");
  EXPECT_EQ(run_help.exit_code, 0) << run_help.output;
  EXPECT_THAT(run_help.output, HasSubstr("--q"));
}

TEST_F(Cli, NoCommandOrUnknownCommandFails) {
  const CliResult none = run_cli("");
  EXPECT_NE(none.exit_code, 0) << none.output;
  EXPECT_THAT(none.output, HasSubstr("usage"));
  const CliResult unknown = run_cli("frobnicate");
  EXPECT_NE(unknown.exit_code, 0) << unknown.output;
  EXPECT_THAT(unknown.output, HasSubstr("frobnicate"));
}

TEST_F(Cli, BadFlagFailsNamingIt) {
  const CliResult r = run_cli("run " + files() + " --bogus-flag 3");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("bogus-flag"));
}

TEST_F(Cli, MissingInputFailsNamingIt) {
  const CliResult r = run_cli("run " + files());  // nothing written yet
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(path("q.npy")));
  EXPECT_FALSE(fs::exists(path("out.npy")));
}

TEST_F(Cli, LibraryErrorIsReported) {
  write_random("q.npy", {1, 5, 4, 8});
  write_random("k.npy", {1, 5, 3, 8});
  write_random("v.npy", {1, 5, 3, 8});
  const CliResult r = run_cli("run " + files() + " --device cpu");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("q: heads (4) must be a multiple of k's heads (3)"));
}

TEST_F(Cli, RunFourDimensionalMatchesLibraryBitForBit) {
  SCOPED_TRACE(replay_hint(seed_));
  const int64_t q_shape[4] = {2, 9, 4, 16}, kv_shape[4] = {2, 13, 2, 16};
  const NpyFloat32 q = write_random("q.npy", {2, 9, 4, 16});
  const NpyFloat32 k = write_random("k.npy", {2, 13, 2, 16});
  const NpyFloat32 v = write_random("v.npy", {2, 13, 2, 16});
  const CliResult r =
      run_cli("run " + files() + " --causal=bottom_right --scale 0.25 --device cpu --backend cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const NpyFloat32 out = read_npy(path("out.npy"));
  EXPECT_EQ(out.shape, q.shape);
  const std::vector<float> want =
      library_attention(q, k, v, q_shape, kv_shape, Backend::cpu, Mask::causal_bottom_right, 0.25f);
  ASSERT_EQ(out.values.size(), want.size());
  for (size_t e = 0; e < want.size(); ++e)
    ASSERT_EQ(out.values[e], want[e]) << "element " << e << " differs from the library's";
}

TEST_F(Cli, RunWithVsOwnHeadDimWritesOutOfThatWidth) {
  // q and k of head_dim 24, v of 8: out (2, 9, 4, 8); and 2-d (seqlen, d_model) with
  // --heads 2: out (9, 2·8).
  SCOPED_TRACE(replay_hint(seed_));
  const int64_t q_shape[4] = {2, 9, 4, 24}, k_shape[4] = {2, 13, 2, 24}, v_shape[4] = {2, 13, 2, 8};
  const NpyFloat32 q = write_random("q.npy", {2, 9, 4, 24});
  const NpyFloat32 k = write_random("k.npy", {2, 13, 2, 24});
  const NpyFloat32 v = write_random("v.npy", {2, 13, 2, 8});
  CliResult r = run_cli("run " + files() + " --device cpu --backend cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  NpyFloat32 out = read_npy(path("out.npy"));
  EXPECT_EQ(out.shape, (std::vector<int64_t>{2, 9, 4, 8}));
  EXPECT_EQ(out.values, library_attention(q, k, v, q_shape, k_shape, Backend::cpu, Mask::none,
                                          std::nullopt, v_shape));
  write_random("q.npy", {9, 48});
  write_random("k.npy", {11, 48});
  write_random("v.npy", {11, 16});
  r = run_cli("run " + files() + " --device cpu --heads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_npy(path("out.npy")).shape, (std::vector<int64_t>{9, 16}));
}

TEST_F(Cli, RunTwoDimensionalWithHeadsMatchesReference) {
  // (seqlen, d_model) with --heads 3: batch 1, head_dim 16. Default device.
  SCOPED_TRACE(replay_hint(seed_));
  const NpyFloat32 q = write_random("q.npy", {20, 48});
  const NpyFloat32 k = write_random("k.npy", {25, 48});
  const NpyFloat32 v = write_random("v.npy", {25, 48});
  const CliResult r = run_cli("run " + files() + " --heads 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const NpyFloat32 out = read_npy(path("out.npy"));
  EXPECT_EQ(out.shape, q.shape);
  const int64_t q_shape[4] = {1, 20, 3, 16}, kv_shape[4] = {1, 25, 3, 16};
  const std::vector<float> want =
      library_attention(q, k, v, q_shape, kv_shape, Backend::reference, Mask::none, std::nullopt);
  ASSERT_EQ(out.values.size(), want.size());
  EXPECT_LE(rel_l2(out.values, want), 1e-5);
}

TEST_F(Cli, RunTwoDimensionalGroupedQueryMatchesReference) {
  // q (20, 64) as 4 heads of 16; k, v (25, 32) as 2 heads of 16; top-left causal.
  SCOPED_TRACE(replay_hint(seed_));
  const NpyFloat32 q = write_random("q.npy", {20, 64});
  const NpyFloat32 k = write_random("k.npy", {25, 32});
  const NpyFloat32 v = write_random("v.npy", {25, 32});
  const CliResult r = run_cli("run " + files() + " --heads 4 --heads-kv 2 --causal");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const NpyFloat32 out = read_npy(path("out.npy"));
  EXPECT_EQ(out.shape, q.shape);
  const int64_t q_shape[4] = {1, 20, 4, 16}, kv_shape[4] = {1, 25, 2, 16};
  const std::vector<float> want = library_attention(q, k, v, q_shape, kv_shape, Backend::reference,
                                                    Mask::causal_top_left, std::nullopt);
  ASSERT_EQ(out.values.size(), want.size());
  EXPECT_LE(rel_l2(out.values, want), 1e-5);
}

// check and bench with a bias: check's sweep passes (forward, and backward with
// a boolean mask broadcast over the heads), naming the bias in its labels and
// its replay line; bench times the flash backends with it and skips standard
// attention, which has none; bad values and --bias on `run` are usage errors.
TEST_F(Cli, CheckAndBenchTakeABias) {
  const CliResult forward =
      run_cli("check --device cpu --quick --cases 8 --bias f16 --bias-broadcast batch");
  EXPECT_EQ(forward.exit_code, 0) << forward.output;
  EXPECT_THAT(forward.output, HasSubstr("--bias f16 --bias-broadcast batch --seed"));
  EXPECT_THAT(forward.output, HasSubstr("bias f16 broadcast batch"));
  EXPECT_THAT(forward.output, HasSubstr(" 0 failed"));
  const CliResult backward =
      run_cli("check --device cpu --quick --cases 6 --backward --bias bool --bias-broadcast heads");
  EXPECT_EQ(backward.exit_code, 0) << backward.output;
  EXPECT_THAT(backward.output, HasSubstr("bias bool broadcast heads"));
  EXPECT_THAT(backward.output, HasSubstr(" 0 failed"));

  const CliResult bench = run_cli("bench --device cpu --seqlen 64 --heads 2 --head-dim 16 --reps 1 "
                                  "--bias bf16 --json '" + path("bench.json") + "'");
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_THAT(bench.output, HasSubstr("bias bf16"));
  EXPECT_THAT(bench.output, HasSubstr("has no window, softcap, ALiBi or bias"));
  std::ifstream json(path("bench.json"));
  std::stringstream text;
  text << json.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"bias\": \"bf16\", \"bias_broadcast\": \"none\""));

  const CliResult bad_type = run_cli("check --device cpu --bias int8");
  EXPECT_EQ(bad_type.exit_code, 2) << bad_type.output;
  EXPECT_THAT(bad_type.output, HasSubstr("--bias is 'int8', must be f32, f16, bf16 or bool"));
  const CliResult bad_dims = run_cli("bench --device cpu --bias f32 --bias-broadcast rows");
  EXPECT_EQ(bad_dims.exit_code, 2) << bad_dims.output;
  EXPECT_THAT(bad_dims.output, HasSubstr("--bias-broadcast is 'rows'"));
  const CliResult alone = run_cli("check --device cpu --bias-broadcast both");
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  EXPECT_THAT(alone.output, HasSubstr("--bias-broadcast needs --bias"));
  const CliResult on_run = run_cli("run " + files() + " --bias f32");
  EXPECT_NE(on_run.exit_code, 0) << on_run.output;
  EXPECT_THAT(on_run.output, HasSubstr("--bias"));
  const CliResult help = run_cli("check --help");
  EXPECT_THAT(help.output, HasSubstr("--bias-broadcast none|batch|heads|both"));
}

// The backend tables in README.md and docs/guide.md are copies of
// `flashattn backends --markdown`, kept between marker comments; a registry change
// that is not copied there fails here.
// The source tree: FLASHATTN_SOURCE_DIR from the environment (a build carried to
// another machine, run in its copy of the tree), else the one this build came from.
std::string source_dir() {
  const char* from_env = std::getenv("FLASHATTN_SOURCE_DIR");
  return from_env && *from_env ? from_env : FLASHATTN_SOURCE_DIR;
}

std::string generated_block(const std::string& document) {
  std::ifstream in(source_dir() + "/" + document);
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  const std::string begin = "<!-- backends:begin -->\n", end = "<!-- backends:end -->";
  const size_t from = all.find(begin), to = all.find(end);
  if (from == std::string::npos || to == std::string::npos || to < from) return "(no markers)";
  return all.substr(from + begin.size(), to - from - begin.size());
}

TEST(CliDocs, BackendTablesInDocsMatchTheRegistry) {
  const CliResult r = run_cli("backends --markdown");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* document : {"README.md", "docs/guide.md"}) {
    EXPECT_EQ(generated_block(document), r.output)
        << document << ": paste the output of `flashattn backends --markdown` between its markers";
  }
}

TEST(CliDocs, BackendsListsEveryRegistryEntry) {
  const CliResult r = run_cli("backends");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"reference", "cpu", "cuda_naive", "cuda_tiled", "cuda_tf32x3", "cuda_mma",
                           "cuda_wgmma", "cuda_f16x3"}) {
    EXPECT_THAT(r.output, HasSubstr(name));
  }
}

}  // namespace
}  // namespace flashattn::test
