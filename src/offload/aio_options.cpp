// Parsing and validation of the NVMe tier's aio options, and the io_uring availability probe.
#include "zoff/offload/aio_options.h"

#include <liburing.h>

#include "io_error.h"
#include "zoff/core/error.h"

namespace zoff::offload {

namespace {
constexpr size_t kDiskAlignment = 4096;  // bytes; O_DIRECT on every filesystem we meet
}  // namespace

IoBackend parse_io_backend(const std::string& name) {
  if (name == "auto") return IoBackend::kAuto;
  if (name == "io_uring") return IoBackend::kUring;
  if (name == "threads") return IoBackend::kThreads;
  throw UsageError("aio backend '" + name + "': must be one of auto, io_uring, threads");
}

std::string to_string(IoBackend backend) {
  switch (backend) {
    case IoBackend::kAuto:
      return "auto";
    case IoBackend::kUring:
      return "io_uring";
    case IoBackend::kThreads:
      return "threads";
  }
  return "?";
}

void validate_aio_options(const AioOptions& aio) {
  ZOFF_CHECK_ARG(aio.block_size > 0 && aio.block_size % kDiskAlignment == 0,
                 "aio.block_size = ", aio.block_size, ": must be a positive multiple of ",
                 kDiskAlignment, " bytes");
  ZOFF_CHECK_ARG(aio.queue_depth >= 1 && aio.queue_depth <= 1024,
                 "aio.queue_depth = ", aio.queue_depth, ": must be in [1, 1024]");
  ZOFF_CHECK_ARG(aio.thread_count >= 1 && aio.thread_count <= 256,
                 "aio.thread_count = ", aio.thread_count, ": must be in [1, 256]");
  ZOFF_CHECK_ARG(aio.timeout.count() > 0, "aio timeout = ", aio.timeout.count(),
                 " ms: must be > 0");
}

std::string io_uring_unavailable_reason() {
  // A probe ring: what a sandbox (seccomp), an old kernel or io_uring_disabled refuses.
  io_uring ring;
  const int rc = io_uring_queue_init(2, &ring, 0);
  if (rc < 0) return "io_uring_queue_init: " + errno_text(-rc);
  const bool ext_arg = (ring.features & IORING_FEAT_EXT_ARG) != 0;
  io_uring_queue_exit(&ring);
  // Without EXT_ARG a timed wait would post a timeout SQE from the waiting thread.
  if (!ext_arg) return "io_uring without IORING_FEAT_EXT_ARG (kernel < 5.11)";
  return "";
}

}  // namespace zoff::offload
