// The optimizer bench measures every kernel and baseline, formats them, and refuses bad flags.
#include "zoff/optim/optimizer_bench.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "zoff/core/error.h"
#include "zoff/optim/compressed_adam.h"
#include "zoff/optim/openmp_probe.h"
#include "zoff_test_paths.h"

namespace zoff::optim::optimizer_bench_test {
namespace {

OptimizerBenchOptions tiny() {
  OptimizerBenchOptions o;
  o.params = 100003;
  o.threads = 2;
  o.steps = 2;
  o.repeats = 1;
  return o;
}

void expect_bench_keys(const nlohmann::json& j) {
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 5u);
  for (const char* k : {"adamw", "adamw_bf16_out", "adam", "sgd", "adagrad", "adamw_bf16_states",
                        "adamw_int8_states", "adamw_split_master", "adamw_int8_split_master"}) {
    EXPECT_GT(j.at("zoff").at(k).get<double>(), 0.0) << k;
  }
  for (const char* k : {"adamw", "adam", "sgd", "adagrad"}) {
    EXPECT_GT(j.at("torch").at(k).get<double>(), 0.0) << k;
  }
  for (const char* k :
       {"adam_fp32", "adam_bf16_out", "adam_fp32_omp", "adam_bf16_states", "adam_int8_states"}) {
    EXPECT_GT(j.at("probe").at(k).get<double>(), 0.0) << k;
  }
  EXPECT_EQ(j.at("zoff").size(), 9u);
  for (const char* k : {"adamw", "adam"}) {  // measured by itself, as the OpenMP probe is
    EXPECT_GT(j.at("alone").at(k).get<double>(), 0.0) << k;
  }
  EXPECT_EQ(j.at("alone").size(), 2u);
  // Bytes per parameter: 28 (fp32 states), 20 + 2 (bf16 states), 16 + 2 + scales (int8).
  const auto& bytes = j.at("bytes_per_param");
  EXPECT_EQ(bytes.size(), 9u);
  EXPECT_DOUBLE_EQ(bytes.at("adamw").get<double>(), 28.0);
  EXPECT_DOUBLE_EQ(bytes.at("adamw_bf16_states").get<double>(), 22.0);
  EXPECT_NEAR(bytes.at("adamw_int8_states").get<double>(), 18.0078, 1e-4);
  // The split master: 2 bytes less than the same states with the fp32 master's copy-out.
  EXPECT_DOUBLE_EQ(bytes.at("adamw_split_master").get<double>(), 28.0);
  EXPECT_NEAR(bytes.at("adamw_int8_split_master").get<double>(), 16.0078, 1e-4);
  EXPECT_EQ(j.at("torch").size(), 4u);
  EXPECT_EQ(j.at("probe").size(), 5u);
}

TEST(OptimizerBench, MeasuresEveryKernelAndFormatsIt) {
  const auto result = run_optimizer_bench(tiny());
  EXPECT_FALSE(result.simd_target.empty());
  expect_bench_keys(nlohmann::json::parse(format_bench_json(result)));
  const auto table = format_bench_table(result, "zoff bench optim --params 100003");
  for (const char* word : {"zoff bench optim --params 100003", "adamw_bf16_out", "zoff/torch",
                           "zoff/probe", "alone/omp", "zoff alone: adam ", "adam_fp32", "adagrad",
                           "adamw_bf16_states", "adamw_int8_states", "B/par", "22.00", "18.01",
                           "states vs fp32 states (AdamW, bf16 copy-out, same run): bf16 ",
                           "ceiling (the states' probe vs the fp32 kernel, same run): bf16 ",
                           "adamw_split_master", "adamw_int8_split_master",
                           "split master vs fp32 master (AdamW, bf16 copy, same run): fp32 "}) {
    EXPECT_NE(table.find(word), std::string::npos) << word << "\n" << table;
  }
  // The compressed states' ratio is the figure: the rates' quotient, printed.
  char ratio[64];
  std::snprintf(ratio, sizeof ratio, "int8 %.2fx",
                result.zoff.at("adamw_int8_states") / result.zoff.at("adamw_bf16_out"));
  EXPECT_NE(table.find(ratio), std::string::npos) << ratio << "\n" << table;
  // Its ceiling: the int8 traffic's probe against the same fp32 kernel.
  std::snprintf(ratio, sizeof ratio, "int8 %.2fx\n",
                result.probe.at("adam_int8_states") / result.zoff.at("adamw_bf16_out"));
  ASSERT_NE(table.find("ceiling"), std::string::npos) << table;
  EXPECT_NE(table.find(ratio, table.find("ceiling")), std::string::npos) << ratio << "\n" << table;
}

// The compressed states' probe touches every element of every stream once, tail included,
// for both state widths: p += g, m += v, v -= old m (wrapping), and the copy-out is p's top
// 16 bits.
template <class T>
void expect_states_probe_visits_every_element(StateDtype dtype) {
  const size_t n = 16 * 1000 + 7;
  std::vector<float> p(n), g(n, 1.0f);
  std::vector<T> m(n), v(n);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = static_cast<float>(i);
    m[i] = static_cast<T>(i);
    v[i] = static_cast<T>(3 * i + 1);
  }
  stream_probe_states(dtype, p.data(), g.data(), m.data(), v.data(), n, out.data());
  for (size_t i = 0; i < n; ++i) {
    const float want_p = static_cast<float>(i) + 1.0f;
    ASSERT_EQ(p[i], want_p) << i;
    ASSERT_EQ(m[i], static_cast<T>(i + 3 * i + 1)) << i;
    ASSERT_EQ(v[i], static_cast<T>(3 * i + 1 - i)) << i;
    uint32_t bits;
    std::memcpy(&bits, &want_p, sizeof bits);
    ASSERT_EQ(out[i], bits >> 16) << i;
  }
}

TEST(StatesProbe, VisitsEveryElementOnceForBothWidths) {
  expect_states_probe_visits_every_element<uint16_t>(StateDtype::kBf16);
  expect_states_probe_visits_every_element<uint8_t>(StateDtype::kInt8);
}

TEST(StatesProbe, RefusesFp32StatesAndAMissingCopyOut) {
  float p = 0, g = 0;
  uint8_t m = 0, v = 0;
  uint16_t out = 0;
  EXPECT_THROW(stream_probe_states(StateDtype::kFp32, &p, &g, &m, &v, 1, &out), UsageError);
  EXPECT_THROW(stream_probe_states(StateDtype::kInt8, &p, &g, &m, &v, 1, nullptr), UsageError);
}

// The OpenMP probe touches every element of every stream once, tail included: it adds g to
// p, m and v (the values are meaningless, but a probe that skipped lines would be a false
// bound).
TEST(OpenmpProbe, VisitsEveryElementOnce) {
  const size_t n = 16 * 1000 + 7;
  std::vector<float> p(n), g(n), m(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = static_cast<float>(i);
    g[i] = 1.0f;
    m[i] = 2.0f * static_cast<float>(i);
    v[i] = -static_cast<float>(i);
  }
  openmp_stream_probe(p.data(), g.data(), m.data(), v.data(), n, 2);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(p[i], static_cast<float>(i) + 1.0f) << i;
    ASSERT_EQ(m[i], 2.0f * static_cast<float>(i) + 1.0f) << i;
    ASSERT_EQ(v[i], -static_cast<float>(i) + 1.0f) << i;
  }
}

TEST(OptimizerBench, BadOptionsNameTheFlag) {
  auto expect_flag = [](OptimizerBenchOptions o, const std::string& flag) {
    try {
      run_optimizer_bench(o);
      ADD_FAILURE() << "no error for " << flag;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  auto o = tiny();
  o.params = 0;
  expect_flag(o, "--params");
  o = tiny();
  o.threads = 0;
  expect_flag(o, "--threads");
  o = tiny();
  o.steps = 0;
  expect_flag(o, "--steps");
  o = tiny();
  o.repeats = -1;
  expect_flag(o, "--repeats");
}

// Runs `zoff` with `args`; returns exit status and stdout.
std::pair<int, std::string> run_zoff(const std::string& args) {
  const std::string command = std::string(ZOFF_EXE) + " " + args + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), got);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The command line end to end (when the `zoff` binary has been built in this build tree).
TEST(OptimizerBench, CommandLinePrintsOneJsonObjectAndRefusesBadFlags) {
  if (!std::ifstream(ZOFF_EXE).good()) GTEST_SKIP() << ZOFF_EXE << " not built";
  const auto [status, out] =
      run_zoff("bench optim --params 20000 --threads 2 --steps 1 --repeats 1 --json");
  ASSERT_EQ(status, 0) << out;
  expect_bench_keys(nlohmann::json::parse(out));
  EXPECT_EQ(run_zoff("bench optim --params 0").first, 2);
  EXPECT_EQ(run_zoff("bench optim --params -5").first, 2);
  EXPECT_EQ(run_zoff("bench optim --threads 0").first, 2);
}

}  // namespace
}  // namespace zoff::optim::optimizer_bench_test
