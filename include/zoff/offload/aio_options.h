// How the NVMe tier does its I/O: DeepSpeed's `aio` section plus zoff's backend choice and timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace zoff::offload {

// Which engine moves the bytes. kAuto tries io_uring and falls back to the thread pool
// (with one warning line saying why) when the kernel or a sandbox refuses it.
enum class IoBackend { kAuto, kUring, kThreads };

struct AioOptions {
  // Bytes per request a transfer is split into (DeepSpeed aio.block_size; a multiple of the
  // 4096-byte alignment).
  size_t block_size = size_t{1} << 20;
  // Requests in flight at once per tier (DeepSpeed aio.queue_depth).
  int queue_depth = 8;
  // Threads of the pread/pwrite fallback (DeepSpeed aio.thread_count); io_uring uses one
  // completion thread whatever this says.
  int thread_count = 1;
  // Submit each request by itself instead of a batch per transfer (DeepSpeed aio.single_submit).
  bool single_submit = false;
  // Reap completions while still submitting (DeepSpeed aio.overlap_events); when false a
  // transfer submits all its requests before reaping any.
  bool overlap_events = true;
  IoBackend backend = IoBackend::kAuto;
  // O_DIRECT (bypass the page cache). When the filesystem refuses it (tmpfs), files are
  // opened buffered, with one warning line.
  bool direct = true;
  // Every wait gives up after this long with zoff::Error naming the file (a wedged device,
  // a lost completion). Disk transfers of a sub-group take well under a second.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

// "io_uring" | "threads" | "auto" <-> IoBackend; a bad name throws zoff::UsageError naming it.
IoBackend parse_io_backend(const std::string& name);
std::string to_string(IoBackend backend);

// Throws zoff::UsageError naming the bad value: block_size a positive multiple of 4096,
// queue_depth in [1, 1024], thread_count in [1, 256], timeout > 0.
void validate_aio_options(const AioOptions& aio);

// Empty when this process may use io_uring; otherwise why not ("io_uring_queue_init:
// Operation not permitted"). Tests skip the io_uring cases on a non-empty answer.
std::string io_uring_unavailable_reason();

}  // namespace zoff::offload
