// One wording for every I/O failure, real or injected: file, operation, offset, errno.
#include "io_error.h"

#include <cstring>

#include "zoff/core/error.h"

namespace zoff::offload {

const char* to_string(IoOp op) { return op == IoOp::kRead ? "read" : "write"; }

std::string errno_text(int err) {
  const char* name = strerrorname_np(err);
  return detail::concat(std::strerror(err), " (", name != nullptr ? name : "errno", " ", err, ")");
}

std::string io_error_message(IoOp op, const std::string& path, uint64_t offset, size_t bytes,
                             int err) {
  return detail::concat(to_string(op), " of ", path, " failed at offset ", offset, " (", bytes,
                        " bytes): ", errno_text(err));
}

void throw_errno(const std::string& what, const std::string& path, int err) {
  throw Error(detail::concat(what, " of ", path, ": ", errno_text(err)));
}

}  // namespace zoff::offload
