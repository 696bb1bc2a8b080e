// run_tiered_bench: a tiny run reports every figure; bad options are usage errors.
#include "zoff/engine/tiered_optimizer_bench.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "offload/offload_test_support.h"
#include "zoff/core/error.h"

namespace zoff::engine::tiered_optimizer_bench_test {
namespace {

TEST(TieredOptimizerBench, TinyRunReportsEveryFigure) {
  offload::testing::TempDir dir;
  TieredBenchOptions o;
  o.params = 100003;  // prime: a partial last sub-group and a partial last block
  o.sub_group_elems = 16384;
  o.steps = 1;
  o.repeats = 1;
  o.threads = 1;
  o.dir = dir.path();
  const auto r = run_tiered_bench(o);
  EXPECT_GT(r.ram_params_per_s, 0.0);
  EXPECT_GT(r.nvme_params_per_s, 0.0);
  EXPECT_GT(r.read_gbps, 0.0);
  EXPECT_GT(r.write_gbps, 0.0);
  EXPECT_EQ(r.bytes_per_param, 12.0);  // master, exp_avg, exp_avg_sq: fp32 each
  EXPECT_NEAR(r.disk_bound_params_per_s,
              1.0 / (12.0 / (r.read_gbps * 1e9) + 12.0 / (r.write_gbps * 1e9)),
              r.disk_bound_params_per_s * 1e-12);
  const std::string table = format_tiered_bench_table(r, "zoff bench optim --tier nvme");
  EXPECT_NE(table.find("disk bound"), std::string::npos) << table;
  EXPECT_NE(format_tiered_bench_json(r).find("\"nvme_params_per_s\""), std::string::npos);
  // The tier removes its files: nothing of the bench is left behind.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(TieredOptimizerBench, BadOptionsNameTheFlag) {
  auto refused = [](TieredBenchOptions o, const std::string& flag) {
    try {
      validate_tiered_bench_options(o);
      ADD_FAILURE() << flag << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  TieredBenchOptions o;
  o.params = 0;
  refused(o, "--params");
  o = TieredBenchOptions{};
  o.sub_group_elems = 0;
  refused(o, "--sub-group-size");
  o = TieredBenchOptions{};
  o.buffer_count = -1;
  refused(o, "--buffer-count");
  o = TieredBenchOptions{};
  o.repeats = 0;
  refused(o, "--repeats");
  o = TieredBenchOptions{};
  o.aio.block_size = 1000;
  refused(o, "block_size");
}

TEST(TieredOptimizerBench, UnusableDirectoryIsAUsageError) {
  TieredBenchOptions o;
  o.params = 1000;
  o.dir = "/proc/zoff_no_such_dir";
  EXPECT_THROW(run_tiered_bench(o), UsageError);
}

}  // namespace
}  // namespace zoff::engine::tiered_optimizer_bench_test
