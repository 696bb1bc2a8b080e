// One wording for every I/O failure, real or injected: file, operation, offset, errno.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "zoff/offload/io_faults.h"

namespace zoff::offload {

const char* to_string(IoOp op);  // "read" | "write"

// "read of /dir/f.swp failed at offset 4096 (1048576 bytes): Input/output error (EIO)"
std::string io_error_message(IoOp op, const std::string& path, uint64_t offset, size_t bytes,
                             int err);

// "<what> of <path>: <strerror> (<ENAME>)" for the synchronous calls (open, fallocate,
// fstat, flock...), thrown as zoff::Error.
[[noreturn]] void throw_errno(const std::string& what, const std::string& path, int err);

// "Input/output error (EIO)"
std::string errno_text(int err);

}  // namespace zoff::offload
