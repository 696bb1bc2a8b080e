// One asynchronous transfer between host memory and a tier file, split into block requests.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "zoff/offload/io_faults.h"
#include "zoff/offload/io_request.h"

namespace zoff::offload {

struct TransferSpec {
  IoOp op = IoOp::kRead;
  int fd = -1;
  std::string path;
  size_t file_bytes = 0;    // the file's expected size (a short read before it = truncated)
  uint64_t offset = 0;      // bytes into the file
  char* buf = nullptr;      // host side; a write only reads it
  size_t length = 0;        // bytes, already padded to the alignment
  size_t block_size = 0;    // bytes per request
  size_t alignment = 4096;  // bytes; with `direct`, a resubmitted remainder starts aligned
  bool direct = true;
};

// One request in flight: `len` bytes at `pos` bytes into the transfer.
struct Block {
  size_t pos = 0;
  size_t len = 0;
  int stalls = 0;  // resubmissions in a row that moved no whole aligned unit
};

// Shared by a backend (which issues blocks) and the IoRequest (which waits). Every method
// is thread-safe. The -errno of a failed request becomes a message here and an exception
// only in wait_for(), on the waiting thread.
class Transfer {
 public:
  explicit Transfer(TransferSpec spec);
  const TransferSpec& spec() const { return spec_; }

  // The next block to issue; false when every block is issued or the transfer failed.
  bool take_block(Block* block);
  // The result of one request of `block` (bytes moved or -errno). Returns true when the
  // remainder of `block` (updated in place) must be issued again; otherwise the block is
  // finished (done or failed) and accounted for.
  bool settle(Block* block, int64_t result);
  // Fails the block without a result (the backend could not issue it).
  void fail_block(const Block& block, int err);

  // True once every issued block is finished and nothing more will be issued; throws
  // zoff::Error with the first failure's message.
  bool wait_for(std::chrono::milliseconds timeout);

 private:
  void finish_locked(std::unique_lock<std::mutex>& lock);
  void fail_locked(const std::string& message);

  const TransferSpec spec_;
  std::mutex mutex_;
  std::condition_variable finished_;
  size_t next_pos_ = 0;  // first byte not yet handed out as a block
  size_t in_flight_ = 0;
  std::string error_;  // first failure; empty while all is well
};

// The IoCompletion an IoRequest holds: keeps the transfer alive while the backend runs it.
class TransferCompletion : public IoCompletion {
 public:
  explicit TransferCompletion(std::shared_ptr<Transfer> transfer)
      : transfer_(std::move(transfer)) {}
  bool wait_for(std::chrono::milliseconds timeout) override { return transfer_->wait_for(timeout); }

 private:
  std::shared_ptr<Transfer> transfer_;
};

// Runs the fault hook for one request about to be issued. Returns 0 (issue `len` bytes as
// they are), -errno (do not issue; the request failed) or the clamp k > 0: issue
// `*issue_len` bytes (k rounded up to the alignment when direct) and count at most k moved.
int64_t fault_for_request(const Transfer& t, const Block& block, size_t* issue_len);

// The host-side rules of TierRegion::read/write (tier.h), checked with zoff::Error naming
// the region and the bad value: `buf` aligned, `offset` a multiple of `alignment`, and the
// transfer inside the region.
void check_transfer_rules(IoOp op, const std::string& region, size_t region_bytes, size_t alignment,
                          uint64_t offset, const void* buf, size_t n);

}  // namespace zoff::offload
