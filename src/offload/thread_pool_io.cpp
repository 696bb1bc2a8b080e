// The pread/pwrite fallback engine: aio.thread_count workers take blocks off a shared queue.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "io_engine.h"

namespace zoff::offload {

namespace {

// Workers pull the next block of the oldest transfer, so one large transfer is spread
// over every thread (its blocks in flight at once) and transfers finish in order.
class ThreadPoolEngine : public IoEngine {
 public:
  ThreadPoolEngine(const AioOptions& aio, std::string why) : why_(std::move(why)) {
    const int threads = std::min(aio.thread_count, aio.queue_depth);
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  ~ThreadPoolEngine() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();  // workers drain the queue before they leave
  }

  void submit(std::shared_ptr<Transfer> transfer) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(transfer));
    }
    wake_.notify_all();
  }

  std::string description() const override { return "threads (" + why_ + ")"; }

 private:
  void worker_loop();
  static void run_block(Transfer& t, Block block);

  const std::string why_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Transfer>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

void ThreadPoolEngine::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    // Idle wait for work, in 1 s ticks: not a wait for a result (those are the IoRequest's).
    wake_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    std::shared_ptr<Transfer> t = queue_.front();
    Block block;
    if (!t->take_block(&block)) {
      queue_.pop_front();  // fully issued (or failed): the transfer's last blocks are in flight
      continue;
    }
    lock.unlock();
    run_block(*t, block);
    lock.lock();
  }
}

void ThreadPoolEngine::run_block(Transfer& t, Block block) {
  const TransferSpec& s = t.spec();
  for (;;) {
    size_t issue = 0;
    const int64_t fault = fault_for_request(t, block, &issue);
    int64_t result = fault;
    if (fault >= 0) {
      const auto at = static_cast<off_t>(s.offset + block.pos);
      const ssize_t rc = s.op == IoOp::kRead ? pread(s.fd, s.buf + block.pos, issue, at)
                                             : pwrite(s.fd, s.buf + block.pos, issue, at);
      result = rc < 0 ? -errno : rc;
      if (fault > 0 && result > fault) result = fault;  // injected short transfer
    }
    if (!t.settle(&block, result)) return;
  }
}

}  // namespace

std::unique_ptr<IoEngine> make_thread_pool_engine(const AioOptions& aio, std::string why) {
  return std::make_unique<ThreadPoolEngine>(aio, std::move(why));
}

}  // namespace zoff::offload
