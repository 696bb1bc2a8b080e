// The tier directory: bad paths, one live owner per lock, stale files of a dead run removed.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <fstream>

#include "offload_test_support.h"
#include "zoff/core/error.h"
#include "zoff/offload/tier.h"

namespace zoff::offload::tier_directory_test {
namespace {

using testing::TempDir;
using testing::test_aio;
namespace fs = std::filesystem;

void touch(const std::string& path) { std::ofstream(path) << "x"; }

std::string usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(TierDirectory, CreatedWhenMissing) {
  TempDir dir;
  const std::string nested = dir.path() + "/a/b";
  auto tier = make_nvme_tier(nested, "zoff_rank0", test_aio(IoBackend::kThreads));
  EXPECT_TRUE(fs::is_directory(nested));
  EXPECT_TRUE(fs::exists(nested + "/zoff_rank0.lock"));
  tier.reset();
  EXPECT_FALSE(fs::exists(nested + "/zoff_rank0.lock"));
}

TEST(TierDirectory, NotADirectoryIsAUsageErrorNamingIt) {
  TempDir dir;
  const std::string file = dir.path() + "/plain_file";
  touch(file);
  const std::string msg =
      usage_error_of([&] { make_nvme_tier(file, "zoff_rank0", test_aio(IoBackend::kThreads)); });
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a directory"), std::string::npos) << msg;
}

TEST(TierDirectory, ReadOnlyFilesystemIsAUsageErrorNamingIt) {
  TempDir dir;
  const std::string ro = dir.path() + "/ro";
  fs::create_directory(ro);
  if (mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a read-only tmpfs here: " << std::strerror(errno);
  }
  const std::string msg =
      usage_error_of([&] { make_nvme_tier(ro, "zoff_rank0", test_aio(IoBackend::kThreads)); });
  umount(ro.c_str());
  EXPECT_NE(msg.find(ro), std::string::npos) << msg;
  EXPECT_NE(msg.find("not writable"), std::string::npos) << msg;
}

TEST(TierDirectory, SecondLiveOwnerRefused) {
  TempDir dir;
  auto first = make_nvme_tier(dir.path(), "zoff_rank0", test_aio(IoBackend::kThreads));
  const std::string msg = usage_error_of(
      [&] { make_nvme_tier(dir.path(), "zoff_rank0", test_aio(IoBackend::kThreads)); });
  EXPECT_NE(msg.find(dir.path() + "/zoff_rank0.lock"), std::string::npos) << msg;
  EXPECT_NE(msg.find("another live run"), std::string::npos) << msg;
  // Another owner (rank) in the same directory is fine; the first owner's files survive.
  auto region = first->allocate("master", 4096);
  auto other = make_nvme_tier(dir.path(), "zoff_rank1", test_aio(IoBackend::kThreads));
  EXPECT_TRUE(fs::exists(dir.path() + "/zoff_rank0.master.swp"));
  region.reset();
  first.reset();
  EXPECT_NO_THROW(make_nvme_tier(dir.path(), "zoff_rank0", test_aio(IoBackend::kThreads)));
}

TEST(TierDirectory, StaleFilesOfADeadRunRemovedOthersKept) {
  TempDir dir;
  const std::string d = dir.path() + "/";
  for (const char* stale : {"zoff_rank0.master.swp", "zoff_rank0.exp_avg_sq.swp"}) touch(d + stale);
  const std::vector<std::string> kept = {"zoff_rank1.master.swp",  "zoff_rank0.notes.txt",
                                         "zoff_rank0.UPPER.swp",   "zoff_rank0.swp",
                                         "zoff_rank00.master.swp", "mine.swp"};
  for (const auto& k : kept) touch(d + k);
  touch(d + "zoff_rank0.lock");  // a dead run's lock: nobody holds it
  ::testing::internal::CaptureStderr();
  auto tier = make_nvme_tier(dir.path(), "zoff_rank0", test_aio(IoBackend::kThreads));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(d + "zoff_rank0.master.swp"));
  EXPECT_FALSE(fs::exists(d + "zoff_rank0.exp_avg_sq.swp"));
  for (const auto& k : kept) EXPECT_TRUE(fs::exists(d + k)) << k;
  EXPECT_NE(err.find("zoff: warning: removed 2 stale NVMe tier file(s)"), std::string::npos) << err;
  size_t stale_lines = 0;
  for (size_t at = err.find("stale"); at != std::string::npos; at = err.find("stale", at + 1)) {
    ++stale_lines;
  }
  EXPECT_EQ(stale_lines, 1u) << err;  // one line, not one per file
}

TEST(TierDirectory, BadOwnerRefused) {
  TempDir dir;
  for (const char* owner : {"", "a/b", "a.b", "../x"}) {
    EXPECT_THROW(make_nvme_tier(dir.path(), owner, test_aio(IoBackend::kThreads)), UsageError)
        << owner;
  }
}

}  // namespace
}  // namespace zoff::offload::tier_directory_test
