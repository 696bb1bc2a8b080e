// The io_uring engine: one ring per NVMe tier, owned by one I/O thread that submits and reaps.
//
// Note: why one thread owns the ring. Regions of a tier transfer from several threads at
// once (the optimizer's reader and writer, a prefetcher). Instead of a mutex around the
// ring's submission side plus a separate reaper, callers only append their transfer to a
// mutex-protected queue and poke an eventfd; the I/O thread is the ring's only user: it
// keeps aio.queue_depth block requests in flight across all queued transfers, reaps their
// completions, resubmits the remainder of short ones and settles each transfer. A read of
// the eventfd is always armed in the ring, so new work wakes the thread out of its timed
// wait (1 s ticks; caller-side waits carry the tier's timeout). One hop to the I/O thread
// costs microseconds against blocks of ~1 MiB.
#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "io_engine.h"
#include "io_error.h"

namespace zoff::offload {

namespace {

constexpr uint64_t kWakeTag = 0;  // user_data of the eventfd read; slot i is tag i + 1

struct Slot {
  std::shared_ptr<Transfer> transfer;
  Block block;
  int64_t clamp = 0;  // > 0: an injected short transfer, count at most this many bytes
};

class UringEngine : public IoEngine {
 public:
  explicit UringEngine(const AioOptions& aio)
      : aio_(aio), slots_(static_cast<size_t>(aio.queue_depth)) {
    for (size_t i = slots_.size(); i > 0; --i) free_slots_.push_back(i - 1);
  }

  // Sets up the ring and the I/O thread; false (and `*why_not`) when the kernel refuses.
  bool start(std::string* why_not) {
    const int rc = io_uring_queue_init(static_cast<unsigned>(aio_.queue_depth) + 1, &ring_, 0);
    if (rc < 0) {
      *why_not = "io_uring_queue_init: " + errno_text(-rc);
      return false;
    }
    ring_ready_ = true;
    wake_fd_ = eventfd(0, EFD_CLOEXEC);
    if (wake_fd_ < 0) {
      *why_not = "eventfd: " + errno_text(errno);
      return false;
    }
    thread_ = std::thread([this] { loop(); });
    return true;
  }

  ~UringEngine() override {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
      }
      wake();
      thread_.join();  // the thread finishes every submitted transfer first
    }
    if (ring_ready_) io_uring_queue_exit(&ring_);
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  void submit(std::shared_ptr<Transfer> transfer) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      incoming_.push_back(std::move(transfer));
    }
    wake();
  }

  std::string description() const override { return "io_uring"; }

 private:
  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t rc = write(wake_fd_, &one, sizeof one);
  }
  void loop();
  bool accept_incoming();
  bool next_request(Slot* slot);
  void issue();
  void submit_prepared();
  void reap();
  void complete(uint64_t tag, int64_t result);
  void fail_everything(int err);

  const AioOptions aio_;
  int wake_fd_ = -1;
  io_uring ring_{};
  bool ring_ready_ = false;
  std::thread thread_;
  std::mutex mutex_;  // guards incoming_ and stop_
  std::deque<std::shared_ptr<Transfer>> incoming_;
  bool stop_ = false;
  // Owned by the I/O thread:
  std::deque<std::shared_ptr<Transfer>> active_;  // transfers with blocks not yet issued
  std::deque<Slot> retry_;                        // remainders of short requests
  std::vector<Slot> slots_;                       // requests in flight, by tag - 1
  std::vector<size_t> free_slots_;
  size_t in_flight_ = 0;
  size_t prepared_ = 0;  // SQEs prepared but not yet submitted
  bool wake_armed_ = false;
  uint64_t wake_value_ = 0;
};

void UringEngine::loop() {
  for (;;) {
    const bool stopping = accept_incoming();
    if (stopping && active_.empty() && retry_.empty() && in_flight_ == 0) return;
    issue();
    reap();
  }
}

bool UringEngine::accept_incoming() {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!incoming_.empty()) {
    active_.push_back(std::move(incoming_.front()));
    incoming_.pop_front();
  }
  return stop_;
}

bool UringEngine::next_request(Slot* slot) {
  if (!retry_.empty()) {
    *slot = std::move(retry_.front());
    retry_.pop_front();
    return true;
  }
  while (!active_.empty()) {
    if (active_.front()->take_block(&slot->block)) {
      slot->transfer = active_.front();
      return true;
    }
    active_.pop_front();  // fully issued or failed
  }
  return false;
}

void UringEngine::issue() {
  if (!wake_armed_) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, wake_fd_, &wake_value_, sizeof wake_value_, static_cast<__u64>(-1));
    io_uring_sqe_set_data64(sqe, kWakeTag);
    wake_armed_ = true;
    ++prepared_;
  }
  // overlap_events = false: a batch of up to queue_depth requests is reaped whole before
  // the next batch goes out (DeepSpeed's semantics); true: refill as each one completes.
  const bool may_issue = aio_.overlap_events || in_flight_ == 0;
  Slot slot;
  while (may_issue && !free_slots_.empty() && next_request(&slot)) {
    size_t issue_len = 0;
    const int64_t fault = fault_for_request(*slot.transfer, slot.block, &issue_len);
    if (fault < 0) {
      if (slot.transfer->settle(&slot.block, fault)) retry_.push_back(std::move(slot));
      continue;
    }
    const size_t index = free_slots_.back();
    free_slots_.pop_back();
    slot.clamp = fault;
    const TransferSpec& s = slot.transfer->spec();
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: the ring has qd + 1 entries
    char* buf = s.buf + slot.block.pos;
    const uint64_t at = s.offset + slot.block.pos;
    const auto len = static_cast<unsigned>(issue_len);
    if (s.op == IoOp::kRead) {
      io_uring_prep_read(sqe, s.fd, buf, len, at);
    } else {
      io_uring_prep_write(sqe, s.fd, buf, len, at);
    }
    io_uring_sqe_set_data64(sqe, index + 1);
    slots_[index] = std::move(slot);
    ++in_flight_;
    ++prepared_;
    if (aio_.single_submit) submit_prepared();
  }
  if (prepared_ > 0) submit_prepared();
}

void UringEngine::submit_prepared() {
  const int rc = io_uring_submit(&ring_);
  if (rc >= 0) {
    prepared_ = 0;
    return;
  }
  // Busy rings keep their SQEs and take them on the next call; anything else is fatal.
  if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) return;
  fail_everything(-rc);
}

void UringEngine::reap() {
  io_uring_cqe* cqe = nullptr;
  __kernel_timespec tick{1, 0};                                    // seconds, nanoseconds
  if (io_uring_wait_cqe_timeout(&ring_, &cqe, &tick) < 0) return;  // -ETIME, -EINTR
  unsigned head = 0;
  unsigned seen = 0;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    complete(cqe->user_data, cqe->res);
    ++seen;
  }
  io_uring_cq_advance(&ring_, seen);
}

void UringEngine::complete(uint64_t tag, int64_t result) {
  if (tag == kWakeTag) {
    wake_armed_ = false;  // re-armed by the next issue()
    return;
  }
  Slot slot = std::move(slots_[tag - 1]);
  if (!slot.transfer) return;  // already failed and freed by fail_everything
  free_slots_.push_back(tag - 1);
  --in_flight_;
  if (slot.clamp > 0 && result > slot.clamp) result = slot.clamp;
  if (slot.transfer->settle(&slot.block, result)) retry_.push_back(std::move(slot));
}

// The ring refused a submission for good: every transfer it holds fails with that errno.
void UringEngine::fail_everything(int err) {
  free_slots_.clear();
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].transfer) slots_[i].transfer->fail_block(slots_[i].block, err);
    slots_[i].transfer.reset();
    free_slots_.push_back(i);
  }
  in_flight_ = 0;
  for (auto& slot : retry_) slot.transfer->fail_block(slot.block, err);
  retry_.clear();
  Slot pending;
  while (next_request(&pending)) pending.transfer->fail_block(pending.block, err);
}

}  // namespace

std::unique_ptr<IoEngine> make_uring_engine(const AioOptions& aio, std::string* why_not) {
  *why_not = io_uring_unavailable_reason();
  if (!why_not->empty()) return nullptr;
  auto engine = std::make_unique<UringEngine>(aio);
  if (!engine->start(why_not)) return nullptr;
  return engine;
}

}  // namespace zoff::offload
