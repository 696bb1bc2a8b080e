// `zoff bench io`'s measurement of the NVMe tier's own I/O path for the optimizer's swap pattern.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "zoff/offload/aio_options.h"

namespace zoff::offload {

struct IoBenchOptions {
  std::string dir = "/var/tmp";              // where the tier's file goes (as nvme_path)
  size_t file_bytes = size_t{2} << 30;       // one region this large, written then read
  size_t transfer_bytes = size_t{64} << 20;  // one sub-group's swap: one read()/write()
  AioOptions aio;
};

// Throws zoff::UsageError naming a bad value (sizes must be positive multiples of 4096).
void validate_io_bench_options(const IoBenchOptions& options);

// The swap pattern of the sub-group optimizer step: the file is streamed front to back in
// transfers of transfer_bytes, two in flight at once (double buffering: one transfer lands
// while the next is issued), each split by the tier into aio.block_size requests with
// aio.queue_depth in flight. One write pass then one read pass.
class IoBench {
 public:
  explicit IoBench(IoBenchOptions options);
  ~IoBench();
  double write_pass();  // GB/s
  double read_pass();   // GB/s
  std::string io_description() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace zoff::offload
