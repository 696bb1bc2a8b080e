// What moves a tier file's bytes: io_uring or a pread/pwrite pool, behind one small interface.
#pragma once

#include <memory>
#include <string>

#include "transfer.h"
#include "zoff/offload/aio_options.h"

namespace zoff::offload {

// Runs transfers asynchronously; one engine per NVMe tier, shared by its regions and safe
// to call from any thread. At most aio.queue_depth requests (uring) or aio.thread_count
// (threads) are in flight at once. Destruction finishes every transfer already submitted.
class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual void submit(std::shared_ptr<Transfer> transfer) = 0;
  // "io_uring" or "threads (io_uring refused: ...)"
  virtual std::string description() const = 0;
};

// The engine `aio.backend` asks for. kAuto falls back to threads when io_uring is refused,
// with one warning line per process; kUring throws zoff::Error when it is refused.
std::unique_ptr<IoEngine> make_io_engine(const AioOptions& aio);

// nullptr (and `*why_not` set) when the kernel refuses io_uring.
std::unique_ptr<IoEngine> make_uring_engine(const AioOptions& aio, std::string* why_not);
std::unique_ptr<IoEngine> make_thread_pool_engine(const AioOptions& aio, std::string why);

}  // namespace zoff::offload
