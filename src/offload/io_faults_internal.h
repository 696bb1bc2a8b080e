// The I/O backends' side of the fault seam: ask the installed hook about one request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "zoff/offload/io_faults.h"

namespace zoff::offload {

// 0 = run the request; -errno = fail it with that errno; k > 0 = let only k bytes move.
// A hook that throws fails the request with EIO. Cheap when no hook is installed.
int64_t consult_io_fault(IoOp op, const std::string& path, uint64_t offset, size_t bytes);

// Installs the hook ZOFF_IO_FAULT describes, once per process (later set_io_fault_hook calls
// replace it). Throws zoff::UsageError naming a malformed value. Called by make_nvme_tier,
// so a bad variable is a clean error at start-up and never an exception on an I/O thread.
void install_env_io_fault_hook();

// The hook ZOFF_IO_FAULT's grammar describes ("write:eio:1048576"); exposed for tests.
IoFaultHook parse_io_fault_spec(const std::string& spec);

}  // namespace zoff::offload
