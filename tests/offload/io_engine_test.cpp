// Engine choice: io_uring refused (a seccomp filter, as in a sandbox) falls back to threads,
// loudly.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>

#include "offload_test_support.h"
#include "zoff/core/error.h"
#include "zoff/offload/tier.h"

namespace zoff::offload::io_engine_test {
namespace {

// Makes io_uring_setup fail with EPERM in this process, as Docker's default profile does.
bool refuse_io_uring() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

// In a fresh process (the filter cannot be undone, and the warning is once per process):
// kAuto with io_uring refused; prints what the
// tier says and whether a round trip worked. Exit code 3 = the filter could not be set.
void child(const std::string& dir) {
  if (!refuse_io_uring()) _exit(3);
  try {
    auto tier = make_nvme_tier(dir, "zoff_rank0", testing::test_aio(IoBackend::kAuto));
    auto region = tier->allocate("r", 10000);
    HostBuffer src(10000, 4096), dst(10000, 4096);
    testing::fill_pattern(src.data(), 10000, 9);
    region->write(0, src.data(), 10000).wait();
    region->read(0, dst.data(), 10000).wait();
    const bool same = std::memcmp(src.data(), dst.data(), 10000) == 0;
    std::printf("%s|%s\n", tier->io_description().c_str(), same ? "same" : "different");
    bool refused = false;
    try {
      make_nvme_tier(dir, "zoff_rank1", testing::test_aio(IoBackend::kUring));
    } catch (const Error& e) {
      refused = std::string(e.what()).find("io_uring") != std::string::npos;
    }
    std::printf("uring-asked:%s\n", refused ? "refused" : "accepted");
    std::fflush(stdout);
    _exit(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child: %s\n", e.what());
    _exit(1);
  }
}

std::string read_all(int fd) {
  std::string out;
  char buf[1024];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

// The body of the child process the next test starts; skipped when run on its own.
TEST(IoEngineChoice, SeccompChild) {
  const char* dir = std::getenv("ZOFF_TEST_SECCOMP_DIR");
  if (dir == nullptr) GTEST_SKIP() << "runs only as the child of the next test";
  child(dir);
}

TEST(IoEngineChoice, RefusedIoUringFallsBackToThreadsWithOneWarning) {
  testing::TempDir dir;
  int out[2], err[2];
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(err), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(out[0]);
    close(err[0]);
    setenv("ZOFF_TEST_SECCOMP_DIR", dir.path().c_str(), 1);
    execl("/proc/self/exe", "zoff_test_offload", "--gtest_filter=IoEngineChoice.SeccompChild",
          static_cast<char*>(nullptr));
    _exit(4);
  }
  close(out[1]);
  close(err[1]);
  const std::string stdout_text = read_all(out[0]);
  const std::string stderr_text = read_all(err[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << stderr_text;
  if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "cannot install a seccomp filter here";
  ASSERT_NE(WEXITSTATUS(status), 4) << "cannot run /proc/self/exe";
  ASSERT_EQ(WEXITSTATUS(status), 0) << stderr_text;
  EXPECT_NE(stdout_text.find("threads (io_uring refused: io_uring_queue_init: Operation not "
                             "permitted (EPERM 1)), O_DIRECT|same"),
            std::string::npos)
      << stdout_text;
  EXPECT_NE(stdout_text.find("uring-asked:refused"), std::string::npos) << stdout_text;
  EXPECT_EQ(stderr_text,
            "zoff: warning: NVMe tier I/O uses the pread/pwrite thread pool (io_uring refused: "
            "io_uring_queue_init: Operation not permitted (EPERM 1))\n");
}

}  // namespace
}  // namespace zoff::offload::io_engine_test
