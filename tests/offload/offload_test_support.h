// Shared helpers of the offload tests: temporary directories, byte patterns, aio options.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "zoff/offload/aio_options.h"
#include "zoff/offload/host_buffer.h"
#include "zoff/offload/io_faults.h"

namespace zoff::offload::testing {

// On this machine /var/tmp is on the real disk (ext4, O_DIRECT works). /dev/shm is a
// tmpfs, which refused O_DIRECT before Linux 6.6 but takes it since; a ramfs still refuses
// it, so the buffered fallback is tested on a ramfs mounted for the test (RamfsDir).
inline const char* kDiskBase = "/var/tmp";
inline const char* kShmBase = "/dev/shm";

// A fresh directory `<base>/zoff_offload_test.XXXXXX`, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& base = kDiskBase) {
    std::string templ = base + "/zoff_offload_test.XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp " + templ);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A ramfs (no O_DIRECT) mounted on a fresh directory; mounted() is false (and why() says
// why) where mounting is not allowed, and the test then skips.
class RamfsDir {
 public:
  RamfsDir() {
    if (mount("ramfs", dir_.path().c_str(), "ramfs", 0, nullptr) == 0) {
      mounted_ = true;
    } else {
      why_ = std::string("cannot mount a ramfs (a filesystem without O_DIRECT): ") +
             std::strerror(errno);
    }
  }
  ~RamfsDir() {
    if (mounted_) umount(dir_.path().c_str());
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string why_;
};

// Bytes that differ at every position and between seeds.
inline void fill_pattern(void* dst, size_t n, uint32_t seed) {
  auto* p = static_cast<uint8_t*>(dst);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<uint8_t>(x >> 24);
  }
}

// Small blocks, so even small transfers are split into several requests in flight.
inline AioOptions test_aio(IoBackend backend) {
  AioOptions aio;
  aio.backend = backend;
  aio.block_size = 8192;
  aio.queue_depth = 4;
  aio.thread_count = 2;
  aio.timeout = std::chrono::seconds(20);
  return aio;
}

// Installs a fault hook for one test and removes it after.
class FaultHookGuard {
 public:
  explicit FaultHookGuard(IoFaultHook hook) { set_io_fault_hook(std::move(hook)); }
  ~FaultHookGuard() { set_io_fault_hook({}); }
};

}  // namespace zoff::offload::testing

// io_uring refused (seccomp, old kernel) is a skipped test, never a failed one.
#define ZOFF_SKIP_WITHOUT_URING(backend)                                      \
  do {                                                                        \
    if ((backend) == ::zoff::offload::IoBackend::kUring) {                    \
      const std::string why = ::zoff::offload::io_uring_unavailable_reason(); \
      if (!why.empty()) GTEST_SKIP() << "io_uring unavailable: " << why;      \
    }                                                                         \
  } while (0)
