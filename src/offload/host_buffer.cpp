// An owned, aligned, zero-filled block of host memory, optionally locked in RAM (mlock).
#include "zoff/offload/host_buffer.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "io_error.h"
#include "zoff/core/error.h"
#include "zoff/core/own_mapping.h"
#include "zoff/core/round_up.h"

namespace zoff::offload {

namespace {

std::string memlock_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return std::to_string(limit.rlim_cur) + " bytes";
}

}  // namespace

void HostBuffer::Free::operator()(void* p) const {
  if (locked) munlock(p, capacity);
  if (mapped) {
    unmap_own(p, capacity);
  } else {
    std::free(p);
  }
}

HostBuffer::HostBuffer(size_t bytes, size_t alignment, bool lock) {
  ZOFF_CHECK_ARG(alignment >= 64 && (alignment & (alignment - 1)) == 0,
                 "host buffer alignment = ", alignment, ": must be a power of two >= 64");
  bytes_ = bytes;
  capacity_ = round_up(bytes, alignment);
  if (capacity_ == 0) return;
  // Large buffers are mappings of their own (zero already), so a freed one leaves RSS at
  // once whatever malloc's thresholds are (own_mapping.h); small ones come from malloc.
  const bool mapped = capacity_ >= kOwnMappingMinBytes;
  void* p = nullptr;
  if (mapped) {
    p = map_own(capacity_, alignment);
  } else {
    const int rc = posix_memalign(&p, alignment, capacity_);
    ZOFF_CHECK(rc == 0 && p != nullptr, "host buffer: cannot allocate ", capacity_,
               " bytes: ", errno_text(rc));
    std::memset(p, 0, capacity_);
  }
  data_ = std::unique_ptr<void, Free>(p, Free{capacity_, false, mapped});
  if (lock) {
    if (mlock(p, capacity_) != 0) {
      const int err = errno;
      throw Error(detail::concat("host buffer: cannot lock ", capacity_, " bytes in RAM (mlock: ",
                                 errno_text(err), "); RLIMIT_MEMLOCK is ", memlock_limit()));
    }
    data_.get_deleter().locked = true;
    locked_ = true;
  }
}

}  // namespace zoff::offload
