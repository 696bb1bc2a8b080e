// `zoff bench io` runs fio under coreutils' `timeout`: a fio pass that does not end fails the
// bench with one line (exit 1) instead of hanging it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cli_test_support.h"

namespace zoff::cli_test::bench_io_test {
namespace {

constexpr double kBenchTimeoutSeconds = 120;

// Writes an executable shell script `name` into `dir` that exits with `status`.
void write_stand_in(const TempDir& dir, const std::string& name, int status) {
  const std::string path = dir.file("bin/" + name);
  write_text(path, "#!/bin/sh\nexit " + std::to_string(status) + "\n");
  ASSERT_EQ(chmod(path.c_str(), 0755), 0) << path;
}

// A stand-in `timeout` on PATH that reports what coreutils' does when its time is up (exit
// 124), without running fio: the bench must name the stuck pass and stop. Without the
// `timeout` wrapper the real fio would run and the bench would succeed.
TEST(BenchIo, AFioPassThatTimesOutIsOneLineAndExitOne) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("bin"));
  std::filesystem::create_directories(dir.file("tier"));
  write_stand_in(dir, "timeout", 124);
  write_stand_in(dir, "fio", 0);  // the bench looks for fio on PATH before it starts
  const char* path = std::getenv("PATH");
  const std::string path_set = "PATH=" + dir.file("bin") + ":" + (path != nullptr ? path : "");
  const auto r = run_zoff({"bench", "io", "--dir", dir.file("tier"), "--size", "4M",
                           "--transfer-size", "4M", "--repeats", "1"},
                          {path_set}, kBenchTimeoutSeconds);
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << describe(r);
  EXPECT_EQ(lines[0].rfind("zoff: error:", 0), 0u) << lines[0];
  for (const std::string& s :
       std::vector<std::string>{"fio write", "did not finish within 900 s", dir.file("tier")}) {
    EXPECT_NE(lines[0].find(s), std::string::npos) << lines[0];
  }
}

}  // namespace
}  // namespace zoff::cli_test::bench_io_test
