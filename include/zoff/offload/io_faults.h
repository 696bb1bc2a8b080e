// A fault-injection seam in the NVMe tier's I/O: tests make reads and writes fail or fall short.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace zoff::offload {

enum class IoOp { kRead, kWrite };

// Consulted before every read or write request the NVMe tier issues (one block of at most
// aio.block_size bytes). Returns 0 to let the request run, -errno to fail it with that
// errno (e.g. -EIO), or k > 0 to make it transfer only k bytes (a short read or write,
// which the tier must complete with further requests). Runs on I/O threads.
using IoFaultHook =
    std::function<int64_t(IoOp op, const std::string& path, uint64_t offset, size_t bytes)>;

// Installs a process-wide hook (an empty function removes it). Also set at start-up from
// the environment variable ZOFF_IO_FAULT="<read|write>:<eio|enospc|short>:<after>", which
// fails (or shortens) every request of that kind once `after` bytes of that kind have
// moved: the seam the CLI fault tests use to make a whole run fail mid-step.
void set_io_fault_hook(IoFaultHook hook);

}  // namespace zoff::offload
