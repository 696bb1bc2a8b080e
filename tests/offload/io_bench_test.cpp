// IoBench: a tiny swap-pattern pass moves the whole file; bad sizes are usage errors.
#include "zoff/offload/io_bench.h"

#include <gtest/gtest.h>

#include "offload_test_support.h"
#include "zoff/core/error.h"

namespace zoff::offload::io_bench_test {
namespace {

TEST(IoBench, TinyPassesReportBandwidth) {
  testing::TempDir dir;
  IoBenchOptions o;
  o.dir = dir.path();
  o.file_bytes = 1 << 20;
  o.transfer_bytes = 3 * 64 * 1024;  // not a divisor of the file: a short last transfer
  o.aio.block_size = 64 * 1024;
  IoBench bench(o);
  EXPECT_GT(bench.write_pass(), 0.0);
  EXPECT_GT(bench.read_pass(), 0.0);
  EXPECT_NE(bench.io_description().find("O_DIRECT"), std::string::npos);
}

TEST(IoBench, BadSizesRefused) {
  IoBenchOptions o;
  o.file_bytes = 1000;
  EXPECT_THROW(validate_io_bench_options(o), UsageError);
  o = IoBenchOptions{};
  o.transfer_bytes = o.file_bytes * 2;
  EXPECT_THROW(validate_io_bench_options(o), UsageError);
}

}  // namespace
}  // namespace zoff::offload::io_bench_test
