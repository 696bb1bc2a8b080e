// One asynchronous transfer split into block requests: short results, truncation, first error.
#include "transfer.h"

#include <cerrno>

#include "io_error.h"
#include "io_faults_internal.h"
#include "zoff/core/error.h"

namespace zoff::offload {

namespace {
// A request that keeps moving less than one aligned unit is retried this many times in a
// row before the transfer fails (it would otherwise spin forever).
constexpr int kMaxStalls = 64;
}  // namespace

Transfer::Transfer(TransferSpec spec) : spec_(std::move(spec)) {}

bool Transfer::take_block(Block* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_.empty() || next_pos_ >= spec_.length) return false;
  block->pos = next_pos_;
  block->len = std::min(spec_.block_size, spec_.length - next_pos_);
  block->stalls = 0;
  next_pos_ += block->len;
  ++in_flight_;
  return true;
}

void Transfer::finish_locked(std::unique_lock<std::mutex>& lock) {
  --in_flight_;
  const bool over = in_flight_ == 0 && (!error_.empty() || next_pos_ >= spec_.length);
  lock.unlock();
  if (over) finished_.notify_all();
}

void Transfer::fail_locked(const std::string& message) {
  if (error_.empty()) error_ = message;
}

void Transfer::fail_block(const Block& block, int err) {
  std::unique_lock<std::mutex> lock(mutex_);
  fail_locked(io_error_message(spec_.op, spec_.path, spec_.offset + block.pos, block.len, err));
  finish_locked(lock);
}

bool Transfer::settle(Block* block, int64_t result) {
  const uint64_t at = spec_.offset + block->pos;  // bytes into the file
  if (result == -EINTR || result == -EAGAIN) return true;
  if (result < 0) {
    fail_block(*block, static_cast<int>(-result));
    return false;
  }
  if (result == 0 && spec_.op == IoOp::kRead) {
    std::unique_lock<std::mutex> lock(mutex_);
    fail_locked(detail::concat("read of ", spec_.path, " hit the end of the file at offset ", at,
                               ": expected ", spec_.file_bytes, " bytes (the file was truncated)"));
    finish_locked(lock);
    return false;
  }
  const auto moved = static_cast<size_t>(result);
  if (moved >= block->len) {
    std::unique_lock<std::mutex> lock(mutex_);
    finish_locked(lock);
    return false;
  }
  // Short: resubmit the rest. With O_DIRECT the rest must start aligned, so the last
  // partial unit is moved again (harmless: same bytes, same place).
  const size_t step = spec_.direct ? moved / spec_.alignment * spec_.alignment : moved;
  if (step == 0) {
    if (++block->stalls <= kMaxStalls) return true;
    std::unique_lock<std::mutex> lock(mutex_);
    fail_locked(detail::concat(to_string(spec_.op), " of ", spec_.path,
                               " made no progress at offset ", at, " after ", kMaxStalls,
                               " short requests"));
    finish_locked(lock);
    return false;
  }
  block->pos += step;
  block->len -= step;
  block->stalls = 0;
  return true;
}

bool Transfer::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool over = finished_.wait_for(lock, timeout, [&] {
    return in_flight_ == 0 && (!error_.empty() || next_pos_ >= spec_.length);
  });
  if (!over) return false;
  if (!error_.empty()) throw Error(error_);
  return true;
}

int64_t fault_for_request(const Transfer& t, const Block& block, size_t* issue_len) {
  const TransferSpec& s = t.spec();
  *issue_len = block.len;
  const int64_t fault = consult_io_fault(s.op, s.path, s.offset + block.pos, block.len);
  if (fault <= 0 || static_cast<size_t>(fault) >= block.len) return fault < 0 ? fault : 0;
  const auto k = static_cast<size_t>(fault);
  // O_DIRECT lengths must stay aligned: issue whole units, report only k bytes moved.
  *issue_len =
      s.direct ? std::min(block.len, (k + s.alignment - 1) / s.alignment * s.alignment) : k;
  return fault;
}

void check_transfer_rules(IoOp op, const std::string& region, size_t region_bytes, size_t alignment,
                          uint64_t offset, const void* buf, size_t n) {
  const auto address = reinterpret_cast<uintptr_t>(buf);
  ZOFF_CHECK(n == 0 || address % alignment == 0, to_string(op), " of region ", region,
             ": host buffer ", buf, " is not aligned to ", alignment, " bytes");
  ZOFF_CHECK(offset % alignment == 0, to_string(op), " of region ", region, ": offset ", offset,
             " is not a multiple of ", alignment, " bytes");
  ZOFF_CHECK(offset <= region_bytes && n <= region_bytes - offset, to_string(op), " of region ",
             region, ": ", n, " bytes at offset ", offset, " run past its end (", region_bytes,
             " bytes)");
}

}  // namespace zoff::offload
