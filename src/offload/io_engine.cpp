// Chooses the NVMe tier's I/O engine (io_uring, or the pread/pwrite pool) and says so once.
#include "io_engine.h"

#include <iostream>
#include <mutex>

#include "zoff/core/error.h"

namespace zoff::offload {

namespace {

void warn_threads_once(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::cerr << "zoff: warning: NVMe tier I/O uses the pread/pwrite thread pool (" << why << ")\n";
  });
}

}  // namespace

std::unique_ptr<IoEngine> make_io_engine(const AioOptions& aio) {
  if (aio.backend == IoBackend::kThreads) {
    const std::string why = "aio backend = threads";
    warn_threads_once(why);
    return make_thread_pool_engine(aio, why);
  }
  std::string why_not;
  auto uring = make_uring_engine(aio, &why_not);
  if (uring) return uring;
  ZOFF_CHECK(aio.backend != IoBackend::kUring, "aio backend io_uring was asked for but ", why_not);
  const std::string why = "io_uring refused: " + why_not;
  warn_threads_once(why);
  return make_thread_pool_engine(aio, why);
}

}  // namespace zoff::offload
